"""Shared fixtures: the contract fixture as an in-process app, and real server processes."""

from __future__ import annotations

import os
import queue
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from custom_metrics_server.backends.memory import load_fixture
from custom_metrics_server.security.gate import Gate
from custom_metrics_server.server.app import Server, create_app

FIXTURES = Path(__file__).parent / "fixtures"
CONTRACT_FIXTURE = FIXTURES / "contract.yaml"


def contract_app(gate: Gate | None = None) -> Server:
    """The app serving the contract's test-vector fixture, in process (with `gate`, if given)."""
    cluster, backend = load_fixture(yaml.safe_load(CONTRACT_FIXTURE.read_text()), now=time.time())
    return create_app(cluster=cluster, backends=[backend], gate=gate)


@pytest.fixture
async def asgi_client() -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client talking to the contract app through ASGI (no sockets)."""
    transport = httpx.ASGITransport(app=contract_app())
    async with httpx.AsyncClient(transport=transport, base_url="https://testserver") as client:
        yield client


@dataclass
class RunningServer:
    """A `custom-metrics-server serve` child process over real TLS."""

    url: str
    kubeconfig: Path
    cert_dir: Path
    process: subprocess.Popen[str]
    banner: str

    def ssl_context(self) -> ssl.SSLContext:
        """Trusts the server's generated CA, as the written kubeconfig does."""
        return ssl.create_default_context(cafile=str(self.cert_dir / "apiserver.crt"))

    def client(self, **kwargs: object) -> httpx.Client:
        """A keep-alive HTTPS client verifying the server certificate."""
        return httpx.Client(base_url=self.url, verify=self.ssl_context(), timeout=10, **kwargs)  # type: ignore[arg-type]


def server_command(workdir: Path, *args: str, demo: bool = True) -> list[str]:
    """`custom-metrics-server serve` (`--demo` unless told otherwise) on a free loopback port
    with its certificates in workdir."""
    return [
        sys.executable,
        "-m",
        "custom_metrics_server",
        "serve",
        *(["--demo"] if demo else ["--bind-address", "127.0.0.1"]),
        "--secure-port",
        "0",
        "--cert-dir",
        str(workdir / "certs"),
        *args,
    ]


def start_server(
    workdir: Path, *args: str, timeout: float = 30, demo: bool = True
) -> RunningServer:
    """Start the real server on a free port and wait until it is ready."""
    cert_dir = workdir / "certs"
    command = server_command(workdir, *args, demo=demo)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(workdir / "server.log", "w") as log:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=log, text=True, env=env, cwd=workdir
        )
    assert process.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    stdout = process.stdout
    threading.Thread(target=lambda: [lines.put(line) for line in stdout], daemon=True).start()
    deadline = time.monotonic() + timeout
    banner = ""
    while not banner.endswith("\n\n"):  # the banner ends with a blank line
        try:
            banner += lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            process.kill()
            log = (workdir / "server.log").read_text()
            raise RuntimeError(f"server did not start: {banner!r}\n{log}") from None
    url = banner.split(" on ", 1)[1].split()[0]
    server = RunningServer(url, cert_dir / "kubeconfig", cert_dir, process, banner)
    with server.client() as client:
        while client.get("/readyz").status_code != 200:
            if time.monotonic() > deadline:
                raise RuntimeError("server never became ready")
            time.sleep(0.05)
    return server


def stop_server(server: RunningServer) -> None:
    """SIGTERM, then wait; a server that does not exit fails the test run."""
    server.process.terminate()
    try:
        server.process.wait(timeout=15)
    finally:
        if server.process.poll() is None:
            server.process.kill()
        if server.process.stdout is not None:
            server.process.stdout.close()


@pytest.fixture(scope="session")
def contract_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """The real server process serving the contract fixture."""
    server = start_server(tmp_path_factory.mktemp("contract"), "--demo-file", str(CONTRACT_FIXTURE))
    yield server
    stop_server(server)


@pytest.fixture(scope="session")
def demo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """The real server process serving the simulated cluster."""
    server = start_server(tmp_path_factory.mktemp("demo"), "--demo-pods", "80")
    yield server
    stop_server(server)
