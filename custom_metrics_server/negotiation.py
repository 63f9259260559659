"""Content negotiation: which representation an `Accept` header allows.

PURE. Mirrors `k8s.io/apiserver/pkg/endpoints/handlers/negotiation`: clauses with q-values,
`type/subtype`, `type/*` and `*/*` wildcards; a clause carrying a conversion request
(`as=Table;g=meta.k8s.io;v=v1`), `stream=` or `sv=` is unacceptable on metric endpoints.
This server encodes JSON only, so the HPA's `application/vnd.kubernetes.protobuf, */*` gets
JSON and a protobuf-only Accept gets 406. Results are cached per header value (clients send
the same few headers over and over).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from custom_metrics_server.errors import NotAcceptable, not_acceptable

JSON: Final = "application/json"
SERVED_MEDIA_TYPES: Final = (JSON,)
_CONVERSION_PARAMS: Final = frozenset({"as", "g", "v", "stream", "sv"})
_PRETTY_AGENTS: Final = ("curl", "Wget", "Mozilla/5.0")


@dataclass(frozen=True, slots=True)
class Representation:
    """What to send: the media type and whether to indent."""

    media_type: str
    pretty: bool


_PLAIN: Final = Representation(JSON, pretty=False)
_PRETTY: Final = Representation(JSON, pretty=True)


@lru_cache(maxsize=256)
def negotiate(accept: str, *, discovery_root: bool = False) -> Representation | NotAcceptable:
    """The representation for an Accept header, or the 406 error to send.

    `/apis` never answers 406: the aggregator asks for the v2 aggregated document there and
    must get the plain `APIGroupList` (contract section 4.4, option a) to fall back correctly.
    """
    if not accept.strip():
        return _PLAIN
    best: tuple[float, bool] | None = None
    for clause in accept.split(","):
        media, _, raw_params = clause.strip().partition(";")
        media = media.strip().lower()
        params: dict[str, str] = {}
        for param in raw_params.split(";"):
            key, _, value = param.strip().partition("=")
            if key:
                params[key.strip().lower()] = value.strip()
        try:
            quality = float(params.get("q", "1"))
        except ValueError:
            quality = 1.0
        if quality <= 0 or media not in (JSON, "application/*", "*/*"):
            continue
        if not discovery_root and _CONVERSION_PARAMS & params.keys():
            continue
        pretty = params.get("pretty", "") in ("1", "true")
        if best is None or quality > best[0]:
            best = (quality, pretty)
    if best is None:
        if discovery_root:
            return _PLAIN
        return not_acceptable(SERVED_MEDIA_TYPES)
    return _PRETTY if best[1] else _PLAIN


def pretty_user_agent(user_agent: str) -> bool:
    """Upstream indents for curl, Wget and browsers (`isPrettyPrint`)."""
    return user_agent.startswith(_PRETTY_AGENTS)
