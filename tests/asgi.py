"""Drive an ASGI app directly with the scope uvicorn would build (no sockets, no client)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote


@dataclass
class Reply:
    """What the app sent."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


def scope_for(
    method: str,
    raw_path: bytes,
    query: bytes = b"",
    headers: list[tuple[bytes, bytes]] | None = None,
) -> dict[str, Any]:
    """An HTTP scope as uvicorn's httptools protocol builds it (percent-decoded path)."""
    path = raw_path.decode("ascii", "replace")
    if "%" in path:
        path = unquote(path)
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "https",
        "path": path,
        "raw_path": raw_path,
        "query_string": query,
        "root_path": "",
        "headers": headers or [],
        "server": ("127.0.0.1", 6443),
        "client": ("127.0.0.1", 40000),
    }


async def call(app: Any, scope: dict[str, Any]) -> Reply:
    """Run one request through the app and collect the response."""
    reply = Reply()
    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if not received:
            received = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            reply.status = message["status"]
            reply.headers = {k.decode().lower(): v.decode() for k, v in message["headers"]}
        elif message["type"] == "http.response.body":
            reply.body += message.get("body", b"")

    await app(scope, receive, send)
    return reply
