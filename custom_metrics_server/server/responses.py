"""The negotiated sends of discovery documents (plain and aggregated v2, with upstream's ETag
and 304) and JSON's `pretty` choice, for the handlers that send documents (discovery,
`metrics.k8s.io`, the demo's `/api`); a metric value list's representation is decided in one
memoised call (`api.negotiation.metric_representation`).

Owns no route and no state; `endpoints` holds the handlers and runs their bodies (`guarded`).
Cost: O(1) per request beyond the body's own bytes (O(size) to indent a pretty one).
"""

from __future__ import annotations

from typing import Any

from custom_metrics_server.api import aggregated_discovery, protobuf, wire
from custom_metrics_server.api.grammar import QueryParams
from custom_metrics_server.api.negotiation import (
    PROTOBUF,
    DiscoveryRepresentation,
    negotiate_discovery,
    pretty_print,
)
from custom_metrics_server.api.status import JSON_HEADERS, PROTOBUF_HEADERS
from custom_metrics_server.errors import NotAcceptable
from custom_metrics_server.runtime.asgi import (
    Scope,
    Send,
    request_header,
    send_body,
    send_headers_only,
)
from custom_metrics_server.server.discovery import RenderedDiscovery

__all__ = [
    "discovery_representation",
    "pretty_requested",
    "send_aggregated",
    "send_document",
]


def pretty_requested(scope: Scope, query: QueryParams, *, accepted: bool) -> bool:
    """Indent JSON? `api.negotiation.pretty_print` of `?pretty=`, the Accept clause's
    `pretty=1` (`accepted`) and the user agent."""
    return pretty_print(query.pretty, accepted, request_header(scope, b"user-agent"))


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
