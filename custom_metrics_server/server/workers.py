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

Per request in a worker: the chain's filters (O(1) with warm caches), one forwarded frame
each way (O(headers + body)).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Mapping
from typing import Final

from custom_metrics_server.domain import Readiness
from custom_metrics_server.errors import BackendUnavailable, StatusError
from custom_metrics_server.runtime.asgi import Receive, Scope, Send, serve_lifespan
from custom_metrics_server.runtime.forward import ForwardClient, MainUnavailable
from custom_metrics_server.runtime.tasks import background
from custom_metrics_server.security.options import SecurityConfig
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

__all__ = ["ForwardedGate", "WorkerApp"]

logger = logging.getLogger(__name__)

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
            "main-process": Readiness(
                ready=connected, reason="" if connected else "not connected"
            ),
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
