"""Processes and ports of the control-plane tier: free loopback ports (never the shared
realnode's), a child process with its own log, and kubeconfig files."""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

__all__ = ["RESERVED_PORTS", "Process", "free_port", "write_kubeconfig"]

#: Loopback ports of the shared realnode (and its defaults): never handed out here.
RESERVED_PORTS = frozenset({26443, 23792, 23802, 10367, 10259, 23791, 23801, 16443, 10357})


def free_port() -> int:
    """A loopback TCP port free right now (and not one of `RESERVED_PORTS`)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port not in RESERVED_PORTS:
            return port


def write_kubeconfig(path: Path, server: str, ca: Path, user: dict[str, str]) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "cp", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "cp", "context": {"cluster": "cp", "user": "u"}}],
        "current-context": "cp",
    }
    path.write_text(yaml.safe_dump(config))
    return path


@dataclass
class Process:
    name: str
    command: list[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    #: A log line after which the process has nothing left to do: kube-apiserver 1.36
    #: lingers for seconds after its graceful termination is over (nothing is lost by
    #: killing it then, as ../shared/realnode's realkube.sh does too).
    done_line: bytes = b""
    log_offset: int = 0

    def start(self) -> None:
        self.log_offset = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as sink:
            self.process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM, then wait for the exit (or `done_line`); SIGKILL after 20 s."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            deadline = time.monotonic() + 20
            while self.process.poll() is None and time.monotonic() < deadline:
                if self.done_line and self.done_line in self._log_since_start():
                    break
                time.sleep(0.05)
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
        self.process = None

    def _log_since_start(self) -> bytes:
        with open(self.log, "rb") as log:
            log.seek(self.log_offset)
            return log.read()

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])
