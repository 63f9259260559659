"""The request grammar of the Resource Metrics API, `metrics.k8s.io` `v1` and `v1beta1`: a
decoded path, query and `Accept` header in, a `MetricsApiRequest` and a view out (or a
`StatusError`).

PURE: no I/O, no lookups; :mod:`.responses` answers the requests, :mod:`.render` draws
the documents. It must not read the cluster or the usage store.

Versions: `v1` (KEP-5207, GA in Kubernetes 1.37; kubectl 1.37 and the HPA prefer it) and
`v1beta1`, the same kinds with the same fields (upstream's `v1` and `v1beta1` types and
`generated.proto` files differ only in their package), preferred in that order. Any other
version is a path this server does not serve: Go's plain 404, as for other unknown paths.

Costs: O(len(path) + len(query)) per request; negotiation is cached per `Accept` value.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Final, Literal

from custom_metrics_server.api.grammar import (
    QueryParams,
    check_selector_sizes,
    check_timeout,
    parse_field_selector_param,
    parse_label_selector,
    resource_route,
)
from custom_metrics_server.api.negotiation import (
    CONVERSION_PARAMS,
    PROTOBUF,
    SERVED_MEDIA_TYPES,
    SPECIFICITY,
    accept_clauses,
)
from custom_metrics_server.errors import BadRequest, MethodNotAllowed, NotAcceptable, not_acceptable
from custom_metrics_server.machinery.fields import FIELD_EVERYTHING, FieldSelector
from custom_metrics_server.machinery.labels import EVERYTHING, Selector

__all__ = [
    "GROUP",
    "GROUP_VERSIONS",
    "PREFIX",
    "VERSIONS",
    "Kind",
    "MetricsApiRequest",
    "View",
    "negotiate",
    "parse_request",
]

GROUP: Final = "metrics.k8s.io"
#: Served versions, preferred first (the order of `/apis/metrics.k8s.io` and of `/apis`).
VERSIONS: Final = ("v1", "v1beta1")
#: For the root `/apis` group list.
GROUP_VERSIONS: Final[dict[str, tuple[str, ...]]] = {GROUP: VERSIONS}
PREFIX: Final = f"/apis/{GROUP}"

Kind = Literal["group", "version", "pods", "nodes"]
#: What an `Accept` header chose: plain JSON, protobuf, or a Table of meta.k8s.io/v1 or v1beta1.
View = Literal["json", "protobuf", "v1", "v1beta1"]
_INCLUDE_OBJECT: Final = frozenset({"None", "Metadata", "Object"})
_NAMESPACED: Final = {"pods": True, "nodes": False}


@dataclass(frozen=True, slots=True)
class MetricsApiRequest:
    """One parsed request below `/apis/metrics.k8s.io`.

    `version` "" only for the group document; `namespace` None: every namespace (pods) or
    cluster scope (nodes); `name` None: a list.
    """

    kind: Kind
    namespace: str | None = None
    name: str | None = None
    label_selector: Selector = EVERYTHING
    field_selector: FieldSelector = FIELD_EVERYTHING
    include_object: str = "Metadata"
    version: str = "v1beta1"

    @property
    def api_version(self) -> str:
        """`metrics.k8s.io/<version>`: the `apiVersion` of the answer's objects."""
        return f"{GROUP}/{self.version}"


def parse_request(
    path: str, query: QueryParams, raw_query: bytes | str = b""
) -> MetricsApiRequest | None:
    """The request a path names, None for a version this server does not serve (Go's plain
    404 text, as for other unknown paths), or a `StatusError` (404 Status for an unknown
    route, 400 for a bad selector, 405 for `watch`). O(len(path) + len(query))."""
    check_timeout(query.timeout)
    check_selector_sizes(query)
    rest = path[len(PREFIX) :].strip("/")
    parts = rest.split("/") if rest else []
    if not parts:
        return MetricsApiRequest("group", version="")
    version = parts[0]
    if version not in VERSIONS:
        return None
    parts = parts[1:]
    if not parts:
        return MetricsApiRequest("version", version=version)
    resource, namespace, name = resource_route(parts, _NAMESPACED)
    kind: Kind = "pods" if resource == "pods" else "nodes"
    if name is not None:
        return MetricsApiRequest(kind, namespace, name, version=version)
    if query.watch:
        raise MethodNotAllowed(
            f'watch is not supported on resources of kind "{resource}.{GROUP}"',
            details={"group": GROUP, "kind": resource},
        )
    return MetricsApiRequest(
        kind,
        namespace,
        None,
        parse_label_selector(query.label_selector),
        parse_field_selector_param(query.field_selector),
        _include_object(raw_query),
        version,
    )


def _include_object(raw_query: bytes | str) -> str:
    """`includeObject` of a Table request (default Metadata, as the generic apiserver)."""
    text = raw_query.decode("latin-1") if isinstance(raw_query, bytes) else raw_query
    if "includeObject=" not in text:
        return "Metadata"
    for pair in text.split("&"):
        key, _, value = pair.partition("=")
        if key == "includeObject":
            if value not in _INCLUDE_OBJECT:
                raise BadRequest(
                    f'includeObject: Unsupported value: "{value}": supported values: '
                    '"Metadata", "None", "Object"'
                )
            return value
    return "Metadata"


def negotiate(accept: str) -> tuple[View, bool] | NotAcceptable:
    """The view an `Accept` header asks for and whether to indent, or the 406 to send: a new
    one each call, as in `api.negotiation.negotiate` (a cached exception raised per request
    would keep every request's frames in its traceback)."""
    chosen = _negotiate(accept)
    return not_acceptable(SERVED_MEDIA_TYPES) if chosen is None else chosen


@lru_cache(maxsize=256)
def _negotiate(accept: str) -> tuple[View, bool] | None:
    """`negotiate`'s answer, None for a 406.

    Clauses without conversion parameters give the object itself, in protobuf for
    `application/vnd.kubernetes.protobuf` and JSON for the JSON ranges; a JSON clause with
    `as=Table;g=meta.k8s.io;v=v1|v1beta1` gives a Table; other conversions (protobuf Tables,
    `as=PartialObjectMetadata`, streams) and other media types are skipped. As in
    `negotiation.negotiate`: the highest q, then the most specific type, then the first
    written wins. Cached per header value.
    """
    if not accept.strip():
        return ("json", False)
    best: tuple[float, int, View, bool] | None = None
    for media, params, quality in accept_clauses(accept):
        specificity = SPECIFICITY.get(media)
        if specificity is None:
            continue
        view: View = "protobuf" if media == PROTOBUF else "json"
        if CONVERSION_PARAMS & params.keys():
            table_version = params.get("v", "")
            if (
                view == "protobuf"
                or params.get("as") != "Table"
                or params.get("g") != "meta.k8s.io"
                or table_version not in ("v1", "v1beta1")
                or "stream" in params
                or "sv" in params
            ):
                continue
            view = "v1" if table_version == "v1" else "v1beta1"
        pretty = params.get("pretty", "") in ("1", "true")
        if best is None or (quality, specificity) > best[:2]:
            best = (quality, specificity, view, pretty)
    if best is None:
        return None
    return (best[2], best[3])
