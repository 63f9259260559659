"""Tests for custom_metrics_server.scraping.kubelet_client: the lean keep-alive client of the
kubelet scrape (through the API server's node proxy and direct to kubelets) against scripted
servers on real sockets: the request it sends (path, token, gzip), TLS with the cluster CA and
a client certificate, keep-alive reuse, the failure reasons, the kubelet pools it keeps, node
agents (their CA, no credentials), and an environment proxy that names the target (a real
one, `tests/http_client/connect_proxy.py`)."""

from __future__ import annotations

import asyncio
import gzip
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import trustme

from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kube.config import Connection
from custom_metrics_server.scraping.failure import ScrapeFailure
from custom_metrics_server.scraping.kubelet_client import KubeletFetcher
from custom_metrics_server.scraping.node_agents import agent_tls
from tests.http_client.connect_proxy import ConnectProxy
from tests.prometheus.scripted import Handler, Server, keep_alive

Serve = Callable[..., Awaitable[Server]]
TEXT = b"container_cpu_usage_seconds_total 1\n"


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Start scripted servers (`tests/prometheus/scripted.py`), closed at the end."""
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


def answer(status: int, body: bytes, *headers: str) -> bytes:
    head = "".join(f"{header}\r\n" for header in headers)
    return f"HTTP/1.1 {status} X\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


def fetcher_for(connection: Connection, **options: object) -> KubeletFetcher:
    settings: dict[str, object] = {"timeout": 2.0, "concurrency": 4} | options
    return KubeletFetcher(KubeClient(connection), **settings)  # type: ignore[arg-type]


async def test_the_node_proxy_request_is_one_keep_alive_get_with_the_token(serve: Serve) -> None:
    server = await serve(keep_alive(answer(200, TEXT)))
    fetcher = fetcher_for(Connection(host=f"http://127.0.0.1:{server.port}", token="sa-token"))
    for _ in range(3):
        assert await fetcher.fetch("node/1", 2.0) == TEXT
    await fetcher.aclose()
    assert server.connections == 1
    request = server.heads[0].decode()
    assert request.startswith("GET /api/v1/nodes/node%2F1/proxy/metrics/resource HTTP/1.1\r\n")
    lines = set(request.split("\r\n"))
    assert {
        f"Host: 127.0.0.1:{server.port}",
        "Authorization: Bearer sa-token",
        "Accept: text/plain",
        "Accept-Encoding: gzip",
    } <= lines


async def test_a_gzipped_answer_is_decoded(serve: Serve) -> None:
    packed = gzip.compress(TEXT * 100)
    server = await serve(keep_alive(answer(200, packed, "Content-Encoding: gzip")))
    fetcher = fetcher_for(Connection(host=f"http://127.0.0.1:{server.port}"))
    assert await fetcher.fetch("n1", 2.0) == TEXT * 100
    await fetcher.aclose()
    assert b"Authorization" not in server.heads[0]  # no token, no header


async def test_a_rotated_token_file_is_sent_once_reread(
    serve: Serve, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    server = await serve(keep_alive(answer(200, TEXT)))
    connection = Connection(host=f"http://127.0.0.1:{server.port}", token_file=str(token))
    fetcher = fetcher_for(connection)
    await fetcher.fetch("n1", 2.0)
    token.write_text("second\n")
    await fetcher.fetch("n1", 2.0)  # within the minute Connection keeps a token
    clock = [1e9]
    monkeypatch.setattr("custom_metrics_server.kube.config.time.monotonic", lambda: clock[0])
    await fetcher.fetch("n1", 2.0)
    await fetcher.aclose()
    tokens = [head.split(b"Authorization: Bearer ")[1].split(b"\r\n")[0] for head in server.heads]
    assert tokens == [b"first", b"first", b"second"]


async def test_tls_with_the_cluster_ca_and_a_client_certificate(
    serve: Serve, tmp_path: Path
) -> None:
    authority = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(server_context)
    server_context.verify_mode = ssl.CERT_REQUIRED  # the API server wants our certificate
    authority.configure_trust(server_context)
    client = authority.issue_cert("custom-metrics-server")
    ca_file, cert_file, key_file = (tmp_path / name for name in ("ca", "cert", "key"))
    authority.cert_pem.write_to_path(str(ca_file))
    client.cert_chain_pems[0].write_to_path(str(cert_file))
    client.private_key_pem.write_to_path(str(key_file))
    server = await serve(keep_alive(answer(200, TEXT)), ssl_context=server_context)
    connection = Connection(
        host=f"https://127.0.0.1:{server.port}",
        ca_file=str(ca_file),
        cert_file=str(cert_file),
        key_file=str(key_file),
    )
    fetcher = fetcher_for(connection)
    assert await fetcher.fetch("n1", 2.0) == TEXT
    await fetcher.aclose()
    untrusted = fetcher_for(Connection(host=f"https://127.0.0.1:{server.port}"))
    with pytest.raises(ScrapeFailure) as failure:
        await untrusted.fetch("n1", 2.0)
    assert failure.value.reason == "unreachable"
    await untrusted.aclose()


@pytest.mark.parametrize(
    ("reply", "reason", "message"),
    [
        pytest.param(
            answer(503, b'{"kind":"Status","reason":"ServiceUnavailable","message":"no kubelet"}'),
            "http_503",
            "no kubelet",
            id="status-body",
        ),
        pytest.param(
            answer(404, b"404 page not found"), "http_404", "404 page not found", id="text"
        ),
        pytest.param(answer(302, b""), "http_302", "", id="redirect-not-followed"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\nhalf", "unreachable", "", id="cut"
        ),
    ],
)
async def test_failures_have_their_reasons(
    serve: Serve, reply: bytes, reason: str, message: str
) -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await s.read_head(reader)
        writer.write(reply)
        await writer.drain()

    server = await serve(handler)
    fetcher = fetcher_for(Connection(host=f"http://127.0.0.1:{server.port}"))
    with pytest.raises(ScrapeFailure) as failure:
        await fetcher.fetch("n1", 2.0)
    await fetcher.aclose()
    assert failure.value.reason == reason
    assert message in failure.value.message


async def test_silence_is_a_timeout_and_a_refused_connection_unreachable(serve: Serve) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server) -> None:
        await s.read_head(reader)
        await asyncio.sleep(5)

    server = await serve(silent)
    fetcher = fetcher_for(Connection(host=f"http://127.0.0.1:{server.port}"), timeout=0.2)
    with pytest.raises(ScrapeFailure) as failure:
        await fetcher.fetch("n1", 0.2)
    assert failure.value.reason == "timeout"
    await fetcher.aclose()
    dead = fetcher_for(Connection(host="http://127.0.0.1:9"))
    with pytest.raises(ScrapeFailure) as failure:
        await dead.fetch("n1", 2.0)
    assert failure.value.reason == "unreachable"
    assert "/api/v1/nodes/n1/proxy/metrics/resource" in failure.value.message
    await dead.aclose()


async def test_an_environment_proxy_takes_the_node_proxy_scrape(
    serve: Serve, proxy: ConnectProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An http:// API server through HTTP_PROXY: the request in absolute form, the token with
    it (api.test is known to the proxy alone)."""
    server = await serve(keep_alive(answer(200, TEXT)))
    proxy.origin_port = server.port
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    fetcher = fetcher_for(Connection(host="http://api.test:6443", token="t"))
    assert await fetcher.fetch("n1", 2.0) == TEXT
    await fetcher.aclose()
    assert proxy.heads[0].startswith(
        b"GET http://api.test:6443/api/v1/nodes/n1/proxy/metrics/resource HTTP/1.1\r\n"
    )
    assert b"Authorization: Bearer t\r\n" in server.heads[0]


async def test_node_agents_get_no_credentials_even_through_a_tunnel(
    serve: Serve, proxy: ConnectProxy, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A direct https scrape of an agent at 10.0.0.7 through HTTPS_PROXY's CONNECT tunnel:
    TLS to the agent's address inside it, verified with the agents' CA, and no token sent
    (the cluster's token is for kubelets only); NO_PROXY sends 10.0.0.0/8 direct instead."""
    ca = trustme.CA()
    agent_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("10.0.0.7").configure_cert(agent_context)
    server = await serve(keep_alive(answer(200, TEXT)), ssl_context=agent_context)
    proxy.origin_port = server.port
    ca_file = tmp_path / "agents-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.port}")
    fetcher = fetcher_for(
        Connection(host="https://api.test:6443", token="sa-token"),
        source="direct",
        kubelet_port=server.port,
        node_address=lambda node: "10.0.0.7",
        agent_tls=agent_tls(ca_file=str(ca_file)),
        target="node agent",
    )
    for _ in range(2):
        assert await fetcher.fetch("n1", 2.0) == TEXT
    await fetcher.aclose()
    assert proxy.heads == [
        f"CONNECT 10.0.0.7:{server.port} HTTP/1.1\r\nHost: 10.0.0.7:{server.port}\r\n\r\n".encode()
    ]
    assert len(server.heads) == 2
    assert all(b"authorization" not in head.lower() for head in server.heads)
    monkeypatch.setenv("NO_PROXY", "10.0.0.0/8")
    direct = fetcher_for(
        Connection(host="https://api.test:6443"),
        source="direct",
        kubelet_port=server.port,
        node_address=lambda node: "10.0.0.7",
        agent_tls=agent_tls(ca_file=str(ca_file)),
        timeout=0.5,
    )
    # 10.0.0.7 is nowhere here: direct, it fails (refused, unroutable or silent).
    with pytest.raises(ScrapeFailure) as failure:
        await direct.fetch("n1", 0.5)
    await direct.aclose()
    assert failure.value.reason in ("unreachable", "timeout")
    assert len(proxy.heads) == 1


async def test_direct_scrapes_keep_a_pool_per_kubelet_and_at_most_concurrency_of_them(
    serve: Serve,
) -> None:
    """Kubelets at 127.0.0.2-4 on one port; with a concurrency of 2 the least recently used
    kubelet's connection is let go (httpx kept as many keep-alive connections)."""
    handler = keep_alive(answer(200, TEXT))
    first = Server(handler)
    first.server = await asyncio.start_server(first._serve, "127.0.0.2", 0)
    port = first.port
    servers = [first]
    for address in ("127.0.0.3", "127.0.0.4"):
        other = Server(handler)
        other.server = await asyncio.start_server(other._serve, address, port)
        servers.append(other)
    addresses = {"a": "127.0.0.2", "b": "127.0.0.3", "c": "127.0.0.4"}
    fetcher = fetcher_for(
        Connection(host="https://127.0.0.1:1", token="sa"),
        concurrency=2,
        source="direct",
        kubelet_scheme="http",
        kubelet_port=port,
        node_address=addresses.get,
    )
    try:
        for name in ("a", "b", "a", "b", "c", "a"):
            assert await fetcher.fetch(name, 2.0) == TEXT
        assert len(fetcher._kubelets) == 2
        await fetcher.aclose()
        # a and b were reused; c pushed out the least recently used (a), which reconnected.
        assert [s.connections for s in servers] == [2, 1, 1]
        assert all(head.startswith(b"GET /metrics/resource HTTP/1.1\r\n") for head in first.heads)
        assert b"Authorization: Bearer sa\r\n" in first.heads[0]
    finally:
        for server in servers:
            assert server.server is not None
            server.server.close()
