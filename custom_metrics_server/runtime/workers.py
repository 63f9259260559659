"""The main process of `serve --workers N`: it keeps the backends, answers the workers'
forwarded requests (`runtime.forward`) and supervises N worker processes that serve the port.

* The port is reserved here (bound with `SO_REUSEPORT`, never listened on, so no connection
  is ever queued on it): a bind error is reported by the main process as today, `--secure-port
  0` resolves once, and every worker binds the same port with `SO_REUSEPORT`; the kernel
  spreads new connections over the workers' listeners.
* Workers are this program again (`command(port)`), in a session of their own (a terminal's
  Ctrl-C reaches the main process only, which then stops them in order) and with
  `PR_SET_PDEATHSIG` (`die_with_parent`), so a killed main process takes them along.
* Start-up: the banner (`on_bound`) is printed once every worker has greeted, i.e. listens.
  A worker that exits before greeting ends the start-up with its exit status (its own line
  says why); one that dies later is restarted after `RESTART_DELAY` seconds.
* Termination: the first SIGTERM/SIGINT fails `/readyz` (`on_shutdown`) and is passed to the
  workers, which drain as a single process does (`--shutdown-delay-duration`, then in-flight
  requests); the main process keeps answering them until the last one exited, then stops its
  backends. A second signal is passed on too and ends everything at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from types import FrameType
from typing import Final

from custom_metrics_server.runtime.forward import ForwardServer
from custom_metrics_server.runtime.serving import TlsServer
from custom_metrics_server.runtime.startup import StartupError

__all__ = ["RESTART_DELAY", "SupervisingServer", "Workers", "die_with_parent", "reserve_port"]

logger = logging.getLogger("custom_metrics_server")

#: Seconds between a worker's death and its replacement (a crash loop costs little).
RESTART_DELAY: Final = 1.0
_PR_SET_PDEATHSIG: Final = 1


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port) with `SO_REUSEPORT`, not listening. Raises OSError."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def die_with_parent(parent: int) -> None:
    """In a worker: SIGTERM when the main process dies (Linux); exit now if it already did."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


class Workers:
    """N worker processes: started, greeted, replaced when they die, stopped in order."""

    def __init__(self, command: Callable[[], list[str]], count: int) -> None:
        self.command = command
        self.count = count
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.greeted: set[int] = set()
        self.stopping = False
        self.restarts = 0
        self._due: list[float] = []  # restart times of workers that died
        self._ready = asyncio.Event()

    def start(self) -> None:
        """Start every worker."""
        for _ in range(self.count):
            self._spawn()

    def _spawn(self) -> None:
        # The command is this interpreter running this package with the main process's flags.
        process = subprocess.Popen(  # noqa: S603
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.processes[process.pid] = process

    def greet(self, worker: str) -> None:
        """A worker connected and listens (`worker` is its pid)."""
        try:
            self.greeted.add(int(worker))
        except ValueError:
            return
        if len(self.greeted & self.processes.keys()) >= self.count:
            self._ready.set()

    async def wait_ready(self) -> None:
        """Until every worker greeted; a worker that exits first ends the start-up."""
        while not self._ready.is_set():
            for pid, process in self.processes.items():
                status = process.poll()
                if status is not None:
                    self.stop(signal.SIGKILL)
                    raise StartupError(
                        f"worker process {pid} exited during start-up (status {status})",
                        fix="see its line above",
                        exit_code=status if status > 0 else 1,
                    )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._ready.wait()), 0.05)

    def poll(self) -> None:
        """Reap dead workers; replace them (after `RESTART_DELAY`) unless stopping."""
        now = time.monotonic()
        for pid, process in list(self.processes.items()):
            status = process.poll()
            if status is None:
                continue
            del self.processes[pid]
            self.greeted.discard(pid)
            if not self.stopping:
                logger.warning("worker process %d exited (status %s): replacing it", pid, status)
                self._due.append(now + RESTART_DELAY)
        if self.stopping:
            self._due.clear()
            return
        while self._due and self._due[0] <= now:
            self._due.pop(0)
            self.restarts += 1
            self._spawn()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Send `sig` to every worker; no more replacements."""
        self.stopping = True
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(sig)

    @property
    def all_exited(self) -> bool:
        """Whether no worker process runs."""
        return all(process.poll() is not None for process in self.processes.values())


class SupervisingServer(TlsServer):
    """The main process: the application's lifespan (backends), the Unix socket the workers
    forward to, and the workers. `TlsServer`'s signal handling and shutdown are reused; its
    "listener" is the Unix server, and it exits once the workers did."""

    def __init__(
        self,
        *args: object,
        workers: Workers,
        forward_path: str,
        port: int,
        **kwargs: object,
    ) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.workers = workers
        self.forward_path = forward_path
        self.port = port

    async def listen(self, create_protocol: Callable[[], asyncio.Protocol]) -> asyncio.Server:
        """Serve the Unix socket with the application, start the workers, wait for them."""
        forward = ForwardServer(self.config.loaded_app, self.workers.greet)
        server = await forward.start(self.forward_path)
        self.workers.start()
        try:
            await self.workers.wait_ready()
        except BaseException:
            server.close()
            raise
        return server  # type: ignore[return-value]

    def bound_port(self, server: asyncio.Server) -> int:
        return self.port

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        second = self.workers.stopping
        self.workers.stop(signal.SIGKILL if second else signal.SIGTERM)
        if second:
            logger.warning("second termination signal: exiting at once")
            self.force_exit = True
            self.should_exit = True
            self._captured_signals.append(sig)  # uvicorn re-raises it after its loop
            return
        logger.info("termination signal: passed to the workers; /readyz fails now")
        self._shutdown_requested()

    def _shutdown_requested(self) -> None:
        on_shutdown = self._on_shutdown
        if on_shutdown is not None:
            on_shutdown()

    async def on_tick(self, counter: int) -> bool:
        self.workers.poll()
        if self.workers.stopping and self.workers.all_exited:
            self.should_exit = True
        return await super().on_tick(counter)
