"""A scripted HTTP server on a real socket for the Prometheus client's tests: each connection
runs a test's handler, and the server counts connections and records request heads."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "Server"], Awaitable[None]]

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


@dataclass
class Server:
    """A scripted HTTP server: `handler` runs once per connection."""

    handler: Handler
    ssl_context: ssl.SSLContext | None = None
    connections: int = 0
    open_now: int = 0
    most_open: int = 0
    heads: list[bytes] = field(default_factory=list)
    server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            await self.handler(reader, writer, self)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client hung up, or the test ended (no "task exception" log)
        finally:
            self.open_now -= 1
            writer.close()

    async def read_head(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        return head


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[Server]]]:
    """Start scripted servers (closed at the end of the test)."""
    servers: list[Server] = []

    async def start(handler: Handler, *, ssl_context: ssl.SSLContext | None = None) -> Server:
        server = Server(handler, ssl_context)
        server.server = await asyncio.start_server(server._serve, "127.0.0.1", 0, ssl=ssl_context)
        servers.append(server)
        return server

    yield start
    for server in servers:
        assert server.server is not None
        server.server.close()


def keep_alive(answer: bytes) -> Handler:
    """A handler answering every request on a connection with `answer`."""

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        while True:
            await s.read_head(reader)
            writer.write(answer)
            await writer.drain()

    return handler
