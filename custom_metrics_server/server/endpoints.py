"""The API handlers at the end of the chain: bare ASGI, for the metric APIs' hot path.

* `ApiEndpoints`: everything under `/apis` but metrics.k8s.io: discovery (plain, and the
  aggregated `/apis` document), custom and external metric values;
* `ResourceMetricsEndpoints`: `metrics.k8s.io` v1 and v1beta1 (the Resource Metrics API), when
  served;
* `DemoCoreEndpoints`: the demo's read-only `/api` subset (nodes, pods) that `kubectl top` reads,
  with its aggregated `/api` document.

Discovery documents are negotiated as upstream negotiates them (`negotiate_discovery`); the
aggregated ones are pre-rendered per served state (`discovery.ServedDiscovery`) and answered
with upstream's `ETag`, `Vary: Accept` and `Cache-Control: public`, or 304 when the client's
`If-None-Match` is that `ETag` (kube-aggregator sends it every minute).

No framework routing, dependency injection or per-item models here (they cost several times this
path: docs/performance.md, "Bare ASGI against FastAPI routes"): the pure grammar parses the
decoded path, the query layer answers, the wire layer joins pre-rendered fragments, and the
response goes out as one body with an explicit `content-length`. Every failure is a Kubernetes
`Status`; a bug is logged with a request id and answered with a masked 500, never a traceback
(`guarded`, around every handler's body). Each handler labels the request for the
self-metrics (`chain.Tracking` counts it).

Per request: O(len(path)) parsing, the query layer's cost, and O(items) to join the body.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, NamedTuple
from urllib.parse import parse_qs

from custom_metrics_server.api import core_api, explanation, protobuf, wire
from custom_metrics_server.api.grammar import (
    EXTERNAL_GROUP,
    SEGMENTS_KEY,
    GroupDiscovery,
    ParsedRequest,
    QueryParams,
    RootDiscovery,
    StatusPage,
    VersionDiscovery,
    parse,
    parse_query,
)
from custom_metrics_server.api.negotiation import (
    SERVED_MEDIA_TYPES,
    Representation,
    metric_representation,
    negotiate,
)
from custom_metrics_server.api.status import JSON_HEADERS, PROTOBUF_HEADERS, status_response
from custom_metrics_server.domain import (
    ExternalMetricRequest,
    ExternalSample,
    ItemShape,
    MetricRequest,
    ResourceMapping,
)
from custom_metrics_server.errors import (
    NotAcceptable,
    NotFound,
    StatusError,
    internal_error,
    method_not_allowed,
    not_acceptable,
)
from custom_metrics_server.metrics_api import request as metrics_request
from custom_metrics_server.metrics_api import responses as resource_api
from custom_metrics_server.query.engine import QueryEngine
from custom_metrics_server.query.explain import explain
from custom_metrics_server.query.status_page import status_document
from custom_metrics_server.runtime.asgi import (
    Scope,
    Send,
    request_header,
    send_body,
    send_not_found_text,
    server_address,
)
from custom_metrics_server.server.chain import exchange_of
from custom_metrics_server.server.discovery import (
    ExtraGroups,
    ServedDiscovery,
    render_aggregated,
)
from custom_metrics_server.server.observability import ServerMetrics
from custom_metrics_server.server.responses import (
    discovery_representation,
    pretty_requested,
    send_aggregated,
    send_document,
)

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


_JSON: Final = _Encoding(wire.metric_value_list, wire.external_metric_value_list)
_PROTOBUF: Final = _Encoding(protobuf.metric_value_list, protobuf.external_metric_value_list)
#: Paths under a served group that are not metric values (one isinstance on the hot path).
_NOT_METRIC_PATHS: Final = (RootDiscovery, GroupDiscovery, VersionDiscovery, StatusPage)
_TEXT_HEADERS: Final = (
    (b"content-type", b"text/plain; charset=utf-8"),
    (b"cache-control", b"no-cache, private"),
    (b"x-content-type-options", b"nosniff"),
)


async def guarded(
    scope: Scope,
    send: Send,
    serve: Callable[[Scope, QueryParams, Send], Awaitable[None]],
    labels: tuple[str, str, str],
) -> None:
    """Run a handler body (every handler's): a `StatusError` becomes its `Status`, a bug a
    masked 500 with an `audit-id` (logged with the stack). `labels` count the request until
    the body knows better (the grammar has parsed the path)."""
    exchange_of(scope).labels = labels
    try:
        await serve(scope, parse_query(scope["query_string"]), send)
    except StatusError as error:
        await send_status(send, error, scope)
    except Exception:
        request_id = uuid.uuid4().hex
        logger.exception(
            "request %s %s failed (request id %s)", scope["method"], scope["path"], request_id
        )
        await send_status(send, internal_error(), scope, request_id=request_id)


async def send_status(
    send: Send, error: StatusError, scope: Scope, *, request_id: str = ""
) -> None:
    body, headers = status_response(error, request_header(scope, b"accept"))
    if request_id:
        headers += ((b"audit-id", request_id.encode()),)
    await send_body(send, error.code, body, headers)


class ApiEndpoints:
    """Serves `/apis`, its group and version discovery, and custom and external metric
    values (every path under `/apis` the router does not send to metrics.k8s.io)."""

    def __init__(
        self,
        *,
        engine: QueryEngine,
        metrics: ServerMetrics,
        extra_groups: ExtraGroups | None = None,
    ) -> None:
        self.engine = engine
        self.metrics = metrics
        #: what discovery lists: the grammar's groups and `extra_groups` (metrics.k8s.io when
        #: it is served: group -> version -> its resource list)
        self.discovery = ServedDiscovery(engine, extra_groups)

    async def __call__(self, scope: Scope, send: Send) -> None:
        """Answer one HTTP request whose path is under `/apis`."""
        await guarded(scope, send, self._serve, ("", "", ""))

    async def _serve(self, scope: Scope, query: QueryParams, send: Send) -> None:
        if query.explain and await self._explain(scope, query, send):
            return
        try:
            parsed = parse(scope["path"], query, scope.get(SEGMENTS_KEY))
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
        # The REST mapping is looked up here once, for the labels and the engine alike.
        mapping = (
            self.engine.cluster.mapping(parsed.resource)
            if isinstance(parsed, MetricRequest)
            else None
        )
        exchange_of(scope).labels = _labels(parsed, mapping)
        if isinstance(parsed, _NOT_METRIC_PATHS):
            if isinstance(parsed, StatusPage):
                await self._status_page(scope, send)
            else:
                await self._discovery(scope, query, parsed, send)
            return
        representation = self._representation(scope, query)
        if representation.protobuf:
            body = await self._answer(parsed, mapping, _PROTOBUF)
            await send_body(send, 200, body, PROTOBUF_HEADERS)
            return
        body = await self._answer(parsed, mapping, _JSON)
        if representation.pretty:
            body = wire.prettify(body)
        await send_body(send, 200, body, JSON_HEADERS)

    async def _explain(self, scope: Scope, query: QueryParams, send: Send) -> bool:
        """`?explain=1` on a metric URL (or one the grammar refuses): the explanation, always
        JSON, 200 (its `outcome` carries the plain request's code). False when the request is
        not explained (another method, a discovery path): it is then answered as usual."""
        if scope["method"] not in _READ_METHODS:
            return False
        document = await explain(self.engine, scope["path"], query)
        if document is None:
            return False
        request = document["request"]
        exchange_of(scope).labels = (
            request.get("group", ""),
            request.get("version", ""),
            "explain",
        )
        await send_body(send, 200, explanation.body(document), JSON_HEADERS)
        return True

    async def _status_page(self, scope: Scope, send: Send) -> None:
        """The per-metric status page: a table, or its JSON document with `?format=json`."""
        document = status_document(self.engine)
        if "json" in parse_qs(scope["query_string"].decode("utf-8", "replace")).get("format", ()):
            await send_body(send, 200, explanation.body(document), JSON_HEADERS)
            return
        text = explanation.render_status_text(document)
        await send_body(send, 200, text.encode(), _TEXT_HEADERS)

    async def _discovery(
        self,
        scope: Scope,
        query: QueryParams,
        parsed: RootDiscovery | GroupDiscovery | VersionDiscovery,
        send: Send,
    ) -> None:
        root = isinstance(parsed, RootDiscovery)
        chosen = discovery_representation(scope, aggregated=root)
        if chosen.aggregated:
            await send_aggregated(scope, query, chosen, self.discovery.aggregated(), send)
            return
        document = self.discovery.document(parsed, server_address(scope))
        await send_document(scope, query, chosen, document, send)

    def _representation(self, scope: Scope, query: QueryParams) -> Representation:
        chosen = metric_representation(
            request_header(scope, b"accept"), request_header(scope, b"user-agent"), query.pretty
        )
        if chosen is None:
            raise not_acceptable(SERVED_MEDIA_TYPES)
        return chosen

    async def _answer(
        self,
        parsed: MetricRequest | ExternalMetricRequest,
        mapping: ResourceMapping | None,
        encoding: _Encoding,
    ) -> bytes:
        if isinstance(parsed, MetricRequest):
            samples = await self.engine.custom(
                parsed, mapping=mapping, freshness=self.metrics.observe_freshness
            )
            return encoding.metric_value_list(
                samples,
                api_version=f"{parsed.group}/{parsed.version}",
                shape=_SHAPES[parsed.version],
                metric_selector=parsed.metric_selector,
            )
        return encoding.external_metric_value_list(await self.engine.external(parsed))


class ResourceMetricsEndpoints:
    """`metrics.k8s.io` v1 and v1beta1: parse, negotiate (JSON, protobuf or Table; discovery
    as upstream), render."""

    def __init__(self, api: resource_api.ResourceMetricsApi) -> None:
        self.api = api

    async def __call__(self, scope: Scope, send: Send) -> None:
        """Answer one request under `/apis/metrics.k8s.io`."""
        await guarded(scope, send, self._serve, (metrics_request.GROUP, "", ""))

    async def _serve(self, scope: Scope, query: QueryParams, send: Send) -> None:
        request = metrics_request.parse_request(scope["path"], query, scope["query_string"])
        if request is None:
            await send_not_found_text(send)
            return
        if scope["method"] not in _READ_METHODS:
            raise method_not_allowed()
        exchange_of(scope).labels = (metrics_request.GROUP, request.version, "")
        if request.kind in ("group", "version"):
            chosen = discovery_representation(scope, aggregated=False)
            await send_document(scope, query, chosen, self.api.document(request), send)
            return
        view_chosen = metrics_request.negotiate(request_header(scope, b"accept"))
        if isinstance(view_chosen, NotAcceptable):
            raise view_chosen
        view, pretty = view_chosen
        if view == "protobuf":
            await send_body(send, 200, self.api.render(request, view), PROTOBUF_HEADERS)
            return
        pretty = pretty_requested(scope, query, accepted=pretty)
        await send_body(send, 200, self.api.render(request, view, pretty=pretty), JSON_HEADERS)


class DemoCoreEndpoints:
    """The demo's read-only `/api` subset: JSON, and the aggregated `/api` document (the
    legacy group "", as kube-apiserver's) in JSON or protobuf."""

    def __init__(self, api: core_api.DemoCoreApi) -> None:
        self.api = api
        core = api.document(core_api.CoreApiRequest("v1"))
        #: fixed for the process: the demo serves nodes and pods, whatever the cluster holds
        self.aggregated = render_aggregated({"": [("v1", core)]})

    async def __call__(self, scope: Scope, send: Send) -> None:
        """Answer one request under `/api`."""
        await guarded(scope, send, self._serve, ("", "v1", ""))

    async def _serve(self, scope: Scope, query: QueryParams, send: Send) -> None:
        if scope["method"] not in _READ_METHODS:
            raise method_not_allowed()
        request = self.api.parse(scope["path"], query)
        accepted_pretty = False
        if not request.resource:  # `/api` or `/api/v1`: discovery, negotiated as upstream
            chosen = discovery_representation(scope, aggregated=not request.version)
            if chosen.aggregated:
                await send_aggregated(scope, query, chosen, self.aggregated, send)
                return
            accepted_pretty = chosen.pretty
        else:
            representation = negotiate(request_header(scope, b"accept"))
            if isinstance(representation, NotAcceptable):
                raise representation
            accepted_pretty = representation.pretty
        body = wire.dumps(self.api.document(request, server_address(scope)))
        pretty = pretty_requested(scope, query, accepted=accepted_pretty)
        await send_body(send, 200, wire.prettify(body) if pretty else body, JSON_HEADERS)


def _labels(parsed: ParsedRequest, mapping: ResourceMapping | None) -> tuple[str, str, str]:
    """Self-metric labels (`mapping`: a metric request's, as the cluster view has it); unknown
    resources collapse to `other` (bounded cardinality)."""
    if isinstance(parsed, MetricRequest):
        resource = str(mapping.group_resource) if mapping else "other"
        return parsed.group, parsed.version, resource
    if isinstance(parsed, ExternalMetricRequest):
        return EXTERNAL_GROUP, "v1beta1", "external"
    if isinstance(parsed, VersionDiscovery | StatusPage):
        return parsed.group, parsed.version, ""
    if isinstance(parsed, GroupDiscovery):
        return parsed.group, "", ""
    return "", "", ""
