"""The lean HTTP/1.1 pool (`http_client/http11.py`: the Prometheus client's, the pass-through's,
the kubelet scraper's and the pod scraper's) against scripted servers on real sockets: framing
(Content-Length, chunked, end of connection), gzip, keep-alive reuse and its stale-connection
race, timeouts, cancellation, a body over the call's limit, the connection limit and TLS."""

from __future__ import annotations

import asyncio
import gzip
import os
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trustme

from custom_metrics_server.http_client.http11 import (
    BodyTooLarge,
    Http11Pool,
    TransportError,
    TransportTimeout,
)
from tests.prometheus.scripted import OK, Server, keep_alive


def pool_for(server: Server, **options: object) -> Http11Pool:
    settings: dict[str, object] = {"timeout": 2.0, **options}
    return Http11Pool(host="127.0.0.1", port=server.port, ssl_context=None, **settings)  # type: ignore[arg-type]


HEAD = b"GET /api/v1/query?query=up HTTP/1.1\r\nHost: x\r\n\r\n"


async def test_keep_alive_reuses_one_connection(serve: Callable[..., Awaitable[Server]]) -> None:
    server = await serve(keep_alive(OK))
    pool = pool_for(server)
    for _ in range(5):
        answer = await pool.request(HEAD)
        assert (answer.status, answer.reason, answer.body) == (200, "OK", b"{}")
    assert server.connections == 1
    await pool.aclose()


@pytest.mark.parametrize(
    ("answer", "body"),
    [
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
            b"abcde",
        ),
        (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\ndown", b"down"),
        (b"HTTP/1.1 204 No Content\r\n\r\n", b""),
    ],
)
async def test_framing(serve: Callable[..., Awaitable[Server]], answer: bytes, body: bytes) -> None:
    server = await serve(keep_alive(answer))
    pool = pool_for(server)
    for _ in range(2):
        assert (await pool.request(HEAD)).body == body
    assert server.connections == 1
    await pool.aclose()


async def test_an_answer_framed_by_the_end_of_the_connection(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    """HTTP/1.0 without a length (Python's http.server): the body ends with the connection,
    which is then not reused."""

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_head(reader)
        writer.write(b"HTTP/1.0 200 OK\r\n\r\nuntil the end")
        await writer.drain()

    server = await serve(handler)
    pool = pool_for(server)
    assert (await pool.request(HEAD)).body == b"until the end"
    assert (await pool.request(HEAD)).body == b"until the end"
    assert server.connections == 2
    await pool.aclose()


async def test_gzip_is_decoded_and_can_stream(serve: Callable[..., Awaitable[Server]]) -> None:
    # Incompressible enough to need several pieces of output.
    payload = b'{"status":"success","data":"' + os.urandom(20000).hex().encode() + b'"}'
    packed = gzip.compress(payload)
    chunks = b"".join(
        f"{len(packed[i : i + 999]):x}\r\n".encode() + packed[i : i + 999] + b"\r\n"
        for i in range(0, len(packed), 999)
    )
    answer = (
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunks
        + b"0\r\n\r\n"
    )
    server = await serve(keep_alive(answer))
    pool = pool_for(server)
    assert (await pool.request(HEAD)).body == payload
    pieces: list[bytes] = []
    streamed = await pool.request(HEAD, sink=pieces.append)
    assert streamed.body == b""
    assert b"".join(pieces) == payload
    assert len(pieces) > 1
    await pool.aclose()


async def test_a_failed_answer_is_not_streamed(serve: Callable[..., Awaitable[Server]]) -> None:
    server = await serve(
        keep_alive(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found")
    )
    pool = pool_for(server)
    pieces: list[bytes] = []
    answer = await pool.request(HEAD, sink=pieces.append)
    assert (answer.status, answer.reason, answer.body, pieces) == (
        404,
        "Not Found",
        b"not found",
        [],
    )
    await pool.aclose()


@pytest.mark.parametrize("coding", ["identity", "gzip", "gzip-chunked"])
async def test_a_body_over_the_limit_fails_and_is_read_no_further(
    serve: Callable[..., Awaitable[Server]], coding: str
) -> None:
    """The cap counts decoded bytes (a small gzip body may inflate past it) and closes the
    connection; a body at the limit is fine."""
    payload = b"x" * 5000
    if coding == "identity":
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + payload
    else:
        packed = gzip.compress(payload)
        if coding == "gzip":
            framing = f"Content-Length: {len(packed)}\r\n\r\n".encode() + packed
        else:
            framing = (
                b"Transfer-Encoding: chunked\r\n\r\n"
                + f"{len(packed):x}\r\n".encode()
                + packed
                + b"\r\n0\r\n\r\n"
            )
        answer = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n" + framing
    server = await serve(keep_alive(answer))
    pool = pool_for(server)
    assert (await pool.request(HEAD, limit=5000)).body == payload
    with pytest.raises(BodyTooLarge, match="over 4999 bytes"):
        await pool.request(HEAD, limit=4999)
    assert (await pool.request(HEAD, limit=5000)).body == payload
    assert server.connections == 2  # the refused answer's connection was closed
    await pool.aclose()


async def test_an_interim_answer_is_skipped(serve: Callable[..., Awaitable[Server]]) -> None:
    server = await serve(keep_alive(b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + OK))
    pool = pool_for(server)
    assert (await pool.request(HEAD)).status == 200
    assert (await pool.request(HEAD)).status == 200
    await pool.aclose()


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf", "mid-answer"),
        (b"NOT HTTP AT ALL\r\n\r\n", "malformed HTTP answer"),
        (b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 2\r\n\r\n{}", "br"),
        (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\njunk", "gzip"),
        (b"", "without answering"),
    ],
)
async def test_broken_answers_are_transport_errors(
    serve: Callable[..., Awaitable[Server]], answer: bytes, message: str
) -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_head(reader)
        writer.write(answer)
        await writer.drain()

    server = await serve(handler)
    pool = pool_for(server)
    with pytest.raises(TransportError, match=message):
        await pool.request(HEAD)
    await pool.aclose()


async def test_a_connection_closed_while_idle_is_replaced_at_once(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    """The server answers once per connection with keep-alive, then closes it while the pool
    holds it idle: the next call goes out again on a new connection, not as a failure."""
    answered = asyncio.Event()

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_head(reader)
        writer.write(OK)
        await writer.drain()
        answered.set()
        # Read the next request, then hang up without answering (the idle-close race).
        await s.read_head(reader)

    server = await serve(handler)
    pool = pool_for(server)
    assert (await pool.request(HEAD)).status == 200
    await answered.wait()
    assert (await pool.request(HEAD)).status == 200
    assert server.connections == 2
    await pool.aclose()


async def test_silence_times_out_but_a_slow_steady_answer_does_not(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    async def trickle(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n")
        for byte in b"steady":
            await asyncio.sleep(0.1)
            writer.write(bytes([byte]))
            await writer.drain()
        await asyncio.sleep(10)

    server = await serve(trickle)
    pool = pool_for(server, timeout=0.25)
    assert (await pool.request(HEAD)).body == b"steady"  # 0.6 s in all, never 0.25 s silent

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server) -> None:
        await s.read_head(reader)
        await asyncio.sleep(10)

    quiet = await serve(silent)
    pool2 = pool_for(quiet, timeout=0.2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TransportTimeout):
        await pool2.request(HEAD)
    # The 0.2 s read timeout, not the silent server's 10 s.
    assert 0.15 < loop.time() - started < 5.0
    await pool.aclose()
    await pool2.aclose()


async def test_a_cancelled_call_does_not_leave_its_answer_to_the_next(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    """The first call is cancelled before its (late) answer: that connection is closed, so the
    next call gets its own answer on a new one."""
    calls = 0

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        nonlocal calls
        while True:
            await s.read_head(reader)
            calls += 1
            body = f"answer {calls}".encode()
            if calls == 1:
                await asyncio.sleep(0.3)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            await writer.drain()

    server = await serve(handler)
    pool = pool_for(server)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.1):
            await pool.request(HEAD)
    assert (await pool.request(HEAD)).body == b"answer 2"
    await asyncio.sleep(0.35)
    assert (await pool.request(HEAD)).body == b"answer 3"
    assert server.connections == 2
    await pool.aclose()


async def test_connections_are_bounded_and_idle_ones_capped(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        while True:
            await s.read_head(reader)
            await asyncio.sleep(0.02)
            writer.write(OK)
            await writer.drain()

    server = await serve(handler)
    pool = pool_for(server, max_connections=3, max_idle=2)
    answers = await asyncio.gather(*(pool.request(HEAD) for _ in range(12)))
    assert all(answer.status == 200 for answer in answers)
    assert server.most_open <= 3
    assert len(pool._idle) == 2
    await pool.aclose()


async def test_waiting_for_a_free_connection_times_out(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    """The one connection is busy with an answer that keeps coming (so its own call does not
    time out): a second caller gives up after the timeout."""

    async def trickle(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        for _ in range(1000):
            writer.write(b"x")
            await writer.drain()
            await asyncio.sleep(0.03)

    server = await serve(trickle)
    pool = pool_for(server, max_connections=1, timeout=0.2)
    first = asyncio.ensure_future(pool.request(HEAD))
    await asyncio.sleep(0.05)
    with pytest.raises(TransportTimeout, match="no free connection"):
        await pool.request(HEAD)
    assert not first.done()
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await pool.aclose()


async def test_a_connection_handed_to_a_caller_that_gave_up_is_not_lost(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    """The waiting caller is cancelled in the very iteration the connection is handed to it:
    the connection goes back to the pool instead of leaking out of the limit."""

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        while True:
            await s.read_head(reader)
            await asyncio.sleep(0.05)
            writer.write(OK)
            await writer.drain()

    server = await serve(handler)
    pool = pool_for(server, max_connections=1)
    first = asyncio.ensure_future(pool.request(HEAD))
    await asyncio.sleep(0.01)
    second = asyncio.ensure_future(pool.request(HEAD))
    await asyncio.sleep(0.01)
    assert len(pool._waiters) == 1
    release = pool._release

    def release_then_cancel(connection: Any) -> None:
        release(connection)
        second.cancel()

    pool._release = release_then_cancel  # type: ignore[method-assign]
    assert (await first).status == 200
    with pytest.raises(asyncio.CancelledError):
        await second
    pool._release = release  # type: ignore[method-assign]
    assert len(pool._idle) == 1
    assert (await pool.request(HEAD)).status == 200
    assert server.connections == 1
    await pool.aclose()


async def test_refused_connections_are_transport_errors(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    server = await serve(keep_alive(OK))
    port = server.port
    assert server.server is not None
    server.server.close()
    await server.server.wait_closed()
    pool = Http11Pool(host="127.0.0.1", port=port, ssl_context=None, timeout=1.0)
    with pytest.raises(TransportError, match="cannot connect"):
        await pool.request(HEAD)
    await pool.aclose()
    with pytest.raises(TransportError, match="closed"):
        await pool.request(HEAD)


async def test_tls(serve: Callable[..., Awaitable[Server]]) -> None:
    authority = trustme.CA()
    certificate = authority.issue_cert("prometheus.example")
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    certificate.configure_cert(server_context)
    server = await serve(keep_alive(OK), ssl_context=server_context)
    client_context = ssl.create_default_context()
    authority.configure_trust(client_context)
    pool = Http11Pool(
        host="127.0.0.1",
        port=server.port,
        ssl_context=client_context,
        server_hostname="prometheus.example",
        timeout=2.0,
    )
    assert (await pool.request(HEAD)).body == b"{}"
    assert (await pool.request(HEAD)).body == b"{}"
    assert server.connections == 1
    await pool.aclose()
    wrong = Http11Pool(
        host="127.0.0.1",
        port=server.port,
        ssl_context=client_context,
        server_hostname="elsewhere.example",
        timeout=2.0,
    )
    with pytest.raises(TransportError, match="cannot connect"):
        await wrong.request(HEAD)
    await wrong.aclose()
