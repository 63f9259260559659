"""An answer of the lean HTTP/1.1 client whose body is read as it arrives (`Http11Pool.stream`):
kube-apiserver's watch streams, which last minutes and deliver a line per event.

This module owns :class:`BodyStream`: one call on one `Http11Connection`, from the request's
write to the end of its answer. The caller gets the stream once the answer's head is in
(`status`, `reason`); a 200's body then arrives in pieces (`async for piece in stream`, as the
server sends them, gzip decoded), any other status's whole body as one piece at its end (at most
the call's `limit`, like every piece of a 200's). The connection stays the stream's until
the body ends (then it goes back to the pool at once, whatever the reader still holds) or the
stream is closed before (then it is closed: its next bytes would be out of step). A reader
cancelled while waiting closes it too. A server silent for `timeout` seconds while the reader
waits fails the stream with `TransportTimeout`; a reader slower than the server pauses the
socket (more than `HIGH_WATER` bytes held) rather than holding an unbounded backlog, and
silence then is the reader's, not the server's. Pieces that arrived before a failure are read
first; then the failure is raised (`TransportError`, `BodyTooLarge`).

It must not choose connections (`http11` does) nor know what the body means (its callers split
lines). Cost: one future per wait for the server, O(1) per piece handed on (no copy).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from types import TracebackType
from typing import Final, Self

from custom_metrics_server.http_client.connection import (
    Answer,
    Http11Connection,
    TransportTimeout,
)

__all__ = ["HIGH_WATER", "BodyStream"]

#: Decoded bytes held for a slow reader before the socket is paused, and resumed below.
HIGH_WATER: Final = 1 << 20
_LOW_WATER: Final = HIGH_WATER // 4


class BodyStream:
    """One streamed answer; see the module docstring."""

    def __init__(
        self,
        connection: Http11Connection,
        release: Callable[[Http11Connection], None],
        *,
        timeout: float,
        limit: int | None,
    ) -> None:
        self.connection = connection
        self.status = 0
        self.reason = ""
        self.timeout = timeout
        self._release = release
        self._limit = limit
        self._loop = connection.loop
        self._pieces: collections.deque[bytes] = collections.deque()
        self._held = 0
        self._paused = False
        self._head: asyncio.Future[None] = self._loop.create_future()
        self._end: asyncio.Future[Answer] = self._loop.create_future()
        self._wakeup: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._finished = False

    async def open(self, head: bytes, body: bytes) -> None:
        """Send the request and wait for the answer's head (the errors of the module
        docstring; `connection.Stale` for a kept-alive connection the server had closed)."""
        connection = self.connection
        connection.waiter = self._end
        connection.sink = self._feed
        connection.on_head = self._headed
        connection.limit = self._limit
        connection.bodiless = False  # a watch is a GET; its body is the stream
        connection.uses += 1
        connection.last_activity = self._loop.time()
        self._end.add_done_callback(self._ended)
        self._timer = self._loop.call_later(self.timeout, self._expire)
        assert connection.transport is not None
        connection.transport.write(head + body if body else head)
        try:
            await self._head
        except BaseException:
            self.close()
            raise

    # -- what the connection calls ----------------------------------------------------------

    def _headed(self, status: int, reason: str) -> None:
        self.status, self.reason = status, reason
        if not self._head.done():
            self._head.set_result(None)

    def _feed(self, piece: bytes) -> None:
        self._pieces.append(piece)
        self._held += len(piece)
        if self._held > HIGH_WATER and not self._paused:
            self._paused = True
            assert self.connection.transport is not None
            self.connection.transport.pause_reading()
        self._wake()

    def _ended(self, end: asyncio.Future[Answer]) -> None:
        """The answer is complete, or failed: release or drop the connection, tell the reader.
        Once, from the future's callback or from the reader who saw it done first."""
        if self._finished:
            return
        self._finished = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        connection = self.connection
        connection.on_head = None
        error = None if end.cancelled() else end.exception()
        if error is None and not end.cancelled():
            answer = end.result()
            self.status, self.reason = answer.status, answer.reason
            if answer.body and not self._closed:  # not streamed (not a 200): one piece
                self._pieces.append(answer.body)
            # Complete: the connection is in step again, whether or not the reader is done.
            self._resume()
            self._release(connection)
        if not self._head.done():
            if error is not None:
                self._head.set_exception(error)
            else:
                self._head.set_result(None)
        self._wake()

    # -- the reader ---------------------------------------------------------------------------

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> bytes:
        while not self._pieces:
            end = self._end
            if end.done():
                self._ended(end)  # its callback may not have run yet
                if self._pieces:
                    break
                error = None if end.cancelled() else end.exception()
                if error is not None:
                    raise error
                raise StopAsyncIteration  # complete, or closed by the reader
            self._wakeup = self._loop.create_future()
            try:
                await self._wakeup
            except BaseException:
                self.close()  # cancelled: the rest of the answer would be out of step
                raise
            finally:
                self._wakeup = None
        piece = self._pieces.popleft()
        self._held -= len(piece)
        if self._paused and self._held <= _LOW_WATER:
            self._resume()
        return piece

    async def read(self) -> bytes:
        """The whole (rest of the) body."""
        return b"".join([piece async for piece in self])

    def close(self) -> None:
        """Done reading: an answer not yet complete closes its connection."""
        if self._closed:
            return
        self._closed = True
        self._pieces.clear()
        self._held = 0
        if not self._end.done():
            connection = self.connection
            connection.waiter = None
            connection.sink = None
            connection.on_head = None
            connection.close()
            self._end.cancel()
        self._wake()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- helpers ------------------------------------------------------------------------------

    def _wake(self) -> None:
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    def _resume(self) -> None:
        if self._paused:
            self._paused = False
            self.connection.last_activity = self._loop.time()  # the silence was ours
            transport = self.connection.transport
            if transport is not None and not transport.is_closing():
                transport.resume_reading()

    def _expire(self) -> None:
        """The silence timer: the server said nothing for `timeout` seconds while the reader
        waited for it (a paused socket is the reader's silence)."""
        self._timer = None
        if self._end.done():
            return
        connection = self.connection
        silent = self._loop.time() - connection.last_activity
        if self._paused or silent < self.timeout:
            delay = self.timeout if self._paused else self.timeout - silent
            self._timer = self._loop.call_later(delay, self._expire)
            return
        connection.waiter = None
        connection.sink = None
        connection.close()
        self._end.set_exception(TransportTimeout(f"no answer within {self.timeout:g}s"))
