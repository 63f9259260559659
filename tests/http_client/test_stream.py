"""Streamed answers of the lean pool (`http_client/stream.py`, `Http11Pool.stream`: kube's watch
streams) against scripted servers on real sockets: pieces handed on as they arrive, the
connection back to the pool at the body's end and closed when the reader leaves early or is
cancelled, a server that breaks off, the body cap, silence, a reader slower than the server,
and the whole body of a failed answer."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
from collections.abc import Awaitable, Callable

import pytest

from custom_metrics_server.http_client.http11 import (
    BodyTooLarge,
    Http11Pool,
    TransportError,
    TransportTimeout,
)
from custom_metrics_server.http_client.stream import HIGH_WATER
from tests.http_client.test_http11 import HEAD, pool_for
from tests.prometheus.scripted import Server

CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def counting_answers(
    first: Callable[[asyncio.StreamWriter], Awaitable[None]],
) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter, Server], Awaitable[None]]:
    """A handler whose first request (per server) gets `first`, every later one
    `answer <n>` with n counting requests."""
    calls = 0

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        nonlocal calls
        while True:
            await s.read_head(reader)
            calls += 1
            if calls == 1:
                await first(writer)
                continue
            body = f"answer {calls}".encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            await writer.drain()

    return handler


async def test_pieces_arrive_before_the_end_and_the_connection_is_reused_after_it(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    go_on = asyncio.Event()

    async def watch(writer: asyncio.StreamWriter) -> None:
        writer.write(CHUNKED + chunk(b'{"a":1}\n{"b'))
        await writer.drain()
        await go_on.wait()  # the second piece only once the reader has the first
        writer.write(chunk(b'":2}\n') + b"0\r\n\r\n")
        await writer.drain()

    server = await serve(counting_answers(watch))
    pool = pool_for(server)
    stream = await pool.stream(HEAD)
    assert (stream.status, stream.reason) == (200, "OK")
    pieces = [await anext(stream)]
    go_on.set()
    pieces += [piece async for piece in stream]
    assert pieces == [b'{"a":1}\n{"b', b'":2}\n']
    stream.close()
    assert (await pool.request(HEAD)).body == b"answer 2"
    assert server.connections == 1  # the stream's connection came back to the pool
    await pool.aclose()


async def closes_early(pool: Http11Pool, how: str) -> None:
    """Leave a stream whose server keeps sending: close it, or cancel its reader."""
    stream = await pool.stream(HEAD)
    assert await anext(stream) == b"first"
    if how == "closed":
        stream.close()
        return
    reader = asyncio.create_task(anext(stream))
    await asyncio.sleep(0.05)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader


@pytest.mark.parametrize("how", ["closed", "cancelled"])
async def test_a_stream_left_before_its_end_closes_its_connection(
    serve: Callable[..., Awaitable[Server]], how: str
) -> None:
    """The rest of the answer would be out of step with the next request: the next call gets
    its own answer on a new connection."""
    late = asyncio.Event()

    async def endless(writer: asyncio.StreamWriter) -> None:
        writer.write(CHUNKED + chunk(b"first"))
        await writer.drain()
        await late.wait()
        writer.write(chunk(b"late"))  # after the reader left: must reach no one
        await writer.drain()

    server = await serve(counting_answers(endless))
    pool = pool_for(server)
    await closes_early(pool, how)
    assert not pool._open  # closed, not kept by a stream no one reads
    late.set()
    await asyncio.sleep(0.05)
    assert (await pool.request(HEAD)).body == b"answer 2"
    assert server.connections == 2
    await pool.aclose()


async def test_a_server_that_breaks_off_fails_after_the_pieces_it_sent(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    async def broken(writer: asyncio.StreamWriter) -> None:
        writer.write(CHUNKED + chunk(b"whole line\n") + chunk(b"half a li"))
        await writer.drain()
        writer.close()

    server = await serve(counting_answers(broken))
    pool = pool_for(server)
    stream = await pool.stream(HEAD)
    assert await anext(stream) == b"whole line\n"
    assert await anext(stream) == b"half a li"
    with pytest.raises(TransportError, match="mid-answer"):
        await anext(stream)
    stream.close()
    assert (await pool.request(HEAD)).body == b"answer 2"
    await pool.aclose()


@pytest.mark.parametrize("coding", ["identity", "gzip"])
async def test_a_body_over_the_limit_fails_and_closes_the_connection(
    serve: Callable[..., Awaitable[Server]], coding: str
) -> None:
    """The cap counts decoded bytes, as `request`'s does."""
    body = b"x" * 5000
    sent = gzip.compress(body) if coding == "gzip" else body
    encoding = b"Content-Encoding: gzip\r\n" if coding == "gzip" else b""

    async def big(writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\n%sTransfer-Encoding: chunked\r\n\r\n" % encoding
            + chunk(sent)
            + b"0\r\n\r\n"
        )
        await writer.drain()

    server = await serve(counting_answers(big))
    pool = pool_for(server)
    stream = await pool.stream(HEAD, limit=4096)
    with pytest.raises(BodyTooLarge):
        await stream.read()
    stream.close()
    assert (await pool.request(HEAD)).body == b"answer 2"
    assert server.connections == 2
    await pool.aclose()


async def test_silence_while_the_reader_waits_times_out(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    """The call's own timeout (0.2 s), not the pool's (10 s) nor the silent server's."""

    async def quiet(writer: asyncio.StreamWriter) -> None:
        writer.write(CHUNKED + chunk(b"one"))
        await writer.drain()
        await asyncio.sleep(30)

    server = await serve(counting_answers(quiet))
    pool = pool_for(server, timeout=10.0)
    stream = await pool.stream(HEAD, silence=0.2)
    assert await anext(stream) == b"one"
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TransportTimeout):
        await anext(stream)
    assert loop.time() - started < 8.0  # well under the pool's 10 s, on a loaded machine too
    stream.close()
    await pool.aclose()


async def test_a_slow_reader_holds_a_bounded_backlog_and_misses_nothing(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    """8 MiB sent to a reader that waits: the socket is paused at about `HIGH_WATER` bytes
    held (not the whole body), resumed as the reader catches up, and every byte arrives. The
    wait (1 s) is longer than the pool's timeout (0.3 s): a paused socket's silence is the
    reader's, not the server's."""
    piece = bytes(range(256)) * 256  # 64 KiB
    count = 128

    async def flood(writer: asyncio.StreamWriter) -> None:
        writer.write(CHUNKED)
        for _ in range(count):
            writer.write(chunk(piece))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    server = await serve(counting_answers(flood))
    pool = pool_for(server, timeout=0.3)
    stream = await pool.stream(HEAD)
    await asyncio.sleep(1.0)
    held = sum(len(p) for p in stream._pieces)
    assert held < HIGH_WATER + (1 << 20)  # a socket read beyond the mark at most
    body = await stream.read()
    assert body == piece * count
    stream.close()
    assert (await pool.request(HEAD)).body == b"answer 2"
    assert server.connections == 1
    await pool.aclose()


async def test_a_failed_answer_is_one_piece(serve: Callable[..., Awaitable[Server]]) -> None:
    async def gone(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 410 Gone\r\nContent-Length: 7\r\n\r\nexpired")
        await writer.drain()

    server = await serve(counting_answers(gone))
    pool = pool_for(server)
    async with await pool.stream(HEAD) as stream:
        assert (stream.status, stream.reason) == (410, "Gone")
        assert await stream.read() == b"expired"
    assert (await pool.request(HEAD)).body == b"answer 2"
    assert server.connections == 1
    await pool.aclose()


async def test_a_stream_in_flight_fails_when_the_pool_closes(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    async def endless(writer: asyncio.StreamWriter) -> None:
        writer.write(CHUNKED + chunk(b"one"))
        await writer.drain()
        await asyncio.sleep(30)

    server = await serve(counting_answers(endless))
    pool = pool_for(server)
    stream = await pool.stream(HEAD)
    assert await anext(stream) == b"one"
    await pool.aclose()
    with pytest.raises(TransportError):
        async with asyncio.timeout(5):  # a failure bound for a hang, not a speed check
            await anext(stream)
    stream.close()
    with contextlib.suppress(TransportError):
        await pool.stream(HEAD)


async def test_held_streams_take_connections_outside_the_limit(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    """Watches are not calls in flight: with `max_connections=2`, five held streams open at
    once and calls still get their two connections; a held stream's connection comes back as
    an ordinary one only while the calls leave room for it."""
    release = asyncio.Event()

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        while True:
            head = await s.read_head(reader)
            if b"watch" in head:
                writer.write(CHUNKED + chunk(b"event\n"))
                await writer.drain()
                await release.wait()
                writer.write(b"0\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()

    server = await serve(handler)
    pool = pool_for(server, max_connections=2, max_idle=4)
    watch = b"GET /watch HTTP/1.1\r\nHost: x\r\n\r\n"
    streams = [await pool.stream(watch, held=True) for _ in range(5)]
    assert [await anext(stream) for stream in streams] == [b"event\n"] * 5
    answers = await asyncio.gather(*(pool.request(HEAD) for _ in range(4)))
    assert [answer.body for answer in answers] == [b"ok"] * 4
    assert server.connections == 7  # five watches, and two for the four calls
    release.set()
    for stream in streams:
        assert [piece async for piece in stream] == []
        stream.close()
    # The calls' two connections are still open: of the five that came back, none may be
    # kept beyond the limit.
    assert len(pool._open) == 2
    assert not pool._held
    await pool.aclose()


async def test_an_ordinary_stream_waits_for_a_connection_under_the_limit(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    """Without `held`, a stream is a call: at the limit it waits, and fails after the pool's
    timeout (what a watch past 100 did before watches were held)."""

    async def endless(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_head(reader)
        writer.write(CHUNKED + chunk(b"event\n"))
        await writer.drain()
        await asyncio.sleep(3600)

    server = await serve(endless)
    pool = pool_for(server, max_connections=1, timeout=0.2)
    first = await pool.stream(HEAD)
    with pytest.raises(TransportTimeout, match="no free connection"):
        await pool.stream(HEAD)
    first.close()
    await pool.aclose()
