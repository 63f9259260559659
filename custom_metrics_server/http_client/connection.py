"""One connection of the lean HTTP/1.1 client (`http11.Http11Pool`): an `asyncio.Protocol`
whose responses `httptools` parses, one call at a time, with the errors and the answer type the
pool's callers see.

Owns the framing (Content-Length, chunked, end of connection; no body for HEAD-like statuses),
gzip decoding with the call's body `limit`, the silence timer and the stale keep-alive case
(`Stale`: the server closed an idle connection before any byte of the answer, safe to send
again). It must not choose connections or know the pool's waiters (`http11` does), nor any
API above HTTP. Cost per call: O(answer bytes) in httptools' C parser and zlib.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

import httptools

__all__ = [
    "Answer",
    "BodyTooLarge",
    "Http11Connection",
    "Stale",
    "TransportError",
    "TransportTimeout",
]


class _Pool(Protocol):
    """What a connection reads of its pool."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    timeout: float

    def dropped(self, connection: Http11Connection) -> None: ...


#: Statuses whose answers have no body even without a Content-Length.
_NO_BODY_STATUS: Final = frozenset({204, 304})


class TransportError(Exception):
    """The server could not be reached, or the connection broke mid-call."""


class TransportTimeout(TransportError):
    """The server stayed silent for the whole timeout."""


class BodyTooLarge(TransportError):
    """The answer's body is over the call's `limit` (it was not read further)."""


@dataclass(frozen=True, slots=True)
class Answer:
    """A complete response: status, reason phrase and (decoded) body. With a streaming sink
    and status 200 the body went to the sink and is empty here."""

    status: int
    reason: str
    body: bytes


class Stale(TransportError):
    """A reused connection closed before any byte of the answer: safe to send again."""


class Http11Connection(asyncio.Protocol):
    """One TCP (or TLS) connection, one call at a time."""

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.loop = pool.loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.uses = 0
        self.waiter: asyncio.Future[Answer] | None = None
        self.sink: Callable[[bytes], None] | None = None
        #: Told the status and reason once an answer's head is in (a streamed answer's reader).
        self.on_head: Callable[[int, str], None] | None = None
        self.limit: int | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.last_activity = 0.0
        self._reset()

    def _reset(self) -> None:
        self.received = False  # any byte of the current answer
        self.headers_done = False
        self.reason = b""
        self.chunks: list[bytes] = []
        self.size = 0  # decoded body bytes so far (checked against `limit`)
        self.content_length: bytes | None = None
        self.chunked = False
        self.decoder: zlib._Decompress | None = None
        self.streaming = False
        self.header_error: str | None = None

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.waiter is None or self.waiter.done():
            self.close()  # bytes nobody asked for: the connection is out of step
            return
        self.received = True
        self.last_activity = self.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as err:
            # One of the callbacks below raised: an unusable header, a corrupt gzip stream,
            # or the streaming sink's own error (passed on as it is).
            cause = err.__context__
            if isinstance(cause, zlib.error):
                cause = TransportError(f"corrupt gzip body: {cause}")
            self._fail(cause if isinstance(cause, Exception) else TransportError(str(err)))
        except httptools.HttpParserError as err:
            self._fail(TransportError(f"malformed HTTP answer: {err}"))

    def eof_received(self) -> bool | None:
        self._ended()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.dropped(self)
        self._ended(exc)

    # -- httptools callbacks --------------------------------------------------------------------

    def on_status(self, status: bytes) -> None:
        self.reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        lowered = name.lower()
        if lowered == b"content-length":
            self.content_length = value
        elif lowered == b"transfer-encoding":
            self.chunked = b"chunked" in value.lower()
        elif lowered == b"content-encoding":
            coding = value.strip().lower()
            if coding == b"gzip":
                self.decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
            elif coding not in (b"", b"identity"):
                self.header_error = f"unsupported Content-Encoding {value.decode('latin-1')!r}"

    def on_headers_complete(self) -> None:
        self.headers_done = True
        if self.header_error is not None:
            raise TransportError(self.header_error)
        status = self.parser.get_status_code()
        self.streaming = self.sink is not None and status == 200
        if self.on_head is not None and status >= 200:
            self.on_head(status, self.reason.decode("latin-1").strip())

    def on_body(self, body: bytes) -> None:
        limit = self.limit
        if self.decoder is not None:
            # Never inflate past the limit (a small gzip body can decode to gigabytes).
            body = self.decoder.decompress(body, 0 if limit is None else limit - self.size + 1)
        if limit is not None:
            self._count(len(body), limit)
        if self.streaming:
            if body:
                assert self.sink is not None
                self.sink(body)
        else:
            self.chunks.append(body)

    def on_message_complete(self) -> None:
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (103 Early Hints): the real one follows
            self._reset()
            self.received = True
            return
        tail = b""
        if self.decoder is not None:
            tail = self.decoder.flush()
            if not self.decoder.eof:
                self._fail(TransportError("truncated gzip body"))
                return
            if self.limit is not None and self.size + len(tail) > self.limit:
                self._fail(BodyTooLarge(f"the body is over {self.limit} bytes"))
                return
        if self.streaming:
            if tail:
                assert self.sink is not None
                self.sink(tail)
            body = b""
        else:
            if tail:
                self.chunks.append(tail)
            body = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
        keep = self.parser.should_keep_alive()
        answer = Answer(status, self.reason.decode("latin-1").strip(), body)
        self._reset()
        self.waiter = None
        self.sink = None
        self.limit = None
        if not keep:
            self.close()
        waiter.set_result(answer)

    # -- helpers ------------------------------------------------------------------------------

    def _count(self, size: int, limit: int) -> None:
        self.size += size
        if self.size > limit:
            raise BodyTooLarge(f"the body is over {limit} bytes")

    def _ended(self, exc: Exception | None = None) -> None:
        """The server closed its side: completes an answer framed by the connection's end."""
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        if (
            self.headers_done
            and self.content_length is None
            and not self.chunked
            and self.parser.get_status_code() not in _NO_BODY_STATUS
        ):
            self.on_message_complete()
            return
        if not self.received and self.uses > 1:
            self._fail(Stale("the server closed the kept-alive connection"))
        elif not self.received:
            self._fail(TransportError(f"server disconnected without answering: {exc or 'EOF'}"))
        else:
            self._fail(TransportError(f"server closed the connection mid-answer: {exc or 'EOF'}"))

    def _fail(self, error: BaseException) -> None:
        waiter = self.waiter
        self.waiter = None
        self.sink = None
        self.limit = None
        self.close()
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    def expire(self) -> None:
        """The call's timer: fail it if the server was silent for the whole timeout, else wait
        for the rest of it."""
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        timeout = self.pool.timeout
        silent = self.loop.time() - self.last_activity
        if silent < timeout:
            self.timer = self.loop.call_later(timeout - silent, self.expire)
            return
        self._fail(TransportTimeout(f"no answer within {timeout:g}s"))

    def close(self) -> None:
        """Close now (a connection out of step is never reused)."""
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.abort()
            self.pool.dropped(self)
