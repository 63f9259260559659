"""`custom-metrics-server serve` as a child process: started on a free loopback port with its
own self-signed certificate, waited for (banner, then `/readyz`), reached with a client that
verifies that certificate, and stopped with SIGTERM as a kubelet would.

    with start_server(tmp_path, "--demo-pods", "80") as server:
        with server.client() as client:
            client.get("/apis/custom.metrics.k8s.io/v1beta2")

Its log (stderr) goes to `<workdir>/server.log`; a server that does not start raises with
the log in the message. The client is httpx's, a test dependency (the `test` extra), not the
server's: the server itself talks HTTP through `http_client`.
"""

from __future__ import annotations

import os
import queue
import ssl
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx

__all__ = ["ServerProcess", "server_command", "start_server", "stop_server"]


@dataclass
class ServerProcess:
    """A running `serve` child process over real TLS."""

    url: str
    kubeconfig: Path
    cert_dir: Path
    process: subprocess.Popen[str]
    banner: str
    log: Path

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self.process.pid

    def ssl_context(self) -> ssl.SSLContext:
        """Trusts the server's generated CA, as the kubeconfig it writes (demo) does."""
        return ssl.create_default_context(cafile=str(self.cert_dir / "apiserver.crt"))

    def client(self, **kwargs: Any) -> httpx.Client:
        """A keep-alive HTTPS client verifying the server certificate."""
        options: dict[str, Any] = {"timeout": 10, **kwargs}
        return httpx.Client(base_url=self.url, verify=self.ssl_context(), **options)

    def logs(self) -> str:
        """What the server logged so far."""
        return self.log.read_text()

    def stop(self) -> None:
        """See `stop_server`."""
        stop_server(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def server_command(
    workdir: Path, *args: str, demo: bool = True, module: str = "custom_metrics_server"
) -> list[str]:
    """`custom-metrics-server serve` (`--demo` unless told otherwise) on a free loopback port
    with its certificates in `workdir/certs`; `module` is what `python -m` runs (a wrapper of
    the CLI, for tests that add a backend of their own)."""
    return [
        sys.executable,
        "-m",
        module,
        "serve",
        *(["--demo"] if demo else ["--bind-address", "127.0.0.1"]),
        "--secure-port",
        "0",
        "--cert-dir",
        str(workdir / "certs"),
        *args,
    ]


def start_server(
    workdir: Path,
    *args: str,
    demo: bool = True,
    timeout: float = 30,
    ready: bool = True,
    env: dict[str, str] | None = None,
    module: str = "custom_metrics_server",
) -> ServerProcess:
    """Start the real server and wait for its banner and, with `ready`, for `/readyz` 200.
    `env` is added to this process's environment; `module` see `server_command`."""
    workdir.mkdir(parents=True, exist_ok=True)
    cert_dir = workdir / "certs"
    command = server_command(workdir, *args, demo=demo, module=module)
    environment = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    log = workdir / "server.log"
    with open(log, "w") as sink:
        # The command is this interpreter running this package; `args` come from the caller.
        process = subprocess.Popen(  # noqa: S603
            command, stdout=subprocess.PIPE, stderr=sink, text=True, env=environment, cwd=workdir
        )
    assert process.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    stdout = process.stdout

    def pump() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout
    banner = ""
    while not banner.endswith("\n\n"):  # the banner ends with a blank line
        try:
            banner += lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            process.kill()
            process.wait()
            stdout.close()
            raise RuntimeError(f"server did not start: {banner!r}\n{log.read_text()}") from None
    url = banner.split(" on ", 1)[1].split()[0]
    server = ServerProcess(url, cert_dir / "kubeconfig", cert_dir, process, banner, log)
    if ready:
        with server.client() as client:
            while client.get("/readyz").status_code != 200:
                if time.monotonic() > deadline:
                    stop_server(server)
                    raise RuntimeError(f"server never became ready\n{log.read_text()}")
                time.sleep(0.05)
    return server


def stop_server(server: ServerProcess, *, timeout: float = 15) -> None:
    """SIGTERM, then wait; a server that does not exit in `timeout` s is killed and the
    failure raised (`subprocess.TimeoutExpired`)."""
    server.process.terminate()
    try:
        server.process.wait(timeout=timeout)
    finally:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()
        if server.process.stdout is not None:
            server.process.stdout.close()
