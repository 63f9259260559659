"""Content negotiation: which representation an `Accept` header allows.

PURE. Owns every reading of `Accept`; it must not build or encode documents.

Metric values (`negotiate`) mirror `k8s.io/apiserver/pkg/endpoints/handlers/negotiation` with
this server's documented strictness: clauses with q-values, `type/subtype`, `type/*` and `*/*`
wildcards; a clause carrying a conversion request
(`as=Table;g=meta.k8s.io;v=v1`), `stream=` or `sv=` is unacceptable on metric endpoints.
Two media types are served, JSON (the server's first choice, so `*/*` and `application/*` get
it) and Kubernetes protobuf. As goautoneg orders clauses, the highest q wins and, at equal q,
an exact type beats a wildcard: the HPA's `application/vnd.kubernetes.protobuf, */*` gets
protobuf, like a Go server answers it. Results are cached per header value (clients send the
same few headers over and over).

Discovery documents (`negotiate_discovery`) follow upstream to the letter: goautoneg's parser
(`go_accept_clauses`: case-sensitive, q only orders clauses, q=0 and an unparsable q included)
and `NegotiateMediaTypeOptions` with the discovery restrictions of
`endpoints/discovery/aggregated` (`negotiation.go`, `wrapper.go`): on `/apis` (and `/api`) the
first clause asking for `g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList` gets the
aggregated document, whatever its q; otherwise the first clause without a conversion gets the
plain document, and no such clause is a 406. docs/metrics-api.md has the table.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Final, NamedTuple

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
    """What to send: the media type, whether to indent (JSON only) and whether the body is
    Kubernetes protobuf (derived from the media type; a field, since every request reads it)."""

    media_type: str
    pretty: bool
    protobuf: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "protobuf", self.media_type == PROTOBUF)


_PLAIN: Final = Representation(JSON, pretty=False)
_PRETTY: Final = Representation(JSON, pretty=True)
_PROTOBUF: Final = Representation(PROTOBUF, pretty=False)
# How specific a served clause is: at equal q the more specific wins (goautoneg's order).
#: How specific each served media range is: an exact type beats `application/*` and `*/*`.
SPECIFICITY: Final = {JSON: 2, PROTOBUF: 2, "application/*": 1, "*/*": 0}


def negotiate(accept: str) -> Representation | NotAcceptable:
    """The representation of a metric value (or a Status) for an Accept header, or the 406
    error to send (a new one each call: an exception raised twice keeps every frame it was
    raised through, so a cached one would hold each refused request's frames for good).

    The best clause is the one with the highest q, then the most specific media type, then
    the first written. Discovery documents are negotiated by `negotiate_discovery`.
    O(len(accept)), cached.
    """
    chosen = _negotiate(accept)
    return not_acceptable(SERVED_MEDIA_TYPES) if chosen is None else chosen


@lru_cache(maxsize=256)
def _negotiate(accept: str) -> Representation | None:
    """`negotiate`'s answer, None for a 406."""
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
        return None
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


def pretty_print(asked: bool | None, accepted: bool, user_agent: str) -> bool:
    """Indent JSON? `?pretty=` (`asked`) decides when given; else the Accept clause's
    `pretty=1` (`accepted`), or a curl, Wget or browser user agent (upstream's
    `isPrettyPrint`)."""
    if asked is not None:
        return asked
    return accepted or user_agent.startswith(_PRETTY_AGENTS)


@lru_cache(maxsize=256)
def metric_representation(
    accept: str, user_agent: str, asked: bool | None
) -> Representation | None:
    """How a metric value list (or its Status) is sent, decided once: `negotiate(accept)`,
    its JSON indented as `pretty_print` says (protobuf never is), or None for a 406, which
    the caller raises as `not_acceptable(SERVED_MEDIA_TYPES)`: a new error each time, as
    `negotiate` says why. O(len(accept)), cached per (Accept, User-Agent, `?pretty=`):
    clients send the same few, so a request costs one lookup (in C, no Python of this
    module runs)."""
    chosen = _negotiate(accept)
    if chosen is None or chosen.protobuf:
        return chosen
    return _PRETTY if pretty_print(asked, chosen.pretty, user_agent) else _PLAIN


# --- discovery: upstream's negotiation to the letter ------------------------------------------

#: The aggregated discovery document's kind, as `Accept` parameters and `Content-Type` suffix.
AGGREGATED_GROUP: Final = "apidiscovery.k8s.io"
AGGREGATED_VERSION: Final = "v2"
AGGREGATED_KIND: Final = "APIGroupDiscoveryList"
AGGREGATED_PARAMS: Final = f";g={AGGREGATED_GROUP};v={AGGREGATED_VERSION};as={AGGREGATED_KIND}"
#: (media type, type, subtype) in the server's order: `*/*` and `application/*` get JSON.
_SERVED: Final = (
    (JSON, "application", "json"),
    (PROTOBUF, "application", "vnd.kubernetes.protobuf"),
)
_GO_FLOAT: Final = re.compile(
    r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity|nan)", re.IGNORECASE
)
_GO_HEX_FLOAT: Final = re.compile(
    r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?\d+"
)


class AcceptClause(NamedTuple):
    """One clause of an `Accept` header as goautoneg parses it (nothing lower-cased)."""

    type: str
    subtype: str
    q: float
    params: Mapping[str, str]


class DiscoveryRepresentation(NamedTuple):
    """What a discovery request gets: the media type, whether the client asked for indented
    JSON (`pretty=1`), and whether it is the aggregated document."""

    media_type: str
    pretty: bool
    aggregated: bool


def _go_float32(text: str) -> float:
    """`strconv.ParseFloat(text, 32)` as goautoneg keeps it: the value, 0 on a syntax error,
    +-Inf beyond float32 (Go returns those with the range error that goautoneg ignores)."""
    if _GO_FLOAT.fullmatch(text):
        value = float(text)
    elif _GO_HEX_FLOAT.fullmatch(text):
        value = float.fromhex(text)
    else:
        return 0.0
    try:
        return float(struct.unpack("f", struct.pack("f", value))[0])
    except OverflowError:
        return float("inf") if value > 0 else float("-inf")


def _go_less(a: AcceptClause, b: AcceptClause) -> bool:
    """goautoneg's `Less`, inconsistent as it is (a lower q can still sort first)."""
    return a.q > b.q or (a.type != "*" and b.type == "*") or (a.subtype != "*" and b.subtype == "*")


@lru_cache(maxsize=256)
def go_accept_clauses(accept: str) -> tuple[AcceptClause, ...]:
    """`goautoneg.ParseAccept`: split on `,` and `;`, a media range of one `*` or two parts
    (anything else skipped), parameters without `=` skipped, `q` parsed as a float32, every
    clause kept (q=0 too), then sorted as Go's `sort.Sort` sorts up to 12 clauses (insertion
    sort, with goautoneg's `Less`; longer headers use the same order). O(len(accept) +
    clauses^2), cached."""
    clauses: list[AcceptClause] = []
    for part in accept.split(","):
        pieces = part.strip(" ").split(";")
        media = pieces[0].split("/")
        media_type = media[0].strip(" ")
        if len(media) == 1 and media_type == "*":
            subtype = "*"
        elif len(media) == 2:
            subtype = media[1].strip(" ")
        else:
            continue
        quality = 1.0
        params: dict[str, str] = {}
        for param in pieces[1:]:
            key, separator, value = param.partition("=")
            if not separator:
                continue
            key = key.strip(" ")
            if key == "q":
                quality = _go_float32(value)
            else:
                params[key] = value.strip(" ")
        clauses.append(AcceptClause(media_type, subtype, quality, params))
    for i in range(1, len(clauses)):
        j = i
        while j > 0 and _go_less(clauses[j], clauses[j - 1]):
            clauses[j], clauses[j - 1] = clauses[j - 1], clauses[j]
            j -= 1
    return tuple(clauses)


def _allowed(params: Mapping[str, str], *, aggregated: bool) -> bool:
    """`acceptMediaTypeOptions` for a JSON or protobuf serializer (both stream): `stream`
    other than `watch` and any `sv` refuse the clause; `as`/`g`/`v` ask for a conversion,
    which the discovery restrictions allow only to the v2 aggregated list and the default
    restrictions never."""
    stream = params.get("stream", "")
    if (stream and stream != "watch") or params.get("sv", ""):
        return False
    if not aggregated:
        return not ("as" in params or "g" in params or "v" in params)
    return (
        params.get("g") == AGGREGATED_GROUP
        and params.get("v") == AGGREGATED_VERSION
        and params.get("as") == AGGREGATED_KIND
    )


def _first_allowed(
    clauses: tuple[AcceptClause, ...], *, aggregated: bool
) -> DiscoveryRepresentation | None:
    for clause in clauses:
        for media_type, type_, subtype in _SERVED:
            matches = (clause.type == type_ and clause.subtype in (subtype, "*")) or (
                clause.type == "*" and clause.subtype == "*"
            )
            if matches and _allowed(clause.params, aggregated=aggregated):
                pretty = clause.params.get("pretty") == "1"
                return DiscoveryRepresentation(media_type, pretty, aggregated)
    return None


def negotiate_discovery(
    accept: str, *, aggregated: bool
) -> DiscoveryRepresentation | NotAcceptable:
    """The representation of a discovery document for an `Accept` header, or the 406 to send
    (a new one each call, as `negotiate` says why); `_negotiate_discovery` caches the rest."""
    chosen = _negotiate_discovery(accept, aggregated=aggregated)
    return not_acceptable(SERVED_MEDIA_TYPES) if chosen is None else chosen


@lru_cache(maxsize=256)
def _negotiate_discovery(accept: str, *, aggregated: bool) -> DiscoveryRepresentation | None:
    """The representation of a discovery document for an `Accept` header, None for a 406.

    `aggregated`: the path serves the aggregated document too (`/apis`, `/api`), so the
    wrapper's question comes first: the first clause (in goautoneg's order) that asks for
    the v2 `APIGroupDiscoveryList` in JSON or protobuf wins. Otherwise (and on every other
    discovery path) the first clause without a conversion gets the plain document in its
    media type; none is a 406. An empty header is plain JSON. O(len(accept)), cached.
    """
    if accept == "":
        return DiscoveryRepresentation(JSON, False, False)
    clauses = go_accept_clauses(accept)
    if aggregated:
        found = _first_allowed(clauses, aggregated=True)
        if found is not None:
            return found
    return _first_allowed(clauses, aggregated=False)
