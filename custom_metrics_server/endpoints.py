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

from custom_metrics_server import discovery, protobuf, wire
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
from custom_metrics_server.grammar import (
    EXTERNAL_GROUP,
    GroupDiscovery,
    ParsedRequest,
    QueryParams,
    RootDiscovery,
    VersionDiscovery,
    parse,
    parse_query,
)
from custom_metrics_server.negotiation import (
    PROTOBUF,
    Representation,
    negotiate,
    pretty_user_agent,
)
from custom_metrics_server.observability import ServerMetrics
from custom_metrics_server.query import QueryEngine

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
    """A failure's `Status` body and headers, negotiated like data as upstream's
    `ErrorNegotiated` does: protobuf when the Accept header prefers it. A 406 is always JSON
    (upstream writes the negotiation failure with `WriteRawJSON`)."""
    if not isinstance(error, NotAcceptable) and accept:
        chosen = negotiate(accept)
        if not isinstance(chosen, NotAcceptable) and chosen.protobuf:
            return protobuf.status(error), _PROTOBUF_HEADERS
    return wire.status(error), _JSON_HEADERS


class ApiEndpoints:
    """Serves everything below `/apis`."""

    def __init__(self, *, engine: QueryEngine, metrics: ServerMetrics, server_address: str) -> None:
        self.engine = engine
        self.metrics = metrics
        self.server_address = server_address

    async def __call__(self, scope: Scope, send: Send) -> None:
        """Answer one HTTP request whose path is under `/apis`."""
        started = time.perf_counter()
        query = parse_query(scope["query_string"])
        group = version = resource = ""
        code = 500
        try:
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

    async def _send_status(
        self, send: Send, error: StatusError, scope: Scope, *, request_id: str = ""
    ) -> None:
        body, headers = status_response(error, request_header(scope, b"accept"))
        headers += tuple(
            (name.lower().encode(), value.encode()) for name, value in error.headers.items()
        )
        if request_id:
            headers += ((b"audit-id", request_id.encode()),)
        await send_body(send, error.code, body, headers)

    def _representation(
        self, scope: Scope, query: QueryParams, parsed: ParsedRequest
    ) -> Representation:
        chosen = negotiate(
            request_header(scope, b"accept"), discovery_root=isinstance(parsed, RootDiscovery)
        )
        if isinstance(chosen, NotAcceptable):
            raise chosen
        if chosen.protobuf:
            return chosen  # binary: `pretty` does not apply
        pretty = query.pretty
        if pretty is None:
            pretty = chosen.pretty or pretty_user_agent(request_header(scope, b"user-agent"))
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
        return encoding.document(discovery.api_group_list(self.server_address))


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
