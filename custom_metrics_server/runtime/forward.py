"""Requests forwarded from a worker process to the main process over a Unix socket.

`serve --workers N` (server/workers.py) runs N worker processes that do TLS, HTTP, the
handler chain's guards and authentication/authorization, and one main process that holds the
backends. A worker hands each request that passed its guards to the main process over one
multiplexed Unix-socket connection (`ForwardClient`); the main process runs it through its
ASGI application as if it had come from uvicorn (`ForwardServer`) and streams the response back.

Wire (all integers big-endian; one frame = a 4-byte length of the rest, then the rest):

* worker -> main: `!IB` request id and kind (`REQUEST`, `CANCEL`, `HELLO`), then for a
  request the orjson array `[method, path, raw_path, query, headers, server, client]`
  (byte strings as latin-1 text), for a hello the worker's pid as text;
* main -> worker: `!IB` request id and flags (`START`: the response's status and headers
  come first, as a `!I`-length-prefixed orjson `[status, headers]`; `MORE`: more body follows),
  then body bytes. A response with one body message (every hot-path answer) is one frame.

Costs, per request: one frame each way (two `write`s batched by the loop, one orjson dump and
load each side, O(headers + body)); no task per request on the worker side, one on the main
side. Everything here is pure asyncio; nothing of the package is imported.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable
from typing import Any, Final, cast

import orjson

from custom_metrics_server.runtime.asgi import ASGIApp, Message, Scope, Send

__all__ = [
    "CANCEL",
    "HELLO",
    "REQUEST",
    "ForwardClient",
    "ForwardServer",
    "MainUnavailable",
]

logger = logging.getLogger(__name__)

REQUEST: Final = 0
CANCEL: Final = 1
HELLO: Final = 2
START: Final = 1
MORE: Final = 2
_LENGTH: Final = struct.Struct("!I")
_HEAD: Final = struct.Struct("!IIB")  # length of the rest, request id, kind or flags
_HEAD_SIZE: Final = _HEAD.size
_MAX_FRAME: Final = 1 << 30


class MainUnavailable(ConnectionError):
    """The main process cannot be reached (not connected, or the connection was lost)."""


def _frame(request_id: int, kind: int, payload: bytes) -> bytes:
    return _HEAD.pack(len(payload) + 5, request_id, kind) + payload


class _Batch:
    """Frames written in one turn of the event loop go out in one `write` (one syscall and
    one wake-up of the other process for many requests under load). O(bytes)."""

    __slots__ = ("_chunks", "transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self._chunks: list[bytes] = []

    def write(self, data: bytes) -> None:
        chunks = self._chunks
        if not chunks:
            asyncio.get_running_loop().call_soon(self._flush)
        chunks.append(data)

    def _flush(self) -> None:
        chunks, self._chunks = self._chunks, []
        if not self.transport.is_closing():
            self.transport.write(b"".join(chunks) if len(chunks) > 1 else chunks[0])


class _Frames:
    """Splits a byte stream into frames; `feed` returns complete ones. O(bytes)."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        buffer = self._buffer
        buffer += data
        frames = []
        offset = 0
        while len(buffer) - offset >= _HEAD_SIZE:
            size, request_id, kind = _HEAD.unpack_from(buffer, offset)
            if size > _MAX_FRAME or size < 5:
                raise ValueError(f"bad frame length {size}")
            end = offset + 4 + size
            if end > len(buffer):
                break
            frames.append((request_id, kind, bytes(buffer[offset + _HEAD_SIZE : end])))
            offset = end
        if offset:
            del buffer[:offset]
        return frames


def _text_pairs(headers: Any) -> list[list[str]]:
    return [[name.decode("latin-1"), value.decode("latin-1")] for name, value in headers]


def _byte_pairs(headers: list[list[str]]) -> list[tuple[bytes, bytes]]:
    return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]


class _Pending:
    """One forwarded request waiting for its response frames (no queue unless it streams)."""

    __slots__ = ("frames", "waiter")

    def __init__(self, waiter: asyncio.Future[None]) -> None:
        self.waiter = waiter
        self.frames: list[tuple[int, bytes]] = []


class ForwardClient(asyncio.Protocol):
    """The worker's one connection to the main process, multiplexing every request.

    `forward(scope, send)` sends the request and relays the response to `send`; it raises
    `MainUnavailable` when the connection is down (the caller answers 503) and is cancelled
    by the request's deadline like any handler (the main process is then told to cancel)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._transport: _Batch | None = None
        self._frames = _Frames()
        self._pending: dict[int, _Pending] = {}
        self._next_id = 0
        self.lost = asyncio.Event()

    @property
    def connected(self) -> bool:
        """Whether the connection to the main process is up."""
        return self._transport is not None

    async def connect(self) -> None:
        """Connect to the main process."""
        loop = asyncio.get_running_loop()
        await loop.create_unix_connection(lambda: self, self.path)

    def hello(self, text: str) -> None:
        """Greet the main process (it then counts this worker as serving)."""
        if self._transport is not None:
            self._transport.write(_frame(0, HELLO, text.encode()))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = _Batch(cast("asyncio.Transport", transport))  # uvloop's: no subclass
        self.lost.clear()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        pending, self._pending = self._pending, {}
        for entry in pending.values():
            if not entry.waiter.done():
                entry.waiter.set_exception(MainUnavailable("the main process went away"))
        self.lost.set()

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._frames.feed(data)
        except ValueError:
            logger.exception("bad frame from the main process")
            if self._transport is not None:
                self._transport.transport.abort()
            return
        for request_id, flags, payload in frames:
            entry = self._pending.get(request_id)
            if entry is None:
                continue  # cancelled meanwhile
            entry.frames.append((flags, payload))
            if not entry.waiter.done():
                entry.waiter.set_result(None)

    async def forward(self, scope: Scope, send: Send) -> None:
        """Relay one request's answer from the main process to `send`. O(headers + body)."""
        transport = self._transport
        if transport is None:
            raise MainUnavailable("not connected to the main process")
        self._next_id = request_id = (self._next_id + 1) & 0xFFFFFFFF
        server = scope.get("server") or ("", 0)
        client = scope.get("client") or ("", 0)
        payload = orjson.dumps(
            [
                scope["method"],
                scope["path"],
                scope.get("raw_path", b"").decode("latin-1"),
                scope["query_string"].decode("latin-1"),
                _text_pairs(scope["headers"]),
                [server[0], server[1]],
                [client[0], client[1]],
            ]
        )
        loop = asyncio.get_running_loop()
        entry = _Pending(loop.create_future())
        self._pending[request_id] = entry
        transport.write(_frame(request_id, REQUEST, payload))
        finished = False
        try:
            while True:
                await entry.waiter
                frames, entry.frames = entry.frames, []
                for flags, payload in frames:
                    more = bool(flags & MORE)
                    body = payload
                    if flags & START:
                        (size,) = _LENGTH.unpack_from(payload)
                        status, headers = orjson.loads(payload[4 : 4 + size])
                        body = payload[4 + size :]
                        await send(
                            {
                                "type": "http.response.start",
                                "status": status,
                                "headers": _byte_pairs(headers),
                            }
                        )
                    await send({"type": "http.response.body", "body": body, "more_body": more})
                    if not more:
                        finished = True
                        return
                entry.waiter = loop.create_future()
        finally:
            self._pending.pop(request_id, None)
            if not finished and self._transport is not None:
                self._transport.write(_frame(request_id, CANCEL, b""))


class _ServerConnection(asyncio.Protocol):
    """One worker's connection on the main side: one task per request through `app`."""

    def __init__(self, owner: ForwardServer) -> None:
        self.owner = owner
        self.transport: _Batch | None = None
        self.frames = _Frames()
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.worker = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = _Batch(cast("asyncio.Transport", transport))

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        for task in self.tasks.values():
            task.cancel()
        self.tasks.clear()

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.frames.feed(data)
        except ValueError:
            logger.exception("bad frame from worker %s", self.worker or "?")
            if self.transport is not None:
                self.transport.transport.abort()
            return
        for request_id, kind, payload in frames:
            if kind == REQUEST:
                task = asyncio.get_running_loop().create_task(self._serve(request_id, payload))
                self.tasks[request_id] = task
            elif kind == CANCEL:
                found = self.tasks.pop(request_id, None)
                if found is not None:
                    found.cancel()
            elif kind == HELLO:
                self.worker = payload.decode()
                self.owner.greeted(self.worker)

    async def _serve(self, request_id: int, payload: bytes) -> None:
        method, path, raw_path, query, headers, server, client = orjson.loads(payload)
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "scheme": "https",
            "method": method,
            "path": path,
            "raw_path": raw_path.encode("latin-1"),
            "query_string": query.encode("latin-1"),
            "root_path": "",
            "headers": _byte_pairs(headers),
            "server": (server[0], server[1]),
            "client": (client[0], client[1]),
            "state": {},
        }
        start: list[bytes] = []

        async def send(message: Message) -> None:
            transport = self.transport
            if transport is None:
                return
            if message["type"] == "http.response.start":
                head = orjson.dumps([message["status"], _text_pairs(message.get("headers", ()))])
                start.append(_LENGTH.pack(len(head)) + head)
                return
            body = message.get("body", b"")
            more = bool(message.get("more_body", False))
            flags = MORE if more else 0
            if start:
                transport.write(_frame(request_id, flags | START, start.pop() + body))
            else:
                transport.write(_frame(request_id, flags, body))

        try:
            await self.owner.app(scope, _Receive(), send)
        finally:
            self.tasks.pop(request_id, None)


class _Receive:
    """The request has no body (the API is GET-only); a second call waits until the request
    is cancelled, as a client that stays connected looks to the application."""

    __slots__ = ("called",)

    def __init__(self) -> None:
        self.called = False

    async def __call__(self) -> Message:
        if self.called:
            await asyncio.get_running_loop().create_future()
        self.called = True
        return {"type": "http.request", "body": b"", "more_body": False}


class ForwardServer:
    """The main process's end: a Unix-socket server running forwarded requests through
    `app`. `greeted(worker)` is called when a worker connects and says hello."""

    def __init__(self, app: ASGIApp, greeted: Callable[[str], None]) -> None:
        self.app = app
        self.greeted = greeted
        self.server: asyncio.AbstractServer | None = None

    async def start(self, path: str) -> asyncio.AbstractServer:
        """Listen on `path` (a file in a directory only this user can enter)."""
        loop = asyncio.get_running_loop()
        self.server = await loop.create_unix_server(lambda: _ServerConnection(self), path)
        return self.server
