"""The `/apis` hot path: a bare ASGI handler for discovery and metric values.

No framework routing, dependency injection or per-item models here (they cost 2-5x on this
path, see docs/performance.md): the pure grammar parses the decoded path, the query layer
answers, the wire layer joins pre-rendered fragments, and the response goes out as one body
with an explicit `content-length`. Every failure is a Kubernetes `Status`; a bug is logged
with a request id and answered with a masked 500, never a traceback.

Per request: O(len(path)) parsing, the query layer's cost, and O(items) to join the body.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
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
from custom_metrics_server.api.negotiation import (
    PROTOBUF,
    Representation,
    negotiate,
    pretty_user_agent,
)
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
from custom_metrics_server.server.observability import ServerMetrics

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]

logger = logging.getLogger(__name__)

_SHAPES: Final = {
    "v1beta2": ItemShape.V1BETA2,
    "v1beta1": ItemShape.V1BETA1,
    "v1alpha1": ItemShape.V1BETA1,
}
_JSON_HEADERS: Final = (
    (b"content-type", b"application/json"),
    (b"cache-control", b"no-cache, private"),
    (b"x-content-type-options", b"nosniff"),
)
_PROTOBUF_HEADERS: Final = (
    (b"content-type", PROTOBUF.encode()),
    (b"cache-control", b"no-cache, private"),
    (b"x-content-type-options", b"nosniff"),
)
_NOT_FOUND_TEXT: Final = b"404 page not found\n"
#: HEAD is answered as GET; the server (uvicorn) sends the headers without the body.
_READ_METHODS: Final = frozenset({"GET", "HEAD"})
_TEXT_HEADERS: Final = (
    (b"content-type", b"text/plain; charset=utf-8"),
    (b"x-content-type-options", b"nosniff"),
)


async def send_body(
    send: Send, status: int, body: bytes, headers: tuple[tuple[bytes, bytes], ...] = _JSON_HEADERS
) -> None:
    """One complete response with an explicit length."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_not_found_text(send: Send) -> None:
    """Go's `http.NotFound`, for paths outside every served group."""
    await send_body(send, 404, _NOT_FOUND_TEXT, _TEXT_HEADERS)


class _Encoding(NamedTuple):
    """The encoders of one representation (same inputs, same answers, different bytes)."""

    metric_value_list: Callable[..., bytes]
    external_metric_value_list: Callable[[Sequence[ExternalSample]], bytes]
    document: Callable[[Any], bytes]


_JSON: Final = _Encoding(wire.metric_value_list, wire.external_metric_value_list, wire.dumps)
_PROTOBUF: Final = _Encoding(
    protobuf.metric_value_list, protobuf.external_metric_value_list, protobuf.encode_document
)


def request_header(scope: Scope, name: bytes) -> str:
    """The first value of a request header (lower-case `name`), "" when absent."""
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return ""


def status_response(
    error: StatusError, accept: str
) -> tuple[bytes, tuple[tuple[bytes, bytes], ...]]:
    """A failure's `Status` body and headers (the error's own, such as `Retry-After`,
    included), negotiated like data as upstream's `ErrorNegotiated` does: protobuf when the
    Accept header prefers it. A 406 is always JSON (upstream writes the negotiation failure
    with `WriteRawJSON`)."""
    own = tuple((name.lower().encode(), value.encode()) for name, value in error.headers.items())
    if not isinstance(error, NotAcceptable) and accept:
        chosen = negotiate(accept)
        if not isinstance(chosen, NotAcceptable) and chosen.protobuf:
            return protobuf.status(error), _PROTOBUF_HEADERS + own
    return wire.status(error), _JSON_HEADERS + own


class ApiEndpoints:
    """Serves everything below `/apis` (and, in the demo, the read-only `/api` subset)."""

    def __init__(
        self,
        *,
        engine: QueryEngine,
        metrics: ServerMetrics,
        server_address: str,
        metrics_api: resource_api.ResourceMetricsApi | None = None,
        demo_core_api: core_api.DemoCoreApi | None = None,
    ) -> None:
        self.engine = engine
        self.metrics = metrics
        self.server_address = server_address
        #: `metrics.k8s.io` (the Resource Metrics API), when enabled.
        self.metrics_api = metrics_api
        self._extra_groups = resource_api.GROUP_VERSIONS if metrics_api is not None else None
        #: The demo's read-only `/api` subset (nodes, pods) that `kubectl top` also reads.
        self.demo_core_api = demo_core_api

    async def __call__(self, scope: Scope, send: Send) -> None:
        """Answer one HTTP request whose path is under `/apis`."""
        started = time.perf_counter()
        query = parse_query(scope["query_string"])
        group = version = resource = ""
        code = 500
        try:
            other = self._other_api(scope["path"])
            if other is not None:
                group, version, serve_other = other
                code = await serve_other(scope, query, send)
                return
            try:
                parsed = parse(scope["path"], query)
            except NotFound:
                raise
            except StatusError:
                if scope["method"] not in _READ_METHODS:
                    raise method_not_allowed() from None
                raise
            if parsed is None:
                code = 404
                await send_not_found_text(send)
                return
            if scope["method"] not in _READ_METHODS:
                raise method_not_allowed()
            group, version, resource = _labels(parsed, self.engine)
            representation = self._representation(scope, query, parsed)
            if representation.protobuf:
                body = await self._answer(parsed, _PROTOBUF)
                code = 200
                await send_body(send, 200, body, _PROTOBUF_HEADERS)
                return
            body = await self._answer(parsed, _JSON)
            if representation.pretty:
                body = wire.prettify(body)
            code = 200
            await send_body(send, 200, body)
        except StatusError as error:
            code = error.code
            await self._send_status(send, error, scope)
        except asyncio.CancelledError:
            code = 504  # the request deadline cancelled us; the app answers the 504
            raise
        except Exception:
            request_id = uuid.uuid4().hex
            logger.exception(
                "request %s %s failed (request id %s)", scope["method"], scope["path"], request_id
            )
            code = 500
            await self._send_status(send, internal_error(), scope, request_id=request_id)
        finally:
            self.metrics.observe_request(
                group=group,
                version=version,
                resource=resource,
                verb="get",
                code=code,
                seconds=time.perf_counter() - started,
            )

    def _other_api(
        self, path: str
    ) -> tuple[str, str, Callable[[Scope, QueryParams, Send], Awaitable[int]]] | None:
        """(group, version, handler) of a path served beside the metric APIs, if it is one."""
        if self.metrics_api is not None and resource_api.is_metrics_api_path(path):
            return resource_api.GROUP, resource_api.VERSION, self._serve_metrics_api
        if self.demo_core_api is not None and core_api.is_core_api_path(path):
            return "", "v1", self._serve_core_api
        return None

    async def _serve_metrics_api(self, scope: Scope, query: QueryParams, send: Send) -> int:
        """`metrics.k8s.io`: parse, negotiate (JSON, protobuf or Table), render; returns the
        code sent.
        Errors propagate as `StatusError` to `__call__`."""
        api = self.metrics_api
        assert api is not None  # routed here only when set
        request = resource_api.parse_request(scope["path"], query, scope["query_string"])
        if request is None:
            await send_not_found_text(send)
            return 404
        if scope["method"] not in _READ_METHODS:
            raise method_not_allowed()
        chosen = resource_api.negotiate(request_header(scope, b"accept"))
        if isinstance(chosen, NotAcceptable):
            raise chosen
        view, pretty = chosen
        if view == "protobuf":
            await send_body(send, 200, api.render(request, view), _PROTOBUF_HEADERS)
            return 200
        pretty = _pretty(scope, query, accepted=pretty)
        await send_body(send, 200, api.render(request, view, pretty=pretty))
        return 200

    async def _serve_core_api(self, scope: Scope, query: QueryParams, send: Send) -> int:
        """The demo's `/api` subset (JSON only); errors propagate as `StatusError`."""
        api = self.demo_core_api
        assert api is not None  # routed here only when set
        if scope["method"] not in _READ_METHODS:
            raise method_not_allowed()
        request = api.parse(scope["path"], query)
        representation = negotiate(
            request_header(scope, b"accept"), discovery_root=not request.version
        )
        if isinstance(representation, NotAcceptable):
            raise representation
        body = wire.dumps(api.document(request, self.server_address))
        pretty = _pretty(scope, query, accepted=representation.pretty)
        await send_body(send, 200, wire.prettify(body) if pretty else body)
        return 200

    async def _send_status(
        self, send: Send, error: StatusError, scope: Scope, *, request_id: str = ""
    ) -> None:
        body, headers = status_response(error, request_header(scope, b"accept"))
        if request_id:
            headers += ((b"audit-id", request_id.encode()),)
        await send_body(send, error.code, body, headers)

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

    async def _answer(self, parsed: ParsedRequest, encoding: _Encoding) -> bytes:
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
        return encoding.document(discovery.api_group_list(self.server_address, self._extra_groups))


def _pretty(scope: Scope, query: QueryParams, *, accepted: bool) -> bool:
    """Indent JSON? `?pretty=` decides when given; else the Accept clause's `pretty=1`, or a
    curl/Wget/browser user agent (upstream's `isPrettyPrint`)."""
    if query.pretty is not None:
        return query.pretty
    return accepted or pretty_user_agent(request_header(scope, b"user-agent"))


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
