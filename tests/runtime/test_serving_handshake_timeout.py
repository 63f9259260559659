"""The TLS handshake timeout (`--tls-handshake-timeout`) over the real server: connections that
never finish the handshake (silent, or stopping half-way through the ClientHello) are closed
after the timeout, while TLS clients keep being served (security.md checklist item 37)."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator

import pytest

from custom_metrics_server import cli
from custom_metrics_server.testing.server_process import ServerProcess as RunningServer
from custom_metrics_server.testing.server_process import start_server, stop_server


@pytest.fixture(scope="module")
def handshake_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    server = start_server(
        tmp_path_factory.mktemp("handshake"),
        "--tls-handshake-timeout",
        "1s",
        "--header-read-timeout",
        "60s",  # so only the handshake timeout can close these connections
    )
    yield server
    stop_server(server)


def _address(server: RunningServer) -> tuple[str, int]:
    host, port = server.url.removeprefix("https://").rsplit(":", 1)
    return host.strip("[]"), int(port)


def _half_client_hello() -> bytes:
    """The first half of a real ClientHello (what a client sends first)."""
    context = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    assert hello[0] == 0x16  # a TLS handshake record
    return hello[: len(hello) // 2]


def _seconds_until_closed(raw: socket.socket, *, limit: float) -> float:
    """Wait for the server to close the connection; seconds it took (fails past `limit`)."""
    started = time.monotonic()
    raw.settimeout(limit)
    try:
        data = raw.recv(4096)
    except TimeoutError:
        raise AssertionError(f"the connection was still open after {limit}s") from None
    except ConnectionResetError:
        data = b""
    assert data == b"", data  # nothing was answered, the connection was just closed
    return time.monotonic() - started


@pytest.mark.parametrize("first_bytes", [b"", _half_client_hello()], ids=["silent", "half-hello"])
def test_an_unfinished_handshake_is_closed_after_the_timeout(
    handshake_server: RunningServer, first_bytes: bytes
) -> None:
    with socket.create_connection(_address(handshake_server), timeout=10) as raw:
        if first_bytes:
            raw.sendall(first_bytes)
        # Serving goes on meanwhile, over new connections.
        with handshake_server.client() as client:
            response = client.get("/apis/custom.metrics.k8s.io/v1beta2")
            assert response.status_code == 200
            assert response.json()["kind"] == "APIResourceList"
        closed_after = _seconds_until_closed(raw, limit=15)
    # 1 s timeout; asyncio's default would be 60 s. Generous bound for a loaded machine.
    assert closed_after < 8


def test_many_handshake_only_connections_do_not_block_tls_clients(
    handshake_server: RunningServer,
) -> None:
    held = [socket.create_connection(_address(handshake_server), timeout=10) for _ in range(1000)]
    try:
        with handshake_server.client() as client:
            for _ in range(5):
                assert client.get("/readyz").status_code == 200
        deadline = time.monotonic() + 20
        for raw in held:
            _seconds_until_closed(raw, limit=max(0.1, deadline - time.monotonic()))
    finally:
        for raw in held:
            raw.close()


def test_a_completed_handshake_is_not_cut_by_the_handshake_timeout(
    handshake_server: RunningServer,
) -> None:
    # The keep-alive connection lives past 1 s: the timer stops once the handshake is done.
    with handshake_server.client() as client:
        for _ in range(3):
            assert client.get("/livez").status_code == 200
            time.sleep(0.6)


def test_tls_handshake_timeout_flag_defaults_to_go_s_10s() -> None:
    parser = cli.build_parser()
    assert parser.parse_args(["serve", "--demo"]).tls_handshake_timeout == 10.0
    given = parser.parse_args(["serve", "--tls-handshake-timeout", "250ms"])
    assert given.tls_handshake_timeout == 0.25
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--tls-handshake-timeout", "0"])
