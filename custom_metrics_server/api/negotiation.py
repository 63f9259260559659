"""Content negotiation: which representation an `Accept` header allows.

PURE. Mirrors `k8s.io/apiserver/pkg/endpoints/handlers/negotiation`: clauses with q-values,
`type/subtype`, `type/*` and `*/*` wildcards; a clause carrying a conversion request
(`as=Table;g=meta.k8s.io;v=v1`), `stream=` or `sv=` is unacceptable on metric endpoints.
Two media types are served, JSON (the server's first choice, so `*/*` and `application/*` get
it) and Kubernetes protobuf. As goautoneg orders clauses, the highest q wins and, at equal q,
an exact type beats a wildcard: the HPA's `application/vnd.kubernetes.protobuf, */*` gets
protobuf, like a Go server answers it. Results are cached per header value (clients send the
same few headers over and over).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from custom_metrics_server.errors import NotAcceptable, not_acceptable

JSON: Final = "application/json"
PROTOBUF: Final = "application/vnd.kubernetes.protobuf"
#: In the server's order of preference (`*/*` gets the first); the 406 message lists them.
SERVED_MEDIA_TYPES: Final = (JSON, PROTOBUF)
#: Accept parameters that ask for a conversion (Table, PartialObjectMetadata, streams).
CONVERSION_PARAMS: Final = frozenset({"as", "g", "v", "stream", "sv"})
_PRETTY_AGENTS: Final = ("curl", "Wget", "Mozilla/5.0")


@dataclass(frozen=True, slots=True)
class Representation:
    """What to send: the media type and whether to indent (JSON only)."""

    media_type: str
    pretty: bool

    @property
    def protobuf(self) -> bool:
        """Whether the body is Kubernetes protobuf."""
        return self.media_type == PROTOBUF


_PLAIN: Final = Representation(JSON, pretty=False)
_PRETTY: Final = Representation(JSON, pretty=True)
_PROTOBUF: Final = Representation(PROTOBUF, pretty=False)
# How specific a served clause is: at equal q the more specific wins (goautoneg's order).
#: How specific each served media range is: an exact type beats `application/*` and `*/*`.
SPECIFICITY: Final = {JSON: 2, PROTOBUF: 2, "application/*": 1, "*/*": 0}


@lru_cache(maxsize=256)
def negotiate(accept: str, *, discovery_root: bool = False) -> Representation | NotAcceptable:
    """The representation for an Accept header, or the 406 error to send.

    The best clause is the one with the highest q, then the most specific media type, then
    the first written. `/apis` never answers 406: the aggregator asks for the v2 aggregated
    document there (a conversion clause, skipped) and must get the plain `APIGroupList`
    (contract section 4.4, option a) to fall back correctly; with nothing else acceptable
    it gets JSON. O(len(accept)), cached.
    """
    if not accept.strip():
        return _PLAIN
    best: tuple[float, int, Representation] | None = None
    for media, params, quality in accept_clauses(accept):
        specificity = SPECIFICITY.get(media)
        if specificity is None or CONVERSION_PARAMS & params.keys():
            continue
        if media == PROTOBUF:
            chosen = _PROTOBUF
        else:
            chosen = _PRETTY if params.get("pretty", "") in ("1", "true") else _PLAIN
        if best is None or (quality, specificity) > best[:2]:
            best = (quality, specificity, chosen)
    if best is None:
        if discovery_root:
            return _PLAIN
        return not_acceptable(SERVED_MEDIA_TYPES)
    return best[2]


@lru_cache(maxsize=256)
def accept_clauses(accept: str) -> tuple[tuple[str, Mapping[str, str], float], ...]:
    """(media type, parameters, q) of each acceptable clause of an Accept header, in order.

    Media types and parameter names are lower-cased; clauses with q <= 0 are dropped, and an
    unparsable q counts as 1 (as upstream's parser does). O(len(accept)), cached.
    """
    out = []
    for clause in accept.split(","):
        media, _, raw_params = clause.strip().partition(";")
        params: dict[str, str] = {}
        for param in raw_params.split(";"):
            key, _, value = param.strip().partition("=")
            if key:
                params[key.strip().lower()] = value.strip()
        try:
            quality = float(params.get("q", "1"))
        except ValueError:
            quality = 1.0
        if quality > 0:
            out.append((media.strip().lower(), params, quality))
    return tuple(out)


def pretty_user_agent(user_agent: str) -> bool:
    """Upstream indents for curl, Wget and browsers (`isPrettyPrint`)."""
    return user_agent.startswith(_PRETTY_AGENTS)
