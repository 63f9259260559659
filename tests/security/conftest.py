"""Fixtures of the security tests: a test PKI, the fake kube-apiserver, and real servers.

`SecureServer` runs `tests.security.serve_secure` (the contract fixture behind
`build_security`) as a child process over real TLS; its clients verify the serving
certificate and may present a client certificate.
"""

from __future__ import annotations

import http.client
import os
import queue
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.fakes.auth_webhooks import FakeAuthApiServer
from tests.security.pki import CA, Issued

ROOT = Path(__file__).resolve().parent.parent.parent
FRONT_PROXY_CN = "front-proxy-client"


@dataclass
class Pki:
    """Every CA and certificate the tests use."""

    directory: Path
    serving_ca: CA
    serving: Issued
    client_ca: CA
    front_proxy_ca: CA
    rogue_ca: CA
    front_proxy: Issued  # CN front-proxy-client, from the front-proxy CA
    other_proxy: Issued  # CN not allowed, from the front-proxy CA
    alice: Issued  # CN alice, O dev + O system:viewers, from the client CA
    rogue: Issued  # CN front-proxy-client, from an unknown CA


def make_pki(directory: Path) -> Pki:
    serving_ca = CA("serving-ca", directory)
    client_ca = CA("client-ca", directory)
    front_proxy_ca = CA("front-proxy-ca", directory)
    rogue_ca = CA("rogue-ca", directory)
    return Pki(
        directory=directory,
        serving_ca=serving_ca,
        serving=serving_ca.serving(("127.0.0.1", "localhost")),
        client_ca=client_ca,
        front_proxy_ca=front_proxy_ca,
        rogue_ca=rogue_ca,
        front_proxy=front_proxy_ca.issue(FRONT_PROXY_CN, file_name="front-proxy"),
        other_proxy=front_proxy_ca.issue("kubelet-front-proxy", file_name="other-proxy"),
        alice=client_ca.issue("alice", ("dev", "viewers"), file_name="alice"),
        rogue=rogue_ca.issue(FRONT_PROXY_CN, file_name="rogue"),
    )


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def fake() -> Iterator[FakeAuthApiServer]:
    with FakeAuthApiServer() as server:
        yield server


@dataclass
class SecureServer:
    """A running `serve_secure` child process."""

    url: str
    process: subprocess.Popen[str]
    log: Path
    ca_file: Path

    def context(self, cert: Issued | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if cert is not None:
            context.load_cert_chain(cert.cert_file, cert.key_file)
        return context

    def client(self, cert: Issued | None = None, **kwargs: object) -> httpx.Client:
        """A keep-alive HTTPS client, presenting `cert` if given."""
        return httpx.Client(base_url=self.url, verify=self.context(cert), timeout=20, **kwargs)  # type: ignore[arg-type]

    def get(self, path: str, cert: Issued | None = None, **kwargs: object) -> httpx.Response:
        with self.client(cert) as client:
            return client.get(path, **kwargs)  # type: ignore[arg-type]

    def logs(self) -> str:
        return self.log.read_text()

    def raw_get(
        self, target: str, cert: Issued | None = None, headers: list[tuple[str, str]] | None = None
    ) -> tuple[int, bytes]:
        """GET with the request target sent byte for byte (no client-side normalisation)."""
        host, port = self.url.removeprefix("https://").rsplit(":", 1)
        connection = http.client.HTTPSConnection(
            host, int(port), context=self.context(cert), timeout=20
        )
        try:
            connection.putrequest("GET", target, skip_accept_encoding=True)
            for name, value in headers or []:
                connection.putheader(name, value)
            connection.endheaders()
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()


def start_secure(workdir: Path, *flags: str, ca_file: Path, timeout: float = 30) -> SecureServer:
    """Start `serve_secure` with `flags`; wait for the banner."""
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "server.log"
    command = [
        sys.executable,
        "-m",
        "tests.security.serve_secure",
        "--cert-dir",
        str(workdir / "certs"),
        *flags,
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    with open(log, "w") as sink:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=sink, text=True, env=env, cwd=ROOT
        )
    assert process.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    stdout = process.stdout
    threading.Thread(target=lambda: [lines.put(line) for line in stdout], daemon=True).start()
    deadline = time.monotonic() + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            process.kill()
            raise RuntimeError(f"server did not start:\n{log.read_text()}") from None
        if line.startswith("serving on "):
            return SecureServer(line.split()[-1], process, log, ca_file)


def start_or_fail(workdir: Path, *flags: str, ca_file: Path) -> tuple[int, str]:
    """Run `serve_secure` expecting it to fail start-up: (exit code, log)."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.security.serve_secure",
            "--cert-dir",
            str(workdir / "certs"),
            *flags,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    return result.returncode, result.stdout + result.stderr


def stop(server: SecureServer) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=15)
    finally:
        if server.process.poll() is None:
            server.process.kill()
        if server.process.stdout is not None:
            server.process.stdout.close()


def full_flags(pki: Pki, kubeconfig: Path, *extra: str) -> list[str]:
    """Delegated auth with both CA files, one allowed front-proxy name, and the fake."""
    return [
        "--tls-cert-file",
        str(pki.serving.cert_file),
        "--tls-private-key-file",
        str(pki.serving.key_file),
        "--client-ca-file",
        str(pki.client_ca.cert_file),
        "--requestheader-client-ca-file",
        str(pki.front_proxy_ca.cert_file),
        f"--requestheader-allowed-names={FRONT_PROXY_CN}",
        "--authentication-kubeconfig",
        str(kubeconfig),
        "--authorization-kubeconfig",
        str(kubeconfig),
        "--fast-retries",
        *extra,
    ]


@pytest.fixture(scope="session")
def secure(
    pki: Pki, fake: FakeAuthApiServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecureServer]:
    """The main delegated-auth server (both CA files, allowed names = front-proxy-client)."""
    workdir = tmp_path_factory.mktemp("secure")
    kubeconfig = fake.write_kubeconfig(workdir / "kubeconfig")
    server = start_secure(workdir, *full_flags(pki, kubeconfig), ca_file=pki.serving_ca.cert_file)
    yield server
    stop(server)


def front_proxy_headers(user: str, *groups: str, **extra: str) -> list[tuple[str, str]]:
    """X-Remote-* headers as kube-aggregator sets them (one line per group)."""
    headers = [("X-Remote-User", user)]
    headers += [("X-Remote-Group", group) for group in groups]
    headers += [(f"X-Remote-Extra-{key}", value) for key, value in extra.items()]
    return headers
