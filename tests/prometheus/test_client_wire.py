"""What the Prometheus client puts on the wire through its lean pool (the request line and
headers httpx used to send: path prefix, Host, User-Agent, Accept, custom headers, bearer
token, Basic auth from the URL, gzip only when asked, POST forms), and through the
environment's proxy (a real one, `tests/http_client/connect_proxy.py`) unless `NO_PROXY` says
otherwise."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import parse_qs

import pytest

from custom_metrics_server.prometheus import client as client_module
from custom_metrics_server.prometheus.answers import PrometheusError
from custom_metrics_server.prometheus.client import (
    MAX_GET_QUERY,
    USER_AGENT,
    PrometheusClient,
)
from custom_metrics_server.prometheus.rules import ServerConfig
from tests.http_client.connect_proxy import ConnectProxy
from tests.prometheus.scripted import Handler, Server

VECTOR = json.dumps(
    {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "2"]}]},
    }
).encode()


def answering(body: bytes, *, gzipped: bool = False) -> Handler:
    """Answers every request with `body` (gzip-encoded when the client accepts it and
    `gzipped`), reading POST bodies into the recorded head."""

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        while True:
            head = await s.read_head(reader)
            lines = head.decode().split("\r\n")
            headers = {k.lower(): v for k, _, v in (line.partition(": ") for line in lines[1:])}
            if "content-length" in headers:
                s.heads[-1] += await reader.readexactly(int(headers["content-length"]))
            payload, extra = body, b""
            if gzipped and "gzip" in headers.get("accept-encoding", ""):
                payload, extra = gzip.compress(body), b"Content-Encoding: gzip\r\n"
            writer.write(
                b"HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n" % (extra, len(payload)) + payload
            )
            await writer.drain()

    return handler


def parse(raw: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    line, *rest = head.decode().split("\r\n")
    headers: dict[str, str] = {}
    for header in rest:
        name, _, value = header.partition(": ")
        assert name.lower() not in headers, f"{name} sent twice"
        headers[name.lower()] = value
    return line, headers, body


async def test_a_query_on_the_wire(serve: Callable[..., Awaitable[Server]]) -> None:
    server = await serve(answering(VECTOR))
    client = PrometheusClient(
        ServerConfig(
            name="default",
            url=f"http://127.0.0.1:{server.port}/prefix/",
            headers=(("X-Scope-OrgID", "tenant-1"), ("accept", "application/json; q=1")),
        )
    )
    data = await client.query('up{job="a b"}')
    assert data["result"][0]["value"] == [1, "2"]
    await client.query("up", at=1700000000.5, compress=False)
    await client.aclose()
    (line, headers, _), (line2, headers2, _) = map(parse, server.heads)
    method, target, version = line.split(" ")
    assert (method, version) == ("GET", "HTTP/1.1")
    path, _, query = target.partition("?")
    assert path == "/prefix/api/v1/query"
    assert parse_qs(query) == {"query": ['up{job="a b"}']}
    assert headers == {
        "host": f"127.0.0.1:{server.port}",
        "user-agent": USER_AGENT,
        "accept": "application/json; q=1",  # the configured header replaces ours
        "x-scope-orgid": "tenant-1",
        "accept-encoding": "gzip",
    }
    assert parse_qs(line2.split(" ")[1].partition("?")[2]) == {
        "query": ["up"],
        "time": ["1700000000.500"],
    }
    assert "accept-encoding" not in headers2  # one series: not worth compressing
    assert server.connections == 1


async def test_long_queries_and_the_post_verb_send_forms(
    serve: Callable[..., Awaitable[Server]],
) -> None:
    server = await serve(answering(VECTOR))
    client = PrometheusClient(ServerConfig(name="default", url=f"http://127.0.0.1:{server.port}"))
    long = "sum(up)" + " " * MAX_GET_QUERY
    await client.query(long)
    posting = PrometheusClient(
        ServerConfig(name="default", url=f"http://127.0.0.1:{server.port}"), verb="POST"
    )
    await posting.query("up")
    await client.aclose()
    await posting.aclose()
    for raw, expression in zip(server.heads, (long, "up"), strict=True):
        line, headers, body = parse(raw)
        assert line == "POST /api/v1/query HTTP/1.1"
        assert headers["content-type"] == "application/x-www-form-urlencoded"
        assert int(headers["content-length"]) == len(body)
        assert parse_qs(body.decode(), keep_blank_values=True) == {"query": [expression]}


async def test_credentials(serve: Callable[..., Awaitable[Server]], tmp_path: Path) -> None:
    """A bearer token re-read when its file changes; credentials in the URL are Basic auth."""
    server = await serve(answering(VECTOR))
    token = tmp_path / "token"
    token.write_text("first\n")
    client = PrometheusClient(
        ServerConfig(name="default", url=f"http://127.0.0.1:{server.port}", token_file=str(token))
    )
    await client.query("up")
    token.write_text("second-and-longer\n")
    await client.query("up")
    basic = PrometheusClient(
        ServerConfig(name="default", url=f"http://us%40er:p%3Ass@127.0.0.1:{server.port}")
    )
    await basic.query("up")
    token.write_text("bad\r\nX-Injected: 1")
    with pytest.raises(PrometheusError, match="line break") as caught:
        await client.query("up")
    assert caught.value.kind == "unavailable"
    await client.aclose()
    await basic.aclose()
    sent = [parse(raw)[1] for raw in server.heads]
    assert [headers.get("authorization") for headers in sent] == [
        "Bearer first",
        "Bearer second-and-longer",
        "Basic dXNAZXI6cDpzcw==",  # us@er:p:ss
    ]
    assert sent[2]["host"] == f"127.0.0.1:{server.port}"


async def test_one_authorization_header_whatever_is_configured(
    serve: Callable[..., Awaitable[Server]], tmp_path: Path
) -> None:
    """A configured Authorization header is sent only when no token (or URL credentials)
    gives one, and never twice."""
    server = await serve(answering(VECTOR))
    token = tmp_path / "token"
    token.write_text("from-file")
    configured = (("authorization", "Bearer configured"),)
    url = f"http://127.0.0.1:{server.port}"
    clients = [
        PrometheusClient(ServerConfig(name="a", url=url, headers=configured)),
        PrometheusClient(
            ServerConfig(name="b", url=url, headers=configured, token_file=str(token))
        ),
        PrometheusClient(
            ServerConfig(name="c", url=url, headers=configured, token_file=str(tmp_path / "no"))
        ),
    ]
    for client in clients:
        await client.query("up")
        await client.aclose()
    sent = [parse(raw)[1]["authorization"] for raw in server.heads]  # parse refuses twice
    assert sent == ["Bearer configured", "Bearer from-file", "Bearer configured"]


async def test_an_unusable_header_fails_each_call_not_the_configuration() -> None:
    client = PrometheusClient(
        ServerConfig(name="default", url="http://127.0.0.1:9", headers=(("X-A", "1\r\nX-B: 2"),))
    )
    with pytest.raises(PrometheusError, match="line break") as caught:
        await client.query("up")
    assert caught.value.kind == "unavailable"
    await client.aclose()


async def test_the_series_listing_streams_gzip(serve: Callable[..., Awaitable[Server]]) -> None:
    listing = {
        "status": "success",
        "data": [{"__name__": "up", "job": f"j{i}", "instance": f"i{i}"} for i in range(500)],
    }
    server = await serve(answering(json.dumps(listing).encode(), gzipped=True))
    client = PrometheusClient(ServerConfig(name="default", url=f"http://127.0.0.1:{server.port}"))
    shapes = await client.series_shapes("up", start=1.0, end=2.0)
    await client.aclose()
    assert shapes == {("up", frozenset({"job", "instance"}))}
    line, headers, _ = parse(server.heads[0])
    assert line.startswith("GET /api/v1/series?match%5B%5D=up&start=1.000&end=2.000 ")
    assert headers["accept-encoding"] == "gzip"


@pytest.mark.parametrize(
    ("environment", "through_proxy"),
    [
        ({}, False),
        ({"HTTP_PROXY": "http://127.0.0.1:{port}"}, True),
        ({"ALL_PROXY": "127.0.0.1:{port}"}, True),
        ({"HTTPS_PROXY": "http://127.0.0.1:{port}"}, False),  # another scheme's proxy
        ({"HTTP_PROXY": "http://127.0.0.1:{port}", "NO_PROXY": ".monitoring.test"}, False),
    ],
)
async def test_a_proxy_in_the_environment_is_used_by_the_pool(
    serve: Callable[..., Awaitable[Server]],
    proxy: ConnectProxy,
    monkeypatch: pytest.MonkeyPatch,
    environment: dict[str, str],
    through_proxy: bool,
) -> None:
    server = await serve(answering(VECTOR))
    proxy.origin_port = server.port
    for name, value in environment.items():
        monkeypatch.setenv(name, value.format(port=proxy.port))
    # Only the proxy knows where prometheus.monitoring.test is.
    client = PrometheusClient(
        ServerConfig(name="default", url="http://prometheus.monitoring.test:9090"), retries=0
    )
    try:
        if through_proxy:
            data = await client.query("up")
            assert data["result"][0]["value"] == [1, "2"]
            line = proxy.heads[0].split(b"\r\n")[0]
            assert (
                line == b"GET http://prometheus.monitoring.test:9090/api/v1/query?query=up HTTP/1.1"
            )
            assert server.heads == proxy.heads
        else:
            with pytest.raises(PrometheusError, match="is unreachable: cannot connect"):
                await client.query("up")
            assert proxy.heads == []
    finally:
        await client.aclose()


async def test_encoded_queries_are_kept_within_a_bound(
    serve: Callable[..., Awaitable[Server]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same PromQL is encoded once and sent alike; the memo of encodings stays bounded."""
    monkeypatch.setattr(client_module, "_ENCODED_CACHE", 2)
    server = await serve(answering(VECTOR))
    client = PrometheusClient(ServerConfig(name="default", url=f"http://127.0.0.1:{server.port}"))
    expressions = ['up{pod="a"}', 'up{pod="a"}', 'up{pod="b"}', 'up{pod="c"}', 'up{pod="a"}']
    for expression in expressions:
        await client.query(expression)
        assert len(client._encoded) <= 2
    await client.aclose()
    sent = [parse_qs(parse(raw)[0].split(" ")[1].partition("?")[2]) for raw in server.heads]
    assert sent == [{"query": [expression]} for expression in expressions]
