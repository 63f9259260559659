"""The main process of `serve --workers N`: it reserves the port and supervises N workers that
serve it; it serves nothing itself and starts no backend.

* The port is reserved here (bound with `SO_REUSEPORT`, never listened on, so no connection
  is ever queued on it): a bind error is reported by the main process as with one process,
  `--secure-port 0` resolves once, and every worker binds the same port with `SO_REUSEPORT`.
* Workers are this program again (`this_program()` with the command line's flags, the port and
  `--worker-link FD`), in a session of their own (a terminal's Ctrl-C reaches the main process
  only, which then stops them in order), each with one end of a Unix socket pair (the package
  docstring).
* Start-up: the banner (`on_bound`) is printed once every worker has written its line, i.e.
  listens. A worker that exits before that ends the start-up with its exit status (its own
  line says why); one that dies later is restarted after `RESTART_DELAY` seconds.
* Termination: the first SIGTERM/SIGINT is passed to the workers, which drain as one process
  does (`--shutdown-delay-duration`, then in-flight requests); the main process exits once the
  last one did. A second signal is passed on as SIGKILL and ends everything at once.

Costs: nothing per request (the main process is not on the request path); one readable event
per worker start and exit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Final

import uvicorn

from custom_metrics_server.runtime.asgi import Receive, Scope, Send
from custom_metrics_server.runtime.serving import TlsServer, listen_error
from custom_metrics_server.runtime.startup import StartupError

__all__ = [
    "RESTART_DELAY",
    "SupervisingServer",
    "Workers",
    "reserve_port",
    "supervise",
    "this_program",
]

logger = logging.getLogger("custom_metrics_server")

#: Seconds between a worker's death and its replacement (a crash loop costs little).
RESTART_DELAY: Final = 1.0


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


def this_program() -> list[str]:
    """How to run this program again: `python -m <module>` as it was started (a wrapper
    module of the CLI included), else the script."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:
        return [sys.executable, "-m", spec.name.removesuffix(".__main__")]
    return [sys.executable, sys.argv[0]]


class Workers:
    """N worker processes: started, heard from, replaced when they die, stopped in order.
    `command(fd)` is a worker's command line, `fd` its end of the socket pair. Runs on the
    event loop (the links are read with `add_reader`)."""

    def __init__(self, command: Callable[[int], list[str]], count: int) -> None:
        self.command = command
        self.count = count
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.links: dict[int, socket.socket] = {}
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
        ours, theirs = socket.socketpair()
        try:
            # The command is this interpreter running this package with the main process's flags.
            process = subprocess.Popen(  # noqa: S603
                self.command(theirs.fileno()),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
                pass_fds=(theirs.fileno(),),
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()  # the worker holds its own copy
        ours.setblocking(False)
        self.processes[process.pid] = process
        self.links[process.pid] = ours
        asyncio.get_running_loop().add_reader(ours.fileno(), self._heard, process.pid)

    def _heard(self, pid: int) -> None:
        """A worker's link is readable: its line (it listens), or end-of-file (it exits)."""
        link = self.links.get(pid)
        if link is None:
            return
        try:
            data = link.recv(64)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._unlink(pid)  # `poll` reaps the process
            return
        self.greeted.add(pid)
        if len(self.greeted & self.processes.keys()) >= self.count:
            self._ready.set()

    def _unlink(self, pid: int) -> None:
        link = self.links.pop(pid, None)
        if link is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed already
                asyncio.get_running_loop().remove_reader(link.fileno())
            link.close()

    async def wait_ready(self) -> None:
        """Until every worker listens; a worker that exits first ends the start-up."""
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
            self._unlink(pid)
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

    def close(self) -> None:
        """Close every link (a worker still running then exits)."""
        for pid in list(self.links):
            self._unlink(pid)

    @property
    def all_exited(self) -> bool:
        """Whether no worker process runs."""
        return all(process.poll() is not None for process in self.processes.values())


class _Links:
    """What uvicorn closes at shutdown in place of a listener (the main process listens on
    nothing): the links to the workers."""

    def __init__(self, workers: Workers) -> None:
        self.workers = workers

    def close(self) -> None:
        self.workers.close()

    async def wait_closed(self) -> None:
        return None


class SupervisingServer(TlsServer):
    """The main process: `TlsServer`'s signal handling and shutdown, its "listener" the
    workers; it exits once they did."""

    def __init__(
        self,
        config: uvicorn.Config,
        on_bound: Callable[[int], None],
        *,
        workers: Workers,
        port: int,
    ) -> None:
        super().__init__(config, on_bound)
        self.workers = workers
        self.port = port

    async def listen(self, create_protocol: Callable[[], asyncio.Protocol]) -> asyncio.Server:
        """Start the workers and wait until every one listens."""
        self.workers.start()
        try:
            await self.workers.wait_ready()
        except BaseException:
            self.workers.close()
            raise
        return _Links(self.workers)  # type: ignore[return-value]

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
        logger.info("termination signal: passed to the workers")

    async def on_tick(self, counter: int) -> bool:
        self.workers.poll()
        if self.workers.stopping and self.workers.all_exited:
            self.should_exit = True
        return await super().on_tick(counter)


class _Idle:
    """The main process's application: never called (it listens on nothing)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b""})


def supervise(args: argparse.Namespace, bind: str, on_bound: Callable[[int], None]) -> None:
    """Run the main process of `--workers N` (`args.workers`) until the workers exited."""
    try:
        reserved = reserve_port(bind, args.secure_port)
    except OSError as err:
        raise listen_error(bind, args.secure_port, err) from err
    port = reserved.getsockname()[1]
    command = [*this_program(), *args.argv, "--secure-port", str(port), "--worker-link"]
    config = uvicorn.Config(_Idle(), host=bind, port=port, lifespan="off", log_config=None)
    with reserved:
        SupervisingServer(
            config,
            on_bound,
            workers=Workers(lambda fd: [*command, str(fd)], args.workers),
            port=port,
        ).run()
