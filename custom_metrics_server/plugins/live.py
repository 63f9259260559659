"""The backends in force: started in order, checked, refreshed, and replaced when the backends
file changes, without dropping requests to the backends that did not change.

`LiveBackends` is entered by the server's lifespan:

* **start**: every backend is entered in file order; one that raises stops the start-up
  (`StartupFailure`, one line naming it; the ones started are stopped). Then the routing
  table's start-up check: two backends listing one metric with no route that decides is a
  `StartupFailure` naming both. Deciding to fail rather than to serve without the backend: a
  server that starts without some of its metrics looks healthy while an HPA scales on nothing;
  a pod that does not start is seen at once, and during a rollout the old pods keep serving.
  A backend whose source is merely down at start-up should start and say so in `ready()`.
* **refresh**: every `refresh_interval` seconds the routing table re-reads the listings.
* **precedence**: each backend that yields (`sdk.precedence.Yielding`: the metric definitions)
  is handed the router in force, at start and after each reload, to learn which of its
  metrics another backend wins.
* **reload** (with a file and a reload interval): the file is read every interval and compared
  by digest. A changed file is validated and made (the entries whose type, settings, threads
  and series bound did not change keep their running backend, with their new routes and
  deadline), the new backends are started, the new routing table is checked, then swapped in
  at once; the backends it dropped or replaced are stopped after their deadline, so requests
  already given to them finish. Anything wrong (the file, a plugin, a start, a conflict, a
  change to the backend that provides the cluster view, which needs a restart) is logged in
  one error record, counted, and the last good configuration stays in force; a broken version
  is reported once.

Self-metrics: `custom_metrics_server_backends_config_reloads_total{result}` and
`custom_metrics_server_backends_config_last_reload_successful`.

It decides nothing about requests (routing is `query.routing`'s).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from prometheus_client import CollectorRegistry, Counter, Gauge

from custom_metrics_server.plugins.adapter import PluginError, one_line
from custom_metrics_server.plugins.config import (
    BackendsConfigError,
    BackendsFile,
    read_backends_file,
)
from custom_metrics_server.plugins.external_reads import connect
from custom_metrics_server.plugins.loader import Built, Loaded, load_backends
from custom_metrics_server.plugins.replicas import not_replicable
from custom_metrics_server.query.engine import QueryEngine
from custom_metrics_server.query.precedence import RouterPrecedence
from custom_metrics_server.query.routing import Conflict, Router
from custom_metrics_server.runtime.startup import REFUSED, StartupError
from custom_metrics_server.runtime.tasks import BackgroundTasks
from custom_metrics_server.sdk.backend import MetricsBackend
from custom_metrics_server.sdk.precedence import Yielding

__all__ = ["LiveBackends", "StartupFailure", "describe_conflicts"]

logger = logging.getLogger("custom_metrics_server.plugins")

#: How often the routing table re-reads the backends' listings.
REFRESH_INTERVAL = 1.0


class StartupFailure(StartupError):
    """The backends cannot start; the message is what the operator needs. Exit status 3: the
    backends were tried and refused (a conflict shows only once their listings are read)."""

    def __init__(self, message: str) -> None:
        super().__init__("; ".join(message.splitlines()), exit_code=REFUSED)


def describe_conflicts(conflicts: Sequence[Conflict]) -> str:
    """One line per conflict, with the remedy."""
    return "\n".join(
        f"{conflict}: add a route that decides (docs/backends.md, Routing)"
        for conflict in conflicts
    )


def _start_error(name: str, err: BaseException) -> StartupFailure:
    logger.debug("backend %s failed to start", name, exc_info=err)
    return StartupFailure(f"backend {name!r} failed to start: {one_line(err)}")


async def _stop(backend: MetricsBackend) -> None:
    try:
        await backend.__aexit__(None, None, None)
    except Exception:
        logger.exception("backend %s failed to stop", backend.name)


def _yield_to(router: Router) -> None:
    """Tell each backend that yields (`sdk.precedence.Yielding`) the router now in force, so it
    can say which of its metrics another backend wins (docs/metric-definitions.md, "The
    platform wins"). O(backends)."""
    precedence = RouterPrecedence(router)
    for host in router.hosts:
        if host.yields and isinstance(host.backend, Yielding):
            host.backend.yield_to(precedence)


class LiveBackends:
    """The server's backends over its life (see the module)."""

    def __init__(
        self,
        engine: QueryEngine,
        *,
        loaded: Loaded | None = None,
        source: Path | None = None,
        digest: bytes | None = None,
        reload_interval: float = 5.0,
        default_timeout: float = 10.0,
        registry: CollectorRegistry | None = None,
        refresh_interval: float = REFRESH_INTERVAL,
        added: Callable[[MetricsBackend], None] | None = None,
        removed: Callable[[MetricsBackend], None] | None = None,
        replicated: bool = False,
        replicate_watches: bool = False,
    ) -> None:
        self.engine = engine
        #: a worker of replicated `--workers N`: a reload may not add a non-replicable backend
        self.replicated = replicated
        #: `--workers-replicate-watches`: in such a reload, watching backends are replicable
        self.replicate_watches = replicate_watches
        self._added = added
        self._removed = removed
        self.loaded = loaded
        self.source = source
        self._digest = digest
        self.reload_interval = reload_interval
        self.default_timeout = default_timeout
        self.refresh_interval = refresh_interval
        self._running: list[MetricsBackend] = []
        self._tasks = BackgroundTasks()
        self._lock = asyncio.Lock()
        self._last_error: str | None = None
        registry = registry or CollectorRegistry(auto_describe=True)
        self.reloads = Counter(
            "custom_metrics_server_backends_config_reloads_total",
            "Reloads of the backends file by result (success/failure).",
            ["result"],
            registry=registry,
        )
        self.config_ok = Gauge(
            "custom_metrics_server_backends_config_last_reload_successful",
            "1 when the backends in force are those of the file on disk.",
            registry=registry,
        )
        self.config_ok.set(1)

    # -- start and stop -----------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self.loaded is not None:
            connect(self.engine, self.loaded.built)
        started = await self._start([host.backend for host in self.engine.router.hosts])
        self._running = started
        conflicts = self.engine.router.start()
        if conflicts:
            await self._stop_all(started)
            self._running = []
            raise StartupFailure(describe_conflicts(conflicts))
        _yield_to(self.engine.router)
        self._tasks.start(self._refresh_loop(), name="backends-refresh")
        if self.source is not None and self.loaded is not None and self.reload_interval > 0:
            self._tasks.start(self._reload_loop(), name="backends-reload")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._tasks.stop()
        await self._stop_all(self._running)
        self._running = []

    async def _start(self, backends: Sequence[MetricsBackend]) -> list[MetricsBackend]:
        """Enter each backend in order; on a failure, stop the ones started and raise."""
        started: list[MetricsBackend] = []
        for backend in backends:
            try:
                await backend.__aenter__()
            except Exception as err:
                await self._stop_all(started)
                raise _start_error(backend.name, err) from err
            started.append(backend)
            logger.info("backend %s started", backend.name)
        return started

    @staticmethod
    async def _stop_all(backends: Sequence[MetricsBackend]) -> None:
        for backend in reversed(backends):
            await _stop(backend)
            logger.info("backend %s stopped", backend.name)

    # -- background work ----------------------------------------------------------------------

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_interval)
            try:
                self.engine.router.refresh(force=True)
            except Exception:
                logger.exception("refreshing the backends' listings failed")

    async def _reload_loop(self) -> None:
        while True:
            await asyncio.sleep(self.reload_interval)
            try:
                await self.reload()
            except Exception:
                logger.exception("reloading the backends file failed")

    # -- reload -------------------------------------------------------------------------------

    async def reload(self) -> bool:
        """Re-read the backends file; True when a new configuration took effect (see the
        module). Never raises for a bad file, plugin or start: it keeps the last good one."""
        if self.source is None or self.loaded is None:
            return False
        async with self._lock:
            try:
                config, digest = read_backends_file(self.source)
            except BackendsConfigError as err:
                return self._failed(str(err), digest=None)
            if digest == self._digest:
                return False
            try:
                return await self._apply(config, digest)
            except (BackendsConfigError, PluginError, StartupFailure) as err:
                return self._failed(str(err), digest=digest)

    def _failed(self, message: str, *, digest: bytes | None) -> bool:
        if digest is not None:
            self._digest = digest  # report a broken version once
        elif message == self._last_error:
            return False
        self._last_error = message
        self.reloads.labels("failure").inc()
        self.config_ok.set(0)
        logger.error(
            "backends file %s not reloaded, keeping the last good one: %s",
            self.source,
            message.replace("\n", "; "),
        )
        return False

    async def _apply(self, config: BackendsFile, digest: bytes) -> bool:
        assert self.loaded is not None
        old = self.loaded
        kept: dict[str, Built] = {built.name: built for built in old.built}
        provider = old.cluster_backend
        if provider is not None:
            previous = kept[provider]
            current = next((e for e in config.backends if e.name == provider), None)
            chosen = config.cluster or provider
            if current is None or not previous.same_backend(current) or chosen != provider:
                raise StartupFailure(
                    f"backend {provider!r} provides the cluster view: changing or removing it "
                    "needs a restart"
                )
        loaded = load_backends(
            config,
            base_dir=old.base_dir,
            default_timeout=self.default_timeout,
            keep=kept,
            cluster=old.cluster,
        )
        loaded.cluster_backend = provider
        held = not_replicable(loaded, watches=self.replicate_watches) if self.replicated else []
        if held:
            raise StartupFailure(
                f"not replicable: {', '.join(held)}; every worker of serve --workers runs its "
                "own backends, so a reload may not add one that is not replicable: a restart "
                "serves from one process instead"
            )
        running = {id(backend) for backend in self._running}
        fresh = [b.host.backend for b in loaded.built if id(b.host.backend) not in running]
        connect(self.engine, loaded.built)
        started = await self._start(fresh)
        router = Router(loaded.hosts)
        conflicts = router.start()
        if conflicts:
            await self._stop_all(started)
            raise StartupFailure(describe_conflicts(conflicts))
        in_use = {id(b.host.backend) for b in loaded.built}
        retired = [backend for backend in self._running if id(backend) not in in_use]
        self.engine.reconfigure(router)
        _yield_to(router)
        for backend in retired:
            if self._removed is not None:
                self._removed(backend)
        for backend in started:
            if self._added is not None:
                self._added(backend)
        self.loaded = loaded
        self._running = [b.host.backend for b in loaded.built]
        self._digest = digest
        self._last_error = None
        self.reloads.labels("success").inc()
        self.config_ok.set(1)
        old_names = {b.name for b in old.built}
        new_names = {b.name for b in loaded.built}
        replaced = sorted(b.name for b in retired if b.name in new_names)
        logger.info(
            "backends file %s reloaded: %d backends; added %s; removed %s; restarted %s",
            self.source,
            len(loaded.built),
            ", ".join(sorted(new_names - old_names)) or "none",
            ", ".join(sorted(old_names - new_names)) or "none",
            ", ".join(replaced) or "none",
        )
        if retired:
            grace = max(
                (h.timeout or self.default_timeout for h in old.hosts if h.backend in retired),
                default=self.default_timeout,
            )
            self._tasks.start(self._retire(retired, grace), name="backends-retire", transient=True)
        return True

    async def _retire(self, backends: list[MetricsBackend], grace: float) -> None:
        """Stop backends a reload dropped, once the requests already given to them are done
        (they end at their deadline at the latest)."""
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(grace)
        await self._stop_all(backends)
