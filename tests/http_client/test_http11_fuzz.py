"""The lean pool (`http_client/http11.py`, `connection.py`) fed generated answers, cut at
generated points, by a real server on a socket: every valid answer (Content-Length, chunked
with extensions and trailers, framed by the connection's end, gzip, 204/304 and HEAD without a
body, `Connection: close`) gives its exact body and leaves its connection reused when HTTP
allows it; every malformed one (bad chunk sizes, truncated bodies, oversize heads, corrupt gzip,
garbage) is a `TransportError`, never a body, and the pool answers the next call right.

"Never a hang" is bounded by the pool's own silence timeout (`TIMEOUT`, set here); each call
is also given ten times that before the test calls it a hang (a failure limit, not a speed
check)."""

from __future__ import annotations

import asyncio
import gzip
import itertools
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from custom_metrics_server.http_client.connection import MAX_HEAD_BYTES, MAX_HEADERS
from custom_metrics_server.http_client.http11 import (
    HeadTooLarge,
    Http11Pool,
    TransportError,
    TransportTimeout,
)

TIMEOUT = 2.0
HANG = 10 * TIMEOUT
FOLLOW_UP = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nfollow-up"


@dataclass
class Script:
    """One answer: its bytes in pieces, written one by one, and whether the server then
    closes the connection."""

    pieces: list[bytes]
    close: bool


@dataclass
class Origin:
    """A server that answers each request with the next script."""

    scripts: deque[Script] = field(default_factory=deque)
    connections: int = 0
    server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                script = self.scripts.popleft()
                for piece in script.pieces:
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0)  # a read of its own, as often as the loop allows
                if script.close:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


@dataclass
class Rig:
    runner: asyncio.Runner
    origin: Origin
    pool: Http11Pool

    def call(self, script: Script, method: str = "GET") -> bytes:
        """Sends one request answered by `script`; the answer's (status, body) as bytes."""
        self.origin.scripts.append(script)
        head = f"{method} /x HTTP/1.1\r\nHost: origin\r\n\r\n".encode()
        answer = self.runner.run(asyncio.wait_for(self.pool.request(head), HANG))
        return b"%d " % answer.status + answer.body

    def follow_up(self) -> int:
        """A plain call after a case: right, and how many connections were opened for it."""
        before = self.origin.connections
        assert self.call(Script([FOLLOW_UP], close=False)) == b"200 follow-up"
        return self.origin.connections - before


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    runner = asyncio.Runner()
    origin = Origin()
    origin.server = runner.run(asyncio.start_server(origin.handle, "127.0.0.1", 0))
    port = int(origin.server.sockets[0].getsockname()[1])
    pool = Http11Pool(
        host="127.0.0.1", port=port, ssl_context=None, timeout=TIMEOUT, trust_env=False
    )
    yield Rig(runner, origin, pool)
    runner.run(pool.aclose())
    origin.server.close()
    runner.close()


def cut(raw: bytes, points: list[int]) -> list[bytes]:
    edges = sorted({0, len(raw), *(p % (len(raw) + 1) for p in points)})
    return [raw[a:b] for a, b in itertools.pairwise(edges)] or [raw]


EXTENSIONS = st.sampled_from(["", ";a=b", ';name="a quoted value"', ";x;y=1"])
FILLER = st.lists(
    st.tuples(
        st.from_regex(r"X-[A-Za-z0-9-]{1,20}", fullmatch=True),
        st.from_regex(r"[ -~]{0,60}", fullmatch=True).map(str.strip),
    ),
    max_size=6,
)


@dataclass
class Case:
    method: str
    script: Script
    status: int
    body: bytes
    reusable: bool


@st.composite
def valid_answers(draw: st.DrawFn) -> Case:
    body = draw(st.binary(max_size=3000))
    status = draw(st.sampled_from([200, 200, 200, 404, 503, 204, 304]))
    method = draw(st.sampled_from(["GET", "GET", "GET", "HEAD"]))
    bodiless = status in (204, 304) or method == "HEAD"
    framing = draw(st.sampled_from(["length", "chunked", "end"]))
    gzipped = draw(st.booleans())
    close = draw(st.booleans())
    if framing == "end" and bodiless:
        framing = "length"
    payload = gzip.compress(body) if gzipped else body
    headers = [f"{name}: {value}" for name, value in draw(FILLER)]
    if gzipped:
        headers.append("Content-Encoding: gzip")
    if close or framing == "end":
        headers.append("Connection: close")
    content = b""
    if framing == "length" and status not in (204, 304):
        headers.append(f"Content-Length: {len(payload)}")
        content = payload
    elif framing == "chunked" and status not in (204, 304):
        headers.append("Transfer-Encoding: chunked")
        sizes = cut(payload, draw(st.lists(st.integers(0, 4000), max_size=6)))
        chunks = [
            b"%x%s\r\n%s\r\n" % (len(piece), draw(EXTENSIONS).encode(), piece)
            for piece in sizes
            if piece
        ]
        trailers = "".join(f"{name}: {value}\r\n" for name, value in draw(FILLER))
        content = b"".join(chunks) + b"0" + draw(EXTENSIONS).encode() + b"\r\n"
        content += trailers.encode() + b"\r\n"
    elif framing == "end":
        content = payload
    if method == "HEAD" or status in (204, 304):
        content = b""  # the head may describe a body; none follows
    raw = (f"HTTP/1.1 {status} Reason\r\n" + "".join(f"{h}\r\n" for h in headers) + "\r\n").encode()
    raw += content
    pieces = cut(raw, draw(st.lists(st.integers(0, len(raw)), max_size=8)))
    closing = close or framing == "end"
    return Case(
        method,
        Script(pieces, close=closing),
        status,
        b"" if bodiless else body,
        reusable=not closing,
    )


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=valid_answers())
def test_valid_answers_give_their_exact_body_and_reuse_the_connection(rig: Rig, case: Case) -> None:
    assert rig.call(case.script, case.method) == b"%d " % case.status + case.body
    assert rig.follow_up() == (0 if case.reusable else 1)


def _chunked(*chunks: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"".join(chunks)


@st.composite
def malformed_answers(draw: st.DrawFn) -> bytes:
    body = draw(st.binary(min_size=1, max_size=500))
    kind = draw(
        st.sampled_from(
            [
                "chunk-size",
                "chunk-crlf",
                "truncated-length",
                "truncated-chunked",
                "many-headers",
                "long-head",
                "long-field",
                "bad-length",
                "corrupt-gzip",
                "truncated-gzip",
                "coding",
                "garbage",
            ]
        )
    )
    if kind == "chunk-size":
        size = draw(st.sampled_from([b"zz", b"-1", b"1x", b"ffffffffffffffffffff", b" "]))
        return _chunked(size + b"\r\n" + body + b"\r\n0\r\n\r\n")
    if kind == "chunk-crlf":  # a chunk longer than its size says
        return _chunked(b"%x\r\n" % (len(body) - 1 if len(body) > 1 else 0) + body + b"X\r\n")
    if kind == "truncated-length":
        short = body[: draw(st.integers(0, len(body) - 1))]
        return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + short
    if kind == "truncated-chunked":
        return _chunked(b"%x\r\n" % (len(body) + 5) + body)
    if kind == "many-headers":
        count = draw(st.integers(MAX_HEADERS + 1, MAX_HEADERS + 50))
        fields = b"".join(b"X-%d: v\r\n" % i for i in range(count))
        return b"HTTP/1.1 200 OK\r\n" + fields + b"Content-Length: 0\r\n\r\n"
    if kind == "long-head":  # many fields, each short, over the bytes allowed in all
        value = b"v" * 1000
        fields = b"".join(b"X-%d: %s\r\n" % (i, value) for i in range(MAX_HEAD_BYTES // 1000 + 1))
        return b"HTTP/1.1 200 OK\r\n" + fields[: MAX_HEADERS * 2000] + b"\r\n"
    if kind == "long-field":  # one field longer than the whole head may be
        return b"HTTP/1.1 200 OK\r\nX-Big: " + b"v" * (MAX_HEAD_BYTES + 10) + b"\r\n\r\n"
    if kind == "bad-length":
        value = draw(st.sampled_from([b"abc", b"-5", b"1, 2", b"99999999999999999999999"]))
        return b"HTTP/1.1 200 OK\r\nContent-Length: " + value + b"\r\n\r\n" + body
    if kind == "corrupt-gzip":
        junk = b"\x1f\x8b\x08\x00" + body  # a gzip magic and nonsense
        return b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (
            len(junk),
            junk,
        )
    if kind == "truncated-gzip":
        packed = gzip.compress(body)[:-5]
        return b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (
            len(packed),
            packed,
        )
    if kind == "coding":
        return b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 1\r\n\r\nx"
    return b"\x00" + body  # garbage: never the start of an answer


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=malformed_answers(), points=st.lists(st.integers(0, 1 << 17), max_size=6))
def test_malformed_answers_are_transport_errors_and_the_pool_goes_on(
    rig: Rig, raw: bytes, points: list[int]
) -> None:
    # The server hangs up after each: what would otherwise wait for more bytes ends at once
    # (the silence timeout has its own test below).
    pieces = cut(raw, points)
    with pytest.raises(TransportError):
        rig.call(Script(pieces, close=True))
    assert rig.follow_up() == 1  # a connection that failed is never reused


def test_oversize_heads_name_the_limit(rig: Rig) -> None:
    fields = b"".join(b"X-%d: v\r\n" % i for i in range(MAX_HEADERS + 1))
    with pytest.raises(HeadTooLarge, match=f"over {MAX_HEADERS} header fields"):
        rig.call(Script([b"HTTP/1.1 200 OK\r\n" + fields + b"\r\n"], close=True))
    big = b"HTTP/1.1 200 OK\r\nX-Big: " + b"v" * (MAX_HEAD_BYTES + 1) + b"\r\n\r\n"
    with pytest.raises(HeadTooLarge, match=f"over {MAX_HEAD_BYTES} bytes"):
        rig.call(Script([big], close=False))
    assert rig.follow_up() == 1
    # At the limits, an answer is fine.
    fields = b"".join(b"X-%d: v\r\n" % i for i in range(MAX_HEADERS - 1))
    answer = b"HTTP/1.1 200 OK\r\n" + fields + b"Content-Length: 2\r\n\r\nok"
    assert rig.call(Script([answer], close=False)) == b"200 ok"


def test_a_truncated_answer_on_an_open_connection_times_out(rig: Rig) -> None:
    """The server sends half the body and says nothing more: the pool's silence timeout
    (TIMEOUT) ends the call, and the connection is not reused."""
    half = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf"
    with pytest.raises(TransportTimeout):
        rig.call(Script([half], close=False))
    assert rig.follow_up() == 1
