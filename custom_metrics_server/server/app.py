"""Composition root: builds the server's ASGI application from the cluster view, the backends
and the settings, and composes the handler chain in one place (`Server.__init__`).

Every HTTP request passes, in order: `Tracking` (the request's exchange, `Connection: close`
during shutdown, self-metrics), `InflightLimit` (429), `Deadline` (504), `UriBound` (414),
`GateFilter` (authentication and authorization: 401/403), then the `PathRouter`'s one decision:
the metric APIs and discovery (`endpoints.ApiEndpoints`), `metrics.k8s.io`, the demo's `/api`,
or the FastAPI shell (health, version, `/metrics`, OpenAPI). See `chain` for each filter and
docs/operations.md for the flags. WebSocket scopes are closed unanswered (uvicorn then answers
403): this API has no streaming endpoints. The lifespan (`runtime.asgi.serve_lifespan`) starts
and stops the event-loop lag watch, the readiness log (`state_log`), the security jobs (access
checks, the authentication ConfigMap follower) and the backends (`plugins.live.LiveBackends`:
start-up in file order, the routing check, the listing refresh and the backends file's
reloads). A start-up failure (a backend that cannot start, two that claim one metric, a
dependency that refused) is kept in `startup_error` for the CLI's one-line report, never
logged here with a traceback.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.registry import Collector

from custom_metrics_server.api.core_api import DemoCoreApi, is_core_api_path
from custom_metrics_server.domain import Readiness
from custom_metrics_server.metrics_api.request import GROUP as METRICS_API_GROUP
from custom_metrics_server.metrics_api.responses import ResourceMetricsApi, discovery_documents
from custom_metrics_server.plugins.live import LiveBackends
from custom_metrics_server.plugins.loader import Loaded
from custom_metrics_server.query.engine import QueryEngine
from custom_metrics_server.query.routing import Host, hosts_of
from custom_metrics_server.runtime.asgi import Receive, Scope, Send, serve_lifespan
from custom_metrics_server.runtime.heap import steady_gc, trim_heap
from custom_metrics_server.runtime.tasks import background
from custom_metrics_server.sdk.backend import ClusterView, MetricsBackend
from custom_metrics_server.security.gate import AllowAllGate, Gate
from custom_metrics_server.security.options import SecurityConfig
from custom_metrics_server.server.chain import (
    Deadline,
    GateFilter,
    InflightLimit,
    PathRouter,
    ShutdownState,
    Tracking,
    UriBound,
)
from custom_metrics_server.server.endpoints import (
    ApiEndpoints,
    DemoCoreEndpoints,
    ResourceMetricsEndpoints,
)
from custom_metrics_server.server.observability import ServerMetrics
from custom_metrics_server.server.shell import build_shell
from custom_metrics_server.server.state_log import ReadinessLog

__all__ = ["AppSettings", "BackendsFileSource", "Server", "create_app"]

logger = logging.getLogger(__name__)


@dataclass
class AppSettings:
    """What the HTTP layer needs to know; the CLI fills it from flags."""

    backend_timeout: float = 10.0
    title: str = "custom-metrics-server"
    extra_checks: dict[str, Readiness] = field(default_factory=dict)
    #: `--max-requests-inflight`: concurrent requests beyond it get 429 (0: no limit).
    max_requests_inflight: int = 400
    #: `--request-timeout` in seconds: the whole request's deadline, then 504 (0: none).
    request_timeout: float = 60.0
    #: Renders the KEP-1748 `/metrics/resources` exposition; None: the endpoint is a 404.
    resource_exposition: Callable[[], Iterator[bytes]] | None = None
    #: Serves `metrics.k8s.io` v1 and v1beta1 (`kubectl top`); None: the group is not served.
    metrics_api: ResourceMetricsApi | None = None
    #: The demo's read-only `/api` nodes and pods (what `kubectl top` reads besides
    #: metrics.k8s.io); never set outside `--demo`.
    demo_core_api: DemoCoreApi | None = None


@dataclass(frozen=True)
class BackendsFileSource:
    """Where the backends came from, for reloads: what was loaded, the file (None when the
    flags described it) and the digest of its bytes."""

    loaded: Loaded
    path: Path | None = None
    digest: bytes | None = None
    reload_interval: float = 5.0
    #: a worker process of `serve --workers N` (reloads keep every backend replicable)
    replicated: bool = False
    #: `--workers-replicate-watches`: watching backends count as replicable in those reloads
    replicate_watches: bool = False


class Server:
    """The ASGI application: the handler chain, then one of the handlers."""

    def __init__(
        self,
        *,
        cluster: ClusterView,
        backends: Sequence[MetricsBackend | Host],
        settings: AppSettings | None = None,
        security: SecurityConfig | None = None,
        gate: Gate | None = None,
        source: BackendsFileSource | None = None,
    ) -> None:
        self.settings = settings = settings or AppSettings()
        self.security = security
        if gate is None:
            gate = security.gate if security is not None else AllowAllGate()
        self.metrics = ServerMetrics()
        if security is not None:
            self.metrics.track_collectors(security.collectors())
        self._collectors: dict[int, Collector] = {}
        hosts = hosts_of(backends)
        for host in hosts:
            self._register_collector(host.backend)
        self.engine = QueryEngine(
            cluster=cluster,
            backends=hosts,
            backend_timeout=settings.backend_timeout,
            observe=self.metrics.observe_backend,
        )
        self.metrics.track_metric_status(self.engine.status)
        self.backends = LiveBackends(
            self.engine,
            loaded=source.loaded if source is not None else None,
            source=source.path if source is not None else None,
            digest=source.digest if source is not None else None,
            reload_interval=source.reload_interval if source is not None else 0.0,
            default_timeout=settings.backend_timeout,
            registry=self.metrics.registry,
            added=self._register_collector,
            removed=self._unregister_collector,
            replicated=source.replicated if source is not None else False,
            replicate_watches=source.replicate_watches if source is not None else False,
        )
        # `/readyz` checks beyond the engine's; `shutdown` as upstream's (fails once SIGTERM came).
        self.extra_checks = {**settings.extra_checks, "shutdown": Readiness(ready=True)}
        #: why the lifespan did not start (the CLI reports it in one line), None if it did
        self.startup_error: BaseException | None = None
        self.shell = build_shell(
            title=settings.title,
            metrics=self.metrics,
            checks=self._checks,
            resource_exposition=settings.resource_exposition,
            with_metrics_api=settings.metrics_api is not None,
        )
        metrics_api = settings.metrics_api
        core_api = settings.demo_core_api
        router = PathRouter(
            api=ApiEndpoints(
                engine=self.engine,
                metrics=self.metrics,
                extra_groups=discovery_documents() if metrics_api is not None else None,
            ),
            shell=self.shell,
            groups=(
                {METRICS_API_GROUP: ResourceMetricsEndpoints(metrics_api)}
                if metrics_api is not None
                else None
            ),
            core_api=(
                (is_core_api_path, DemoCoreEndpoints(core_api)) if core_api is not None else None
            ),
        )
        # The chain, innermost first: each filter wraps the one composed before it.
        self._deadline = Deadline(UriBound(GateFilter(router, gate)), settings.request_timeout)
        self._limit = InflightLimit(self._deadline, settings.max_requests_inflight)
        self._state = ShutdownState()
        self._chain = Tracking(self._limit, self.metrics, self._state)
        # Read at scrape time only: leaks of requests, deadlines or tasks show on `/metrics`.
        self.metrics.track_server(
            inflight=lambda: self._limit.inflight, deadlines=lambda: self._deadline.pending
        )

    def _register_collector(self, backend: MetricsBackend) -> None:
        """Backends with self-metrics of their own (the Prometheus client's) expose them on
        `/metrics`; a second backend of a type whose families are already there cannot."""
        make = getattr(backend, "collector", None)
        if not callable(make):
            return
        collector = make()
        try:
            self.metrics.registry.register(collector)
        except ValueError as err:
            logger.warning("backend %s: its self-metrics are not exported: %s", backend.name, err)
            return
        self._collectors[id(backend)] = collector

    def _unregister_collector(self, backend: MetricsBackend) -> None:
        """A backend a reload dropped takes its self-metrics with it."""
        collector = self._collectors.pop(id(backend), None)
        if collector is not None:
            self.metrics.registry.unregister(collector)

    @property
    def inflight(self) -> int:
        """Requests being served now that count against `max_requests_inflight`."""
        return self._limit.inflight

    @property
    def shutting_down(self) -> bool:
        """Whether `begin_shutdown` was called."""
        return self._state.shutting_down

    def begin_shutdown(self) -> None:
        """Termination has begun: `/readyz` fails at once (so endpoints drop this pod) while
        requests are still served, each answer closing its connection so clients reconnect
        to another replica."""
        self._state.shutting_down = True
        self.extra_checks["shutdown"] = Readiness(ready=False, reason="shutting down")

    def _checks(self, endpoint: str) -> Mapping[str, Readiness]:
        found = {"ping": Readiness(ready=True)}
        if endpoint == "readyz":
            found.update(self.engine.readiness())
            found.update(self.extra_checks)
        return found

    @contextlib.asynccontextmanager
    async def _lifespan(self) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(
                background(self.metrics.watch_loop_lag(), name="event-loop-lag")
            )
            if self.security is not None:
                await stack.enter_async_context(self.security.lifespan())
            await stack.enter_async_context(self.backends)
            readiness = ReadinessLog(lambda: self._checks("readyz"))
            await stack.enter_async_context(background(readiness.run(), name="readiness-log"))
            ready = lambda: all(c.ready for c in self._checks("readyz").values())  # noqa: E731
            await stack.enter_async_context(background(steady_gc(ready), name="steady-gc"))
            await stack.enter_async_context(background(trim_heap(), name="heap-trim"))
            yield
        logger.info("backends stopped")

    def _lifespan_failed(self, error: BaseException, during_startup: bool) -> None:
        if during_startup:
            self.startup_error = error
            return
        debug = logger.isEnabledFor(logging.DEBUG)
        logger.error("shutdown failed: %s: %s", type(error).__name__, error, exc_info=debug)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._chain(scope, receive, send)
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        elif kind == "lifespan":
            await serve_lifespan(self._lifespan, receive, send, failed=self._lifespan_failed)
        else:
            await self.shell(scope, receive, send)


def create_app(
    *,
    cluster: ClusterView,
    backends: Sequence[MetricsBackend | Host],
    settings: AppSettings | None = None,
    security: SecurityConfig | None = None,
    gate: Gate | None = None,
    source: BackendsFileSource | None = None,
) -> Server:
    """Build the server's ASGI application. Without `security`, the demo gate (everyone
    allowed); `gate` overrides the gate (tests drive the chain with their own); `source`
    (the backends file) lets the server reload it."""
    return Server(
        cluster=cluster,
        backends=backends,
        settings=settings,
        security=security,
        gate=gate,
        source=source,
    )
