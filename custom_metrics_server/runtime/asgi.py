"""The ASGI types and the few ways we send a response, shared by every ASGI app of the package
(the API server's chain and endpoints, the security gate, the node agent).

A response always goes out as one `http.response.start` and one body message with an explicit
`content-length`: bodies are built whole before they are sent (they are small, or pre-rendered);
the one exception is a response without a body by definition (304).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Final

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Headers = tuple[tuple[bytes, bytes], ...]

#: Go's `http.NotFound` body, what a Kubernetes API server answers outside its routes.
NOT_FOUND_TEXT: Final = b"404 page not found\n"
TEXT_HEADERS: Final[Headers] = (
    (b"content-type", b"text/plain; charset=utf-8"),
    (b"x-content-type-options", b"nosniff"),
)


async def send_body(send: Send, status: int, body: bytes, headers: Headers = ()) -> None:
    """One complete response with an explicit length."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_headers_only(send: Send, status: int, headers: Headers = ()) -> None:
    """A response that has no body by definition (304 Not Modified): no `content-length`,
    which would have to be the length of the 200's body (RFC 9110, 8.6)."""
    await send({"type": "http.response.start", "status": status, "headers": list(headers)})
    await send({"type": "http.response.body", "body": b""})


async def send_not_found_text(send: Send) -> None:
    """Go's `http.NotFound`, for paths outside every served route."""
    await send_body(send, 404, NOT_FOUND_TEXT, TEXT_HEADERS)


def request_header(scope: Scope, name: bytes) -> str:
    """The first value of a request header (lower-case `name`), "" when absent. O(headers)."""
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return ""


def server_address(scope: Scope) -> str:
    """`host:port` the request arrived on (the connection's local address), "" if unknown:
    what discovery advertises in `serverAddressByClientCIDRs`."""
    server = scope.get("server")
    if not server:
        return ""
    host, port = server[0], server[1]
    if port is None:
        return str(host)
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


async def serve_lifespan(
    context: Callable[[], AbstractAsyncContextManager[None]],
    receive: Receive,
    send: Send,
    *,
    failed: Callable[[BaseException, bool], None],
) -> None:
    """The ASGI lifespan protocol around one context manager: `lifespan.startup` enters it,
    `lifespan.shutdown` leaves it. A failure is handed to `failed(error, during_startup)` and
    answered `lifespan.startup.failed` (or `.shutdown.failed`) without a message, so the
    server logs no traceback of its own: the caller says what failed, in one line
    (`runtime.startup`)."""
    if (await receive())["type"] != "lifespan.startup":
        return
    started = False
    try:
        async with context():
            started = True
            await send({"type": "lifespan.startup.complete"})
            while (await receive())["type"] != "lifespan.shutdown":
                pass
    except asyncio.CancelledError:
        raise
    except Exception as error:  # every failure is reported, none is lost
        failed(error, not started)
        kind = "lifespan.shutdown.failed" if started else "lifespan.startup.failed"
        await send({"type": kind, "message": ""})
        return
    await send({"type": "lifespan.shutdown.complete"})
