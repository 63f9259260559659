"""The URL grammar of the served API groups: a decoded path and a query string in, a typed
request (or a `StatusError`) out.

PURE: no I/O, no web framework. Follows the Go generic apiserver's `RequestInfo` splitting and
custom-metrics-apiserver's route table (contract sections 1.2-1.6, 9): path templates are matched
by segment count, the namespace-metrics form is rewritten to resource `namespaces`, and a
trailing slash is ignored. Percent-decoding happens before this module (the ASGI server gives
the decoded path), so `%2A` is `*` and `%2F` makes an extra segment.

It stays one piece (over ~400 lines): the path routes, the query parameters and the name and
selector checks are one grammar, which the server and the other parsers of served URLs
(`core_api`, `metrics_api.request`) import from this one place.

Cost: O(len(path) + len(query)) per request; selectors are parsed through a cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl

from custom_metrics_server.domain import (
    ALL_OBJECTS,
    ExternalMetricRequest,
    MetricRequest,
)
from custom_metrics_server.errors import (
    BadRequest,
    invalid_request_path,
    route_not_found,
    watch_not_supported,
)
from custom_metrics_server.machinery.durations import go_duration_seconds
from custom_metrics_server.machinery.fields import (
    FIELD_EVERYTHING,
    FieldSelector,
    parse_field_selector_cached,
)
from custom_metrics_server.machinery.label_parser import parse_selector_cached
from custom_metrics_server.machinery.labels import EVERYTHING, Selector
from custom_metrics_server.machinery.validation import SelectorError

CUSTOM_GROUP: Final = "custom.metrics.k8s.io"
LEGACY_GROUP: Final = "custom-metrics"
EXTERNAL_GROUP: Final = "external.metrics.k8s.io"

#: Served groups and their versions, preferred version first.
GROUP_VERSIONS: Final[dict[str, tuple[str, ...]]] = {
    CUSTOM_GROUP: ("v1beta2", "v1beta1"),
    LEGACY_GROUP: ("v1alpha1",),
    EXTERNAL_GROUP: ("v1beta1",),
}

#: Namespace subresources that RequestInfo does not treat as a resource of their own
#: (k8s.io/apiserver `namespaceSubresources`); security.requestinfo splits paths with it too.
NAMESPACE_SUBRESOURCES: Final = frozenset({"status", "finalize"})
_TRUE_VALUES: Final = frozenset({"1", "t", "T", "true", "TRUE", "True"})


@dataclass(frozen=True, slots=True)
class RootDiscovery:
    """`GET /apis`."""


@dataclass(frozen=True, slots=True)
class GroupDiscovery:
    """`GET /apis/{group}`."""

    group: str


@dataclass(frozen=True, slots=True)
class VersionDiscovery:
    """`GET /apis/{group}/{version}`."""

    group: str
    version: str


@dataclass(frozen=True, slots=True)
class StatusPage:
    """`GET /apis/{group}/{version}/metric-status`: every metric's status (`STATUS_PAGE`)."""

    group: str
    version: str


ParsedRequest = (
    RootDiscovery
    | GroupDiscovery
    | VersionDiscovery
    | StatusPage
    | MetricRequest
    | ExternalMetricRequest
)


@dataclass(frozen=True, slots=True)
class QueryParams:
    """The query parameters this server interprets (first value wins, as upstream)."""

    label_selector: str = ""
    metric_label_selector: str = ""
    field_selector: str = ""
    pretty: bool | None = None  # None: not given, the Accept header and User-Agent decide
    watch: bool = False
    timeout: str = ""
    #: `?explain=1`: answer how the request is served instead of its answer (this server's
    #: own parameter; Kubernetes has none of that name)
    explain: bool = False


#: The query parameter asking for an explanation (docs/operations.md, "Why is my metric
#: missing"). Its values are read as `pretty`'s: 1, t, true (any case of those).
EXPLAIN_PARAMETER: Final = "explain"
#: The reserved path segment of the per-metric status page, directly below a served version
#: (`/apis/custom.metrics.k8s.io/v1beta2/metric-status`): no metric URL has a single segment.
STATUS_PAGE: Final = "metric-status"

_EMPTY_QUERY: Final = QueryParams()


def parse_query(query: bytes | str) -> QueryParams:
    """Decode the query string; unknown parameters are ignored, `+` is a space."""
    if not query:
        return _EMPTY_QUERY
    text = query.decode("utf-8", "replace") if isinstance(query, bytes) else query
    found: dict[str, str] = {}
    for key, value in parse_qsl(text, keep_blank_values=True, errors="replace"):
        found.setdefault(key, value)
    return QueryParams(
        label_selector=found.get("labelSelector", ""),
        metric_label_selector=found.get("metricLabelSelector", ""),
        field_selector=found.get("fieldSelector", ""),
        pretty=found["pretty"] in _TRUE_VALUES if found.get("pretty") else None,
        watch=found.get("watch", "") in _TRUE_VALUES,
        timeout=found.get("timeout", ""),
        explain=found.get(EXPLAIN_PARAMETER, "") in _TRUE_VALUES,
    )


def is_api_path(path: str) -> bool:
    """Whether the path belongs to `/apis` (the part of the URL space this grammar owns)."""
    return path == "/apis" or path.startswith("/apis/")


def split_api_path(path: str) -> list[str] | None:
    """Segments below `/apis`, with one trailing slash ignored; None if not an `/apis` path."""
    if not is_api_path(path):
        return None
    segments = path[len("/apis/") :].split("/") if len(path) > len("/apis") else []
    if segments and segments[-1] == "":
        segments.pop()
    return segments


def check_timeout(text: str) -> None:
    """`?timeout=` must be a Go duration, as the request-deadline filter parses it (400)."""
    if text and go_duration_seconds(text) is None:
        raise BadRequest(
            f'invalid timeout specified in the request URL - time: invalid duration "{text}"'
        )


#: Bytes (UTF-8) per selector parameter; beyond it 400 before any parsing, so the selector
#: parser never sees more than this. Real HPA selectors are a few hundred bytes.
MAX_SELECTOR_BYTES: Final = 8192


def check_selector_sizes(query: QueryParams) -> None:
    """Selectors over `MAX_SELECTOR_BYTES` are a 400 BadRequest."""
    for name, text in (
        ("labelSelector", query.label_selector),
        ("metricLabelSelector", query.metric_label_selector),
        ("fieldSelector", query.field_selector),
    ):
        if len(text) > MAX_SELECTOR_BYTES // 4 and len(text.encode()) > MAX_SELECTOR_BYTES:
            raise BadRequest(
                f"{name} is too long: {len(text.encode())} bytes, at most "
                f"{MAX_SELECTOR_BYTES} are accepted"
            )


#: The ASGI scope key under which the handler chain's router keeps `split_api_path(path)`, so
#: that the handler parses the segments the router split (`parse(..., segments=...)`).
SEGMENTS_KEY: Final = "custom_metrics_server.api_segments"


def parse(path: str, query: QueryParams, segments: list[str] | None = None) -> ParsedRequest | None:
    """Parse a decoded request path; None when the path is outside every served group.
    `segments`: `split_api_path(path)` when the caller already split it (the router), read
    and not changed. O(len(path) + len(query))."""
    if segments is None:
        segments = split_api_path(path)
    if segments is None:
        return None
    check_timeout(query.timeout)
    check_selector_sizes(query)
    if not segments:
        return RootDiscovery()
    group = segments[0]
    versions = GROUP_VERSIONS.get(group)
    if versions is None:
        return None
    if len(segments) == 1:
        return GroupDiscovery(group)
    version = segments[1]
    if version not in versions:
        return None
    parts = segments[2:]
    if not parts:
        return VersionDiscovery(group, version)
    if "" in parts:
        # `//` inside a served prefix: go-restful matches no route (never normalised away).
        raise route_not_found()
    if len(parts) == 1 and parts[0] == STATUS_PAGE:
        return StatusPage(group, version)
    if group == EXTERNAL_GROUP:
        return _parse_external(version, parts, query)
    return _parse_custom(group, version, parts, query)


def _parse_custom(group: str, version: str, parts: list[str], query: QueryParams) -> MetricRequest:
    """Routes R1-R3 of the contract, with RequestInfo's namespace handling."""
    count = len(parts)
    if parts[0] == "namespaces" and count >= 2:
        namespace = parts[1]
        rest = parts[2:]
        if len(rest) == 1:
            # Matches R1 as `namespaces/{name}/{metric}`; RequestInfo then strips the namespace
            # unless the third segment is a namespace subresource.
            if rest[0] in NAMESPACE_SUBRESOURCES:
                return _custom(
                    group,
                    version,
                    query,
                    namespace=None,
                    resource="namespaces",
                    name=namespace,
                    metric=rest[0],
                )
            raise invalid_request_path()
        if len(rest) == 2 and rest[0] == "metrics":
            return _namespace_metric(group, version, namespace, rest[1], query)
        if len(rest) == 3:
            if rest[0] == "metrics":
                # `namespaces/ns/metrics/m/extra`: the extra segment is ignored upstream.
                return _namespace_metric(group, version, namespace, rest[1], query)
            return _custom(
                group,
                version,
                query,
                namespace=namespace,
                resource=rest[0],
                name=rest[1],
                metric=rest[2],
            )
        raise route_not_found()
    if count == 3:
        return _custom(
            group,
            version,
            query,
            namespace=None,
            resource=parts[0],
            name=parts[1],
            metric=parts[2],
        )
    raise route_not_found()


def _namespace_metric(
    group: str, version: str, namespace: str, metric: str, query: QueryParams
) -> MetricRequest:
    """R3: authorized as resource `metrics` named after the metric, served as a namespace."""
    _check_metric_name(metric)
    _check_object_name(namespace, what="namespace")
    label_selector, metric_selector = _selectors(query, name=metric)
    return MetricRequest(
        group=group,
        version=version,
        resource="namespaces",
        namespace=None,
        name=namespace,
        metric=metric,
        label_selector=label_selector,
        metric_selector=metric_selector,
    )


def _custom(
    group: str,
    version: str,
    query: QueryParams,
    *,
    namespace: str | None,
    resource: str,
    name: str,
    metric: str,
) -> MetricRequest:
    """R1 (namespace None) and R2."""
    _check_metric_name(metric)
    if namespace is not None:
        _check_object_name(namespace, what="namespace")
    if name != ALL_OBJECTS:
        _check_object_name(name, what="object")
    _check_object_name(resource, what="resource")
    label_selector, metric_selector = _selectors(query, name=name)
    return MetricRequest(
        group=group,
        version=version,
        resource=resource,
        namespace=namespace,
        name=name,
        metric=metric,
        label_selector=label_selector,
        metric_selector=metric_selector,
    )


def _parse_external(version: str, parts: list[str], query: QueryParams) -> ExternalMetricRequest:
    """X1: exactly `namespaces/{namespace}/{metric}`; the label selector selects series."""
    if len(parts) != 3 or parts[0] != "namespaces":
        raise route_not_found()
    namespace, metric = parts[1], parts[2]
    _check_object_name(namespace, what="namespace")
    _check_metric_name(metric)
    if query.watch:
        raise watch_not_supported()
    metric_selector = parse_label_selector(query.label_selector)
    _check_field_selector(query.field_selector, name=None)
    return ExternalMetricRequest(
        namespace=namespace, metric=metric, metric_selector=metric_selector
    )


def _selectors(query: QueryParams, *, name: str) -> tuple[Selector, Selector]:
    """Parse labelSelector, fieldSelector and metricLabelSelector; any error is a 400."""
    label_selector = parse_label_selector(query.label_selector)
    _check_field_selector(query.field_selector, name=name)
    metric_selector = parse_label_selector(query.metric_label_selector)
    return label_selector, metric_selector


def parse_label_selector(text: str) -> Selector:
    """A `labelSelector`/`metricLabelSelector` value; a parse error is a 400."""
    if not text:
        return EVERYTHING
    try:
        return parse_selector_cached(text)
    except SelectorError as err:
        raise BadRequest(str(err)) from err


def parse_field_selector_param(text: str) -> FieldSelector:
    """A `fieldSelector` value; a parse error is a 400."""
    if not text:
        return FIELD_EVERYTHING
    try:
        return parse_field_selector_cached(text)
    except SelectorError as err:
        raise BadRequest(str(err)) from err


def _check_field_selector(text: str, *, name: str | None) -> None:
    """Upstream accepts only metadata.name/namespace, and on named routes only the path name."""
    if not text:
        return
    selector = parse_field_selector_param(text)
    if name is not None and selector.requires_exact("metadata.name") != name:
        raise BadRequest("fieldSelector metadata.name doesn't match requested name")


def _check_metric_name(metric: str) -> None:
    """Metric names are path segments: never `.`/`..`, never `%`, `/` or `?` inside."""
    problem = path_segment_problem(metric) or ("may not contain '?'" if "?" in metric else "")
    if problem:
        raise BadRequest(f'invalid metric name "{metric}": {problem}')


def _check_object_name(name: str, *, what: str) -> None:
    problem = path_segment_problem(name)
    if problem:
        raise BadRequest(f'invalid {what} name "{name}": {problem}')


def path_segment_problem(segment: str | None) -> str:
    """apimachinery `IsValidPathSegmentName`, as a message ("" when valid or absent)."""
    if segment is None:
        return ""
    if segment in {".", ".."}:
        return f"may not be '{segment}'"
    if "/" in segment:
        return "may not contain '/'"
    if "%" in segment:
        return "may not contain '%'"
    return ""


def resource_route(
    parts: list[str], namespaced: Mapping[str, bool]
) -> tuple[str, str | None, str | None]:
    """`(resource, namespace, name)` of a generic apiserver resource path below a group
    version (`{r}`, `{r}/{name}`, `namespaces/{ns}/{r}[/{name}]`), for the resources named in
    `namespaced` (resource -> namespace-scoped). A namespaced resource has no cluster-scoped
    get route, a cluster-scoped one no namespaced route; anything else (subresources, `//`)
    is go-restful's 404 Status. Segment names are checked as the handlers check them (400).
    O(len(parts))."""
    if not parts or "" in parts:
        raise route_not_found()
    namespace: str | None = None
    if parts[0] == "namespaces" and len(parts) >= 3 and namespaced.get(parts[2]):
        namespace, parts = parts[1], parts[2:]
    resource = parts[0]
    if len(parts) > 2 or resource not in namespaced:
        raise route_not_found()
    name = parts[1] if len(parts) == 2 else None
    if namespaced[resource] and namespace is None and name is not None:
        raise route_not_found()
    for what, segment in (("namespace", namespace), ("resource", name)):
        problem = path_segment_problem(segment)
        if problem:
            # the handlers' IsValidPathSegmentName check, its error list printed with %v
            raise BadRequest(f'invalid {what} name "{segment}": [{problem}]')
    return resource, namespace, name
