"""`kube.client.KubeClient`'s streamed calls against scripted servers on real sockets: watch
lines split anywhere across reads, a stream the server breaks off mid-line, a watch given up by
its reader (the connection is closed, the server sees it), the request on the wire, a failed
watch's `Status`, and `get_bytes`' body cap. The real kube-apiserver's watches are
tests/controlplane/test_watch.py's; the reviews' calls tests/kube/test_client_reviews.py's."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable

import pytest

from custom_metrics_server.kube.client import GoneError, KubeApiError, KubeClient
from custom_metrics_server.kube.config import Connection
from tests.prometheus.scripted import (  # noqa: F401 - serve: the scripted-server fixture
    Server,
    keep_alive,
    serve,
)

CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
PARAMS = {"watch": "true", "resourceVersion": "7", "labelSelector": "app=web"}


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def answering(
    *writes: bytes, close: bool = False, pause: float = 0.02
) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter, Server], Awaitable[None]]:
    """A handler writing `writes` one by one (each its own read at the client), then closing
    the connection, or else waiting for the client to close it."""

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_head(reader)
        for data in writes:
            writer.write(data)
            await writer.drain()
            await asyncio.sleep(pause)
        if close:
            writer.close()
            return
        await reader.read()  # until the client hangs up

    return handler


def client_for(server: Server, prefix: str = "") -> KubeClient:
    return KubeClient(Connection(host=f"http://127.0.0.1:{server.port}{prefix}", token="t0k"))


async def test_watch_lines_are_whole_wherever_the_reads_split_them(
    serve: Callable[..., Awaitable[Server]],  # noqa: F811
) -> None:
    events = [b'{"type":"ADDED","object":{"n":%d}}' % i for i in range(4)]
    stream = b"\n".join(events[:3]) + b"\n\n" + events[3]  # an empty line; no last newline
    cuts = [0, 5, 6, len(events[0]) + 1, 60, 61, len(stream)]
    pieces = [stream[a:b] for a, b in itertools.pairwise(cuts)]
    server = await serve(answering(CHUNKED, *(chunk(p) for p in pieces), b"0\r\n\r\n", close=True))
    client = client_for(server, "/under/")
    try:
        lines = [line async for line in client.watch_lines("/api/v1/pods", PARAMS, read_timeout=5)]
    finally:
        await client.aclose()
    assert lines == events
    head = server.heads[0].split(b"\r\n")
    assert head[0] == (
        b"GET /under/api/v1/pods?watch=true&resourceVersion=7&labelSelector=app%3Dweb HTTP/1.1"
    )
    assert b"Authorization: Bearer t0k" in head
    assert b"Accept: application/json" in head
    assert f"Host: 127.0.0.1:{server.port}".encode() in head


async def test_a_stream_broken_mid_line_yields_the_whole_lines_then_fails(
    serve: Callable[..., Awaitable[Server]],  # noqa: F811
) -> None:
    server = await serve(
        answering(CHUNKED, chunk(b'{"type":"ADDED","object":{}}\n{"type":"MOD'), close=True)
    )
    client = client_for(server)
    events: list[object] = []

    watch = client.watch("/api/v1/pods", PARAMS, read_timeout=5)
    try:
        events.append(await anext(watch))
        with pytest.raises(KubeApiError) as caught:
            await anext(watch)
    finally:
        await watch.aclose()
        await client.aclose()
    assert events == [{"type": "ADDED", "object": {}}]  # the cut line is not half-decoded
    assert caught.value.code == 0
    assert caught.value.message.startswith("watch /api/v1/pods broke: ")


async def test_a_watch_given_up_closes_its_connection(
    serve: Callable[..., Awaitable[Server]],  # noqa: F811
) -> None:
    """A reflector cancelled while its watch waits for the next event: the connection is
    closed at once (the server sees its end), not left open in the pool."""
    hung_up = asyncio.Event()

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_head(reader)
        writer.write(CHUNKED + chunk(b'{"type":"BOOKMARK"}\n'))
        await writer.drain()
        await reader.read()
        hung_up.set()

    server = await serve(handler)
    client = client_for(server)
    first = asyncio.Event()

    async def reflect() -> None:
        async for _ in client.watch("/api/v1/pods", PARAMS, read_timeout=30):
            first.set()

    task = asyncio.create_task(reflect())
    try:
        await first.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with asyncio.timeout(10):  # a failure bound for a leak, not a speed check
            await hung_up.wait()
    finally:
        await client.aclose()


async def test_a_failed_watch_is_its_status(
    serve: Callable[..., Awaitable[Server]],  # noqa: F811
) -> None:
    status = b'{"kind":"Status","reason":"Expired","message":"too old resource version: 7"}'
    server = await serve(
        answering(b"HTTP/1.1 410 Gone\r\nContent-Length: %d\r\n\r\n%s" % (len(status), status))
    )
    client = client_for(server)
    try:
        with pytest.raises(GoneError) as caught:
            async for _ in client.watch_lines("/api/v1/pods", PARAMS, read_timeout=5):
                pass
    finally:
        await client.aclose()
    error = caught.value
    assert (error.code, error.reason, error.message) == (
        410,
        "Expired",
        "too old resource version: 7",
    )
    assert error.call == f"GET http://127.0.0.1:{server.port}/api/v1/pods"


async def test_a_body_over_the_cap_is_refused_and_read_no_further(
    serve: Callable[..., Awaitable[Server]],  # noqa: F811
) -> None:
    body = b"kubelet_line 1\n" * 1000
    server = await serve(
        keep_alive(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    )
    client = client_for(server)
    path = "/api/v1/nodes/n1/proxy/metrics/resource"
    try:
        with pytest.raises(KubeApiError) as caught:
            await client.get_bytes(path, deadline=5, limit=4096)
        whole = await client.get_bytes(path, deadline=5, limit=len(body))
        again = await client.get_bytes(path, deadline=5, limit=len(body))
    finally:
        await client.aclose()
    assert (caught.value.code, caught.value.reason) == (0, "TooLarge")
    assert caught.value.message == f"GET {path}: the body is over 4096 bytes"
    assert whole == again == body
    assert server.connections == 2  # the refused answer's connection only was not reused


async def test_an_http_api_server_behind_an_environment_proxy_is_asked_through_it(
    serve: Callable[..., Awaitable[Server]],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plain HTTP proxy takes the request in absolute form (an `https://` API server would
    need CONNECT: not spoken yet, see `open_pool_for`)."""
    proxy = await serve(keep_alive(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    monkeypatch.setenv("NO_PROXY", "")
    client = KubeClient(Connection(host="http://api.invalid:6443/under", token="t0k"))
    try:
        assert await client.get_json("/api/v1/pods", {"limit": "1"}) == {}
    finally:
        await client.aclose()
    head = proxy.heads[0].split(b"\r\n")
    assert head[0] == b"GET http://api.invalid:6443/under/api/v1/pods?limit=1 HTTP/1.1"
    assert b"Host: api.invalid:6443" in head


async def test_a_path_that_cannot_go_on_the_request_line_as_it_is_is_escaped(
    serve: Callable[..., Awaitable[Server]],  # noqa: F811
) -> None:
    server = await serve(keep_alive(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
    client = client_for(server)
    try:
        await client.get_json("/api/v1/namespaces/a b/pods/é\r\nX: 1")
    finally:
        await client.aclose()
    head = server.heads[0].split(b"\r\n")
    assert head[0] == b"GET /api/v1/namespaces/a%20b/pods/%C3%A9%0D%0AX:%201 HTTP/1.1"
    assert b"X: 1" not in head
