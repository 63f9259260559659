"""One connection of the lean HTTP/1.1 client (`http11.Http11Pool`): an `asyncio.Protocol`
whose responses `httptools` parses, one call at a time, with the errors and the answer type the
pool's callers see.

Owns the framing (Content-Length, chunked, end of connection; no body for 204, 304 and
answers to HEAD),
gzip decoding with the call's body `limit`, the limits on the answer's head (`MAX_HEAD_BYTES`
of status line and header fields, trailers included, and `MAX_HEADERS` fields, as h11 and Go's
`MaxResponseHeaderBytes` bound them: over either, :class:`HeadTooLarge`), the silence timer
and the stale keep-alive case (`Stale`: the server closed an idle connection before any byte
of the answer, safe to send again). It must not choose connections or know the pool's waiters
(`http11` does), nor any API above HTTP. Cost per call: O(answer bytes) in httptools' C
parser and zlib.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

import httptools

__all__ = [
    "MAX_HEADERS",
    "MAX_HEAD_BYTES",
    "Answer",
    "BodyTooLarge",
    "HeadTooLarge",
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


#: An answer's head (status line and header fields, trailers counted too) beyond this many bytes
#: is refused: h11's default is 16 KiB, Go's `MaxResponseHeaderBytes` 1 MiB; 64 KiB holds any
#: head a Prometheus, kubelet or API server sends (a few hundred bytes) many times over.
MAX_HEAD_BYTES: Final = 64 << 10
#: An answer with more header fields than this is refused (httptools' parser has no bound).
MAX_HEADERS: Final = 100

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


class _HeadAnswered(Exception):
    """Raised in `on_headers_complete` to stop the parser at the end of a HEAD call's answer."""


class HeadTooLarge(TransportError):
    """The answer's head is over `MAX_HEAD_BYTES` or has over `MAX_HEADERS` fields."""


class Stale(TransportError):
    """A reused connection closed before any byte of the answer: safe to send again."""


def _head_too_large() -> HeadTooLarge:
    return HeadTooLarge(f"the answer's head is over {MAX_HEAD_BYTES} bytes")


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
        #: The call is a HEAD request: its answer ends with its head, whatever the head says.
        self.bodiless = False
        self.last_bytes = b""  # a HEAD call's: the last 4 bytes received
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
        self.coded = False  # any byte of a gzip body received
        self.streaming = False
        self.header_error: str | None = None
        self.head_size = 0  # bytes of status line and fields parsed so far
        self.header_count = 0
        self.unparsed = 0  # bytes fed while the head was not complete

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.waiter is None or self.waiter.done():
            self.close()  # bytes nobody asked for: the connection is out of step
            return
        self.received = True
        self.last_activity = self.loop.time()
        if not self.headers_done:
            self.unparsed += len(data)
        if self.bodiless:
            self.last_bytes = (self.last_bytes + data[-4:])[-4:]
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as err:
            # One of the callbacks below raised: an unusable header, a corrupt gzip stream,
            # or the streaming sink's own error (passed on as it is).
            cause = err.__context__
            if isinstance(cause, _HeadAnswered):
                self._head_answered()
                return
            if isinstance(cause, zlib.error):
                cause = TransportError(f"corrupt gzip body: {cause}")
            self._fail(cause if isinstance(cause, Exception) else TransportError(str(err)))
        except httptools.HttpParserError as err:
            self._fail(TransportError(f"malformed HTTP answer: {err}"))
        else:
            if not self.headers_done and self.unparsed > MAX_HEAD_BYTES:
                # The parser buffers a field until it ends: bound it before it does.
                self._fail(_head_too_large())

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
        self.head_size += len(status)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._bound_head(name, value)
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
        if self.bodiless and status >= 200:
            raise _HeadAnswered  # stops the parser, which would wait for a body

    def on_body(self, body: bytes) -> None:
        limit = self.limit
        if self.decoder is not None:
            self.coded = True
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
        if self.decoder is not None and self.coded:  # an empty body (a 304's) is empty
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

    def _head_answered(self) -> None:
        """A HEAD call's answer is complete with its head: no body, and a fresh parser (the
        old one waits for the body the head describes). The connection is kept only when the
        head ended the bytes received; anything after it is out of step."""
        waiter = self.waiter
        status = self.parser.get_status_code()
        keep = self.parser.should_keep_alive() and self.last_bytes == b"\r\n\r\n"
        answer = Answer(status, self.reason.decode("latin-1").strip(), b"")
        self.parser = httptools.HttpResponseParser(self)
        self._reset()
        self.waiter = None
        self.sink = None
        self.limit = None
        self.bodiless = False
        self.last_bytes = b""
        if not keep:
            self.close()
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    def _bound_head(self, name: bytes, value: bytes) -> None:
        """Count a header field (or trailer) against the head's limits. O(1)."""
        self.header_count += 1
        self.head_size += len(name) + len(value) + 4
        if self.header_count > MAX_HEADERS:
            raise HeadTooLarge(f"the answer has over {MAX_HEADERS} header fields")
        if self.head_size > MAX_HEAD_BYTES:
            raise _head_too_large()

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
        self.bodiless = False
        self.last_bytes = b""
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
