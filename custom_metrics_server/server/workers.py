"""`serve --workers N`: what a worker process serves, and the main process's side of it.

A worker runs the front of the handler chain (`chain.Tracking`, `InflightLimit`, `Deadline`,
`UriBound`, `GateFilter` with the delegated authentication and authorization of the flags,
each worker with its own caches), answers `/healthz` and `/livez` itself (its own FastAPI
shell: `ping`, and whether its connection to the main process is up), and forwards every
other request that passed the gate to the main process (`runtime.forward`): `/readyz` (the
main process's readiness), the metric APIs, discovery, `/metrics`, `/metrics/resources`,
OpenAPI. The main process runs them through its own chain with `ForwardedGate` (the worker
already authenticated and authorized them) and its own in-flight limit and deadline, so the
limits hold for the whole server. A worker whose main process does not answer in time gives
the client its 504 (`Deadline`) and tells the main process to cancel; one whose connection to
the main process is down answers 503.

`supervise` runs the main process (`runtime.workers.SupervisingServer`: the port reserved,
the workers started with the command line's flags, replaced when they die, stopped in order)
and `serve_worker` a worker; the command line calls them for `--workers N` and the hidden
`--worker-of` flag. That is the *forwarding* mode; when every backend is replicable
(plugins.replicas) the command line runs the *replicated* one instead: `supervise_replicas`
(the same supervision, no backends, nothing served) and `serve_replica` (a worker running the
whole server, hidden flags `--worker-of` and `--worker-replica`).

Per request in a worker: the chain's filters (O(1) with warm caches), one forwarded frame
each way (O(headers + body)).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Final

import uvicorn

from custom_metrics_server.domain import Readiness
from custom_metrics_server.errors import BackendUnavailable, StatusError
from custom_metrics_server.runtime.asgi import ASGIApp, Receive, Scope, Send, serve_lifespan
from custom_metrics_server.runtime.forward import ForwardClient, MainUnavailable
from custom_metrics_server.runtime.serving import TlsServer, listen_error
from custom_metrics_server.runtime.startup import CONFIGURATION, StartupError
from custom_metrics_server.runtime.tasks import background
from custom_metrics_server.runtime.workers import (
    SupervisingServer,
    Workers,
    die_with_parent,
    reserve_port,
)
from custom_metrics_server.security.options import SecurityConfig
from custom_metrics_server.server.app import Server
from custom_metrics_server.server.chain import (
    Deadline,
    GateFilter,
    InflightLimit,
    ShutdownState,
    Tracking,
    UriBound,
    exchange_of,
    reject,
)
from custom_metrics_server.server.observability import ServerMetrics
from custom_metrics_server.server.shell import build_shell

__all__ = [
    "ForwardedGate",
    "MakeConfig",
    "WorkerApp",
    "serve_replica",
    "serve_worker",
    "supervise",
    "supervise_replicas",
    "this_program",
]

logger = logging.getLogger(__name__)

#: Builds the uvicorn settings of the command line for an application (cli._uvicorn_config).
MakeConfig = Callable[[ASGIApp, argparse.Namespace, SecurityConfig, str], uvicorn.Config]

#: Answered by the worker itself; `/readyz` goes to the main process.
_LOCAL: Final = frozenset({"/healthz", "/livez"})
_LOCAL_PREFIXES: Final = ("/healthz/", "/livez/")


class ForwardedGate:
    """The main process's gate for forwarded requests: the worker has authenticated,
    stripped the credentials and authorized them already."""

    async def check(self, scope: Scope) -> StatusError | None:
        """Nothing left to check."""
        return None


class _Forward:
    """End of a worker's chain: health locally, everything else to the main process."""

    __slots__ = ("client", "shell")

    def __init__(self, client: ForwardClient, shell: object) -> None:
        self.client = client
        self.shell = shell

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        if path in _LOCAL or path.startswith(_LOCAL_PREFIXES):
            exchange_of(scope).labels = None
            await self.shell(scope, receive, send)  # type: ignore[operator]
            return
        exchange_of(scope).labels = ("", "", "")
        try:
            await self.client.forward(scope, send)
        except MainUnavailable as err:
            if not exchange_of(scope).status:
                await reject(scope, send, BackendUnavailable(f"the main process: {err}"))


class WorkerApp:
    """A worker's ASGI application (see the module docstring)."""

    def __init__(
        self,
        *,
        security: SecurityConfig,
        client: ForwardClient,
        max_requests_inflight: int,
        request_timeout: float,
    ) -> None:
        self.security = security
        self.client = client
        self.metrics = ServerMetrics()
        self.metrics.track_collectors(security.collectors())
        shell = build_shell(
            title="custom-metrics-server worker",
            metrics=self.metrics,
            checks=self._checks,
            resource_exposition=None,
            with_metrics_api=False,
        )
        self._state = ShutdownState()
        guarded = GateFilter(_Forward(client, shell), security.gate)
        self._chain = Tracking(
            InflightLimit(Deadline(UriBound(guarded), request_timeout), max_requests_inflight),
            self.metrics,
            self._state,
        )
        #: why the lifespan did not start, for the one-line report
        self.startup_error: BaseException | None = None
        self.exit_requested: asyncio.Event | None = None

    def _checks(self, endpoint: str) -> Mapping[str, Readiness]:
        connected = self.client.connected
        return {
            "ping": Readiness(ready=True),
            "main-process": Readiness(ready=connected, reason="" if connected else "not connected"),
        }

    def begin_shutdown(self) -> None:
        """Termination has begun: answers close their connections (as a single process)."""
        self._state.shutting_down = True

    def greet(self) -> None:
        """Tell the main process this worker listens (call once the port is bound)."""
        self.client.hello(str(os.getpid()))

    @contextlib.asynccontextmanager
    async def _lifespan(self) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(self.security.lifespan())
            await self.client.connect()
            await stack.enter_async_context(background(self._watch_main(), name="main-process"))
            yield

    async def _watch_main(self) -> None:
        """The main process closed the connection: it is gone or going; so is this worker."""
        await self.client.lost.wait()
        logger.warning("worker %d: the main process closed the connection; exiting", os.getpid())
        os.kill(os.getpid(), signal.SIGTERM)

    def _lifespan_failed(self, error: BaseException, during_startup: bool) -> None:
        if during_startup:
            self.startup_error = error
            return
        logger.error("worker shutdown failed: %s: %s", type(error).__name__, error)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._chain(scope, receive, send)
        elif kind == "lifespan":
            await serve_lifespan(self._lifespan, receive, send, failed=self._lifespan_failed)
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1008})


def supervise(
    args: argparse.Namespace,
    config: uvicorn.Config,
    app: Server,
    bind: str,
    on_bound: Callable[[int], None],
) -> None:
    """The main process of forwarding `--workers N`: the backends, the forwarded requests,
    the workers (runtime.workers). The port is reserved here and served by the workers."""
    _supervise(
        args,
        config,
        bind,
        on_bound,
        on_shutdown=app.begin_shutdown,
        startup_error=lambda: app.startup_error,
        extra=(),
    )


def supervise_replicas(
    args: argparse.Namespace, bind: str, on_bound: Callable[[int], None]
) -> None:
    """The main process of replicated `--workers N` (plugins.replicas): it reserves the
    port, starts, replaces and stops the workers, and serves nothing: no backend starts here.
    Its Unix socket only counts the workers' greetings (and tells them when it is gone)."""
    config = uvicorn.Config(
        _Idle(), host=bind, port=args.secure_port, lifespan="off", log_config=None
    )
    _supervise(
        args,
        config,
        bind,
        on_bound,
        on_shutdown=None,
        startup_error=None,
        extra=("--worker-replica",),
    )


def _private_directory() -> tempfile.TemporaryDirectory[str]:
    """The 0700 directory of the main process's socket; a start-up line when no temporary
    directory is writable (a read-only root without TMPDIR)."""
    try:
        return tempfile.TemporaryDirectory(prefix="custom-metrics-server-")
    except OSError as err:
        raise StartupError(
            "--workers needs a temporary directory for the socket its workers reach it on",
            status=err.strerror or str(err),
            fix="set TMPDIR to a writable directory (an emptyDir volume when the root "
            "filesystem is read-only), or run one process (--workers 1)",
            exit_code=CONFIGURATION,
        ) from err


def _supervise(
    args: argparse.Namespace,
    config: uvicorn.Config,
    bind: str,
    on_bound: Callable[[int], None],
    *,
    on_shutdown: Callable[[], None] | None,
    startup_error: Callable[[], BaseException | None] | None,
    extra: tuple[str, ...],
) -> None:
    try:
        reserved = reserve_port(bind, args.secure_port)
    except OSError as err:
        raise listen_error(bind, args.secure_port, err) from err
    port = reserved.getsockname()[1]
    with reserved, _private_directory() as private:
        path = str(Path(private) / "main.sock")  # the directory is 0700: this user only
        command = [
            *this_program(),
            *args.argv,
            "--secure-port",
            str(port),
            "--worker-of",
            path,
            *extra,
        ]
        SupervisingServer(
            config,
            on_bound,
            on_shutdown=on_shutdown,
            startup_error=startup_error,
            workers=Workers(lambda: command, args.workers),
            forward_path=path,
            port=port,
        ).run()


class _Idle:
    """The replicated main process's application: never called (no worker forwards)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 503, "headers": []})
            await send({"type": "http.response.body", "body": b""})


def this_program() -> list[str]:
    """How to run this program again: `python -m <module>` as it was started (a wrapper
    module of the CLI included), else the script."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:
        return [sys.executable, "-m", spec.name.removesuffix(".__main__")]
    return [sys.executable, sys.argv[0]]


def serve_worker(
    args: argparse.Namespace, security: SecurityConfig, make_config: MakeConfig, bind: str
) -> None:
    """A worker of `--workers N` (runtime.workers, server.workers): serves the port with
    the main process's answers."""
    die_with_parent(os.getppid())
    app = WorkerApp(
        security=security,
        client=ForwardClient(args.worker_of),
        max_requests_inflight=args.max_requests_inflight,
        request_timeout=args.request_timeout,
    )
    server = TlsServer(
        make_config(app, args, security, bind),
        lambda _port: app.greet(),
        on_shutdown=app.begin_shutdown,
        shutdown_delay=args.shutdown_delay_duration,
        tls_handshake_timeout=args.tls_handshake_timeout,
        startup_error=lambda: app.startup_error,
    )
    server.reuse_port = True
    server.run()


def serve_replica(args: argparse.Namespace, config: uvicorn.Config, app: Server) -> None:
    """A worker of replicated `--workers N`: the whole server (`app`, with its own backends
    and auth caches) on the port shared with `SO_REUSEPORT`; it greets the main process once
    it listens and exits when the main process is gone. Per request: exactly one process's
    path, nothing crosses a socket."""
    die_with_parent(os.getppid())
    client = ForwardClient(args.worker_of)
    kept: list[asyncio.Task[None]] = []

    async def stay_in_touch() -> None:
        try:
            await client.connect()
        except OSError as err:
            logger.warning("worker %d: no main process (%s); exiting", os.getpid(), err)
        else:
            client.hello(str(os.getpid()))
            await client.lost.wait()
            logger.warning(
                "worker %d: the main process closed the connection; exiting", os.getpid()
            )
        os.kill(os.getpid(), signal.SIGTERM)

    def on_bound(_port: int) -> None:
        kept.append(asyncio.get_running_loop().create_task(stay_in_touch(), name="main-process"))

    server = TlsServer(
        config,
        on_bound,
        on_shutdown=app.begin_shutdown,
        shutdown_delay=args.shutdown_delay_duration,
        tls_handshake_timeout=args.tls_handshake_timeout,
        startup_error=lambda: app.startup_error,
    )
    server.reuse_port = True
    server.run()
