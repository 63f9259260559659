"""What every `/apis` and `/api` handler shares: running a handler body with its failures as
`Status` answers (`guarded`), and the negotiated sends of discovery documents (plain and
aggregated v2, with upstream's ETag and 304) and of JSON's `pretty` choice.

Owns no route and no state; `endpoints` holds the handlers. Cost: O(1) per request beyond the
body's own bytes (O(size) to indent a pretty one).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from custom_metrics_server.api import aggregated_discovery, protobuf, wire
from custom_metrics_server.api.grammar import QueryParams, parse_query
from custom_metrics_server.api.negotiation import (
    PROTOBUF,
    DiscoveryRepresentation,
    negotiate_discovery,
    pretty_user_agent,
)
from custom_metrics_server.api.status import JSON_HEADERS, PROTOBUF_HEADERS, status_response
from custom_metrics_server.errors import NotAcceptable, StatusError, internal_error
from custom_metrics_server.runtime.asgi import (
    Scope,
    Send,
    request_header,
    send_body,
    send_headers_only,
)
from custom_metrics_server.server.chain import exchange_of
from custom_metrics_server.server.discovery import RenderedDiscovery

__all__ = [
    "discovery_representation",
    "guarded",
    "pretty_requested",
    "send_aggregated",
    "send_document",
    "send_status",
]

# The handlers' logger: a masked 500's line names the module that serves the request.
logger = logging.getLogger("custom_metrics_server.server.endpoints")


async def guarded(
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


def pretty_requested(scope: Scope, query: QueryParams, *, accepted: bool) -> bool:
    """Indent JSON? `?pretty=` decides when given; else the Accept clause's `pretty=1`, or a
    curl/Wget/browser user agent (upstream's `isPrettyPrint`)."""
    if query.pretty is not None:
        return query.pretty
    return accepted or pretty_user_agent(request_header(scope, b"user-agent"))


def discovery_representation(scope: Scope, *, aggregated: bool) -> DiscoveryRepresentation:
    """How to answer a discovery path (`aggregated`: it serves the aggregated document too),
    or the 406 raised. O(len(accept)), cached."""
    chosen = negotiate_discovery(request_header(scope, b"accept"), aggregated=aggregated)
    if isinstance(chosen, NotAcceptable):
        raise chosen
    return chosen


async def send_document(
    scope: Scope,
    query: QueryParams,
    chosen: DiscoveryRepresentation,
    document: dict[str, Any],
    send: Send,
) -> None:
    """A plain discovery document in the negotiated media type. O(size of the document)."""
    if chosen.media_type == PROTOBUF:
        await send_body(send, 200, protobuf.encode_document(document), PROTOBUF_HEADERS)
        return
    body = wire.dumps(document)
    if pretty_requested(scope, query, accepted=chosen.pretty):
        body = wire.prettify(body)
    await send_body(send, 200, body, JSON_HEADERS)


async def send_aggregated(
    scope: Scope,
    query: QueryParams,
    chosen: DiscoveryRepresentation,
    rendered: RenderedDiscovery,
    send: Send,
) -> None:
    """The aggregated document as upstream's `ServeHTTPWithETag` answers it: `ETag`,
    `Vary: Accept`, `Cache-Control: public`; 304 without a body when `If-None-Match` is the
    `ETag`; else the body, its `Content-Type` naming the kind (`;g=...;v=v2;as=...`). O(1)
    with the rendered bodies (O(size) to indent a pretty one)."""
    cache_headers = (
        (b"etag", rendered.etag.encode()),
        (b"vary", b"Accept"),
        (b"cache-control", b"public"),
    )
    if request_header(scope, b"if-none-match") == rendered.etag:
        await send_headers_only(send, 304, cache_headers)
        return
    if chosen.media_type == PROTOBUF:
        body = rendered.protobuf
    else:
        body = rendered.json
        if pretty_requested(scope, query, accepted=chosen.pretty):
            body = wire.prettify(body)
    content_type = aggregated_discovery.content_type(chosen.media_type)
    headers = (
        (b"content-type", content_type.encode()),
        *cache_headers,
        (b"x-content-type-options", b"nosniff"),
    )
    await send_body(send, 200, body, headers)
