"""The API handlers at the end of the chain: bare ASGI, for the metric APIs' hot path.

* `ApiEndpoints`: everything under `/apis` but metrics.k8s.io: discovery, custom and external
  metric values;
* `ResourceMetricsEndpoints`: `metrics.k8s.io` (the Resource Metrics API), when served;
* `DemoCoreEndpoints`: the demo's read-only `/api` subset (nodes, pods) that `kubectl top` reads.

No framework routing, dependency injection or per-item models here (they cost 2-5x on this
path, see docs/performance.md): the pure grammar parses the decoded path, the query layer
answers, the wire layer joins pre-rendered fragments, and the response goes out as one body
with an explicit `content-length`. Every failure is a Kubernetes `Status`; a bug is logged
with a request id and answered with a masked 500, never a traceback. Each handler labels the
request for the self-metrics (`chain.Tracking` counts it).

Per request: O(len(path)) parsing, the query layer's cost, and O(items) to join the body.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, NamedTuple

from custom_metrics_server.api import core_api, discovery, protobuf, wire
from custom_metrics_server.api.grammar import (
    EXTERNAL_GROUP,
    GroupDiscovery,
    ParsedRequest,
    QueryParams,
    RootDiscovery,
    VersionDiscovery,
    parse,
    parse_query,
)
from custom_metrics_server.api.negotiation import Representation, negotiate, pretty_user_agent
from custom_metrics_server.api.status import JSON_HEADERS, PROTOBUF_HEADERS, status_response
from custom_metrics_server.compute import metrics_api as resource_api
from custom_metrics_server.domain import (
    ExternalMetricRequest,
    ExternalSample,
    ItemShape,
    MetricRequest,
)
from custom_metrics_server.errors import (
    NotAcceptable,
    NotFound,
    StatusError,
    internal_error,
    method_not_allowed,
)
from custom_metrics_server.query.engine import QueryEngine
from custom_metrics_server.runtime.asgi import (
    Scope,
    Send,
    request_header,
    send_body,
    send_not_found_text,
    server_address,
)
from custom_metrics_server.server.chain import exchange_of
from custom_metrics_server.server.observability import ServerMetrics

__all__ = ["ApiEndpoints", "DemoCoreEndpoints", "ResourceMetricsEndpoints"]

logger = logging.getLogger(__name__)

_SHAPES: Final = {
    "v1beta2": ItemShape.V1BETA2,
    "v1beta1": ItemShape.V1BETA1,
    "v1alpha1": ItemShape.V1BETA1,
}
#: HEAD is answered as GET; the server (uvicorn) sends the headers without the body.
_READ_METHODS: Final = frozenset({"GET", "HEAD"})


class _Encoding(NamedTuple):
    """The encoders of one representation (same inputs, same answers, different bytes)."""

    metric_value_list: Callable[..., bytes]
    external_metric_value_list: Callable[[Sequence[ExternalSample]], bytes]
    document: Callable[[Any], bytes]


_JSON: Final = _Encoding(wire.metric_value_list, wire.external_metric_value_list, wire.dumps)
_PROTOBUF: Final = _Encoding(
    protobuf.metric_value_list, protobuf.external_metric_value_list, protobuf.encode_document
)


async def _guarded(
    scope: Scope,
    send: Send,
    serve: Callable[[Scope, QueryParams, Send], Awaitable[None]],
    labels: tuple[str, str, str],
) -> None:
    """Run a handler body: a `StatusError` becomes its `Status`, a bug a masked 500 with an
    `audit-id` (logged with the stack). `labels` count the request until the body knows
    better (the grammar has parsed the path)."""
    exchange_of(scope).labels = labels
    try:
        await serve(scope, parse_query(scope["query_string"]), send)
    except StatusError as error:
        await _send_status(send, error, scope)
    except Exception:
        request_id = uuid.uuid4().hex
        logger.exception(
            "request %s %s failed (request id %s)", scope["method"], scope["path"], request_id
        )
        await _send_status(send, internal_error(), scope, request_id=request_id)


async def _send_status(
    send: Send, error: StatusError, scope: Scope, *, request_id: str = ""
) -> None:
    body, headers = status_response(error, request_header(scope, b"accept"))
    if request_id:
        headers += ((b"audit-id", request_id.encode()),)
    await send_body(send, error.code, body, headers)


def _pretty(scope: Scope, query: QueryParams, *, accepted: bool) -> bool:
    """Indent JSON? `?pretty=` decides when given; else the Accept clause's `pretty=1`, or a
    curl/Wget/browser user agent (upstream's `isPrettyPrint`)."""
    if query.pretty is not None:
        return query.pretty
    return accepted or pretty_user_agent(request_header(scope, b"user-agent"))


class ApiEndpoints:
    """Serves `/apis`, its group and version discovery, and custom and external metric
    values (every path under `/apis` the router does not send to metrics.k8s.io)."""

    def __init__(
        self,
        *,
        engine: QueryEngine,
        metrics: ServerMetrics,
        extra_groups: dict[str, tuple[str, ...]] | None = None,
    ) -> None:
        self.engine = engine
        self.metrics = metrics
        #: more groups listed in `/apis` (metrics.k8s.io when it is served)
        self._extra_groups = extra_groups

    async def __call__(self, scope: Scope, send: Send) -> None:
        """Answer one HTTP request whose path is under `/apis`."""
        await _guarded(scope, send, self._serve, ("", "", ""))

    async def _serve(self, scope: Scope, query: QueryParams, send: Send) -> None:
        try:
            parsed = parse(scope["path"], query)
        except NotFound:
            raise
        except StatusError:
            if scope["method"] not in _READ_METHODS:
                raise method_not_allowed() from None
            raise
        if parsed is None:
            await send_not_found_text(send)
            return
        if scope["method"] not in _READ_METHODS:
            raise method_not_allowed()
        exchange_of(scope).labels = _labels(parsed, self.engine)
        representation = self._representation(scope, query, parsed)
        if representation.protobuf:
            body = await self._answer(scope, parsed, _PROTOBUF)
            await send_body(send, 200, body, PROTOBUF_HEADERS)
            return
        body = await self._answer(scope, parsed, _JSON)
        if representation.pretty:
            body = wire.prettify(body)
        await send_body(send, 200, body, JSON_HEADERS)

    def _representation(
        self, scope: Scope, query: QueryParams, parsed: ParsedRequest
    ) -> Representation:
        chosen = negotiate(
            request_header(scope, b"accept"),
            discovery_root=isinstance(parsed, RootDiscovery),
        )
        if isinstance(chosen, NotAcceptable):
            raise chosen
        if chosen.protobuf:
            return chosen  # binary: `pretty` does not apply
        pretty = _pretty(scope, query, accepted=chosen.pretty)
        return chosen if chosen.pretty == pretty else Representation(chosen.media_type, pretty)

    async def _answer(self, scope: Scope, parsed: ParsedRequest, encoding: _Encoding) -> bytes:
        if isinstance(parsed, MetricRequest):
            samples = await self.engine.custom(parsed)
            if samples:
                oldest = min(sample.timestamp for sample in samples)
                self.metrics.observe_freshness(parsed.group, time.time() - oldest)
            return encoding.metric_value_list(
                samples,
                api_version=f"{parsed.group}/{parsed.version}",
                shape=_SHAPES[parsed.version],
                metric_selector=parsed.metric_selector,
            )
        if isinstance(parsed, ExternalMetricRequest):
            return encoding.external_metric_value_list(await self.engine.external(parsed))
        if isinstance(parsed, VersionDiscovery):
            if parsed.group == EXTERNAL_GROUP:
                return encoding.document(
                    discovery.external_resource_list(self.engine.external_metrics())
                )
            return encoding.document(
                discovery.custom_resource_list(
                    parsed.group, parsed.version, self.engine.custom_metrics()
                )
            )
        if isinstance(parsed, GroupDiscovery):
            return encoding.document(discovery.api_group(parsed.group))
        return encoding.document(
            discovery.api_group_list(server_address(scope), self._extra_groups)
        )


class ResourceMetricsEndpoints:
    """`metrics.k8s.io`: parse, negotiate (JSON, protobuf or Table), render."""

    def __init__(self, api: resource_api.ResourceMetricsApi) -> None:
        self.api = api

    async def __call__(self, scope: Scope, send: Send) -> None:
        """Answer one request under `/apis/metrics.k8s.io`."""
        labels = (resource_api.GROUP, resource_api.VERSION, "")
        await _guarded(scope, send, self._serve, labels)

    async def _serve(self, scope: Scope, query: QueryParams, send: Send) -> None:
        request = resource_api.parse_request(scope["path"], query, scope["query_string"])
        if request is None:
            await send_not_found_text(send)
            return
        if scope["method"] not in _READ_METHODS:
            raise method_not_allowed()
        chosen = resource_api.negotiate(request_header(scope, b"accept"))
        if isinstance(chosen, NotAcceptable):
            raise chosen
        view, pretty = chosen
        if view == "protobuf":
            await send_body(send, 200, self.api.render(request, view), PROTOBUF_HEADERS)
            return
        pretty = _pretty(scope, query, accepted=pretty)
        await send_body(send, 200, self.api.render(request, view, pretty=pretty), JSON_HEADERS)


class DemoCoreEndpoints:
    """The demo's read-only `/api` subset (JSON only)."""

    def __init__(self, api: core_api.DemoCoreApi) -> None:
        self.api = api

    async def __call__(self, scope: Scope, send: Send) -> None:
        """Answer one request under `/api`."""
        await _guarded(scope, send, self._serve, ("", "v1", ""))

    async def _serve(self, scope: Scope, query: QueryParams, send: Send) -> None:
        if scope["method"] not in _READ_METHODS:
            raise method_not_allowed()
        request = self.api.parse(scope["path"], query)
        representation = negotiate(
            request_header(scope, b"accept"), discovery_root=not request.version
        )
        if isinstance(representation, NotAcceptable):
            raise representation
        body = wire.dumps(self.api.document(request, server_address(scope)))
        pretty = _pretty(scope, query, accepted=representation.pretty)
        await send_body(send, 200, wire.prettify(body) if pretty else body, JSON_HEADERS)


def _labels(parsed: ParsedRequest, engine: QueryEngine) -> tuple[str, str, str]:
    """Self-metric labels; unknown resources collapse to `other` (bounded cardinality)."""
    if isinstance(parsed, MetricRequest):
        mapping = engine.cluster.mapping(parsed.resource)
        resource = str(mapping.group_resource) if mapping else "other"
        return parsed.group, parsed.version, resource
    if isinstance(parsed, ExternalMetricRequest):
        return EXTERNAL_GROUP, "v1beta1", "external"
    if isinstance(parsed, VersionDiscovery):
        return parsed.group, parsed.version, ""
    if isinstance(parsed, GroupDiscovery):
        return parsed.group, "", ""
    return "", "", ""
