"""The `metric-definitions` backend: `MetricDefinition`s watched across namespaces, each served
in its own namespace from its source (docs/metric-definitions.md).

* **Watch**: one list+watch (`kube.watcher.Reflector`) of
  `/apis/metrics.custom-metrics-server.io/v1alpha1/metricdefinitions` into the `Catalog`, which
  decides per namespace what serves (conflicts, limits) on each event.
* **Tick** (`tick.Ticker`): every second, and `COALESCE` after a change (a burst of watch
  events gives one tick): close retired sources, enter started ones, refresh the due ones,
  check the scrape-target limits of the namespaces that changed, and record the last value and
  error of the definitions refreshed or whose values may have changed (`maxAge`, a schedule's
  window edge). O(k log n) for the k definitions started or due of the n serving, never O(n).
* **Status**: `status_writer.StatusWriter` writes each `.status` and an Event on each `Ready`
  transition, paced and rate-limited; with an `elector`, only while this replica leads.
* **Serving**, from memory (`Source.values`), in the request's namespace only:
  External `GET .../namespaces/<ns>/<metric>`: the serving definition of (ns, metric), its
  values as series, filtered by the request's metric selector; a `pods` source's pods summed or
  averaged (`podValues`) into one series. Pods: each requested pod's value. Object: the
  described workload's pods' values summed or averaged. Values older than `maxAge` are absent;
  with `absent: zero` an External metric without a value is 0; with `failure: last-good` a
  failing source's last values serve while younger than `maxAge`; with `failure: error`
  (the default) a failing source is a 503 naming the definition.

The router gives this backend the lowest precedence (`Host.yields`): a metric name that a
platform backend routes or lists is the platform's: a definition of it serves nothing and says
so (`yield_to`, `Catalog.follow_platform` on the tick).
Cost of a request: O(1) to find the definition, the source's `values` (O(series)) and
O(objects) to answer from them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from types import TracebackType
from typing import Final, Self

from custom_metrics_server.backends.definitions.catalog import PODS, Catalog
from custom_metrics_server.backends.definitions.policy import Platform
from custom_metrics_server.backends.definitions.source import SourceMaker, SourceTools, Value
from custom_metrics_server.backends.definitions.state import State
from custom_metrics_server.backends.definitions.status_writer import StatusWriter
from custom_metrics_server.backends.definitions.tick import COALESCE, TICK, Ticker
from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalSample,
    MetricInfo,
    Readiness,
    Sample,
)
from custom_metrics_server.errors import BackendUnavailable
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kube.lease import LeaderElector
from custom_metrics_server.kube.watcher import Reflector
from custom_metrics_server.runtime.tasks import BackgroundTasks
from custom_metrics_server.sdk import external_sample, sample
from custom_metrics_server.sdk.precedence import Precedence

__all__ = ["COLLECTION", "DefinitionsBackend"]

logger = logging.getLogger(__name__)

COLLECTION: Final = "/apis/metrics.custom-metrics-server.io/v1alpha1/metricdefinitions"


class DefinitionsBackend:
    """Metrics defined by `MetricDefinition`s (see the module)."""

    def __init__(
        self,
        client: KubeClient,
        *,
        makers: Mapping[str, SourceMaker],
        platform: Platform,
        tools: SourceTools | None = None,
        name: str = "metric-definitions",
        clock: Callable[[], float] = time.time,
        elector: LeaderElector | None = None,
        write_status: bool = True,
        identity: str = "",
    ) -> None:
        self.name = name
        self.client = client
        self._clock = clock
        self.catalog = Catalog(
            platform,
            makers,
            tools
            or SourceTools(
                client=client,
                external_value=self.external_value,
                namespace_limits=platform.namespace_limits,
            ),
        )
        self.catalog.changed = self._wake
        self.watch = Reflector(client, path=COLLECTION, sink=self.catalog, name=name)
        self.elector = elector
        self.writer: StatusWriter | None = None
        if write_status:
            self.writer = StatusWriter(
                client,
                self.catalog,
                identity=identity,
                leader=None if elector is None else (lambda: elector.is_leader),
                clock=clock,
            )
        self._stack = contextlib.AsyncExitStack()
        self._tasks = BackgroundTasks()
        self._woken = asyncio.Event()
        self.ticker = Ticker(self.catalog, self._values, clock)

    def _wake(self) -> None:
        self._woken.set()

    # -- lifecycle --

    async def __aenter__(self) -> Self:
        if self.elector is not None:  # its first round may fail start-up: before the rest
            await self._stack.enter_async_context(self.elector)
        self._tasks.start(self.watch.run(), name=f"watch-{self.name}")
        self._tasks.start(self._run(), name=f"{self.name}-tick")
        if self.writer is not None:
            self._tasks.start(self.writer.run(), name=f"{self.name}-status")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._tasks.stop()
        sources = list(self.catalog.retired)
        self.catalog.retired.clear()
        sources += [
            state.source
            for state in self.catalog.states.values()
            if state.entered and state.source is not None
        ]
        for source in sources:
            await self.ticker.close(source)
        await self._stack.aclose()
        # What sources share (the watch group, the Prometheus servers' clients), made with them.
        for shared in (self.catalog.tools.watches, *self.catalog.tools.settings.values()):
            close = getattr(shared, "aclose", None)
            if close is not None:
                await close()
        await self.client.aclose()

    def yield_to(self, precedence: Precedence) -> None:
        """The router in force (`sdk.precedence.Yielding`), asked by the tick."""
        self.catalog.precedence = precedence
        self._wake()

    def ready(self) -> Readiness:
        """Ready once the definitions have been listed."""
        return self.watch.readiness()

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:  # a bug: logged, and the next tick tries again
                logger.exception("metric definitions: the tick failed")
            self._woken.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), TICK)
            if self._woken.is_set():
                # Serving does not wait (the catalog made the source at the event); the tick
                # does, so that a burst of events is one tick.
                await asyncio.sleep(COALESCE)

    async def tick(self) -> None:
        """One tick (`tick.Ticker.tick`): O(what changed or is due), after the platform's
        listings are followed (`Catalog.follow_platform`: O(1) while they are unchanged)."""
        self.catalog.follow_platform()
        await self.ticker.tick()

    # -- values --

    def _values(self, state: State, now: float) -> list[Value]:
        """The definition's values now, after maxAge and the failure policy."""
        definition = state.definition
        source = state.source
        values = source.values(now) if source is not None else []
        if definition.max_age is not None:
            values = [value for value in values if now - value.timestamp <= definition.max_age]
        if state.last_error is not None and not values:
            if definition.failure == "last-good" and definition.max_age is not None:
                return [v for v in state.last_good if now - v.timestamp <= definition.max_age]
            if definition.failure == "zero":
                return [Value(0.0, now)]
            raise BackendUnavailable(
                f"metric definition {definition.namespace}/{definition.name}: {state.last_error}"
            )
        return values

    def _serving(self, namespace: str, metric: str) -> State | None:
        return self.catalog.serving.get((namespace, metric))

    def external_value(self, namespace: str, metric: str, now: float) -> float | None:
        """The sum of an External metric's values in `namespace` now (formula inputs)."""
        state = self._serving(namespace, metric)
        if state is None or state.definition.served_as.type != "External":
            return None
        try:
            values = self._external_values(state, now)
        except BackendUnavailable:
            return None
        return math.fsum(value.value for value in values) if values else None

    def _external_values(self, state: State, now: float) -> list[Value]:
        definition = state.definition
        values = self._values(state, now)
        if values and any(value.pod is not None for value in values):
            total = math.fsum(value.value for value in values)
            if definition.served_as.pod_values == "average":
                total /= len(values)
            values = [Value(total, min(value.timestamp for value in values))]
        if not values and definition.absent == "zero":
            values = [Value(0.0, now)]
        return values

    # -- the backend contract --

    def list_metrics(self) -> Collection[MetricInfo]:
        """Pods and Object metrics of the serving definitions."""
        return self.catalog.listing()[0]

    def list_external_metrics(self) -> Collection[str]:
        """External metric names of the serving definitions (of any namespace)."""
        return self.catalog.listing()[1]

    async def fetch_external(self, request: ExternalBackendRequest) -> Sequence[ExternalSample]:
        """The serving definition of the metric in the request's namespace, or nothing."""
        state = self._serving(request.namespace, request.metric)
        if state is None or state.definition.served_as.type != "External":
            return ()
        selector = request.metric_selector
        everything = selector.is_everything()
        return [
            external_sample(request, value.value, labels=value.labels, timestamp=value.timestamp)
            for value in self._external_values(state, self._clock())
            if everything or selector.matches(value.labels)
        ]

    async def fetch(self, request: BackendRequest) -> Sequence[Sample]:
        """Pods: each requested pod's value; Object: its workload's (see the module). The
        definition's values are read once per namespace of the request and grouped by pod:
        O(objects + values)."""
        resource = request.metric.group_resource
        metric = request.metric.metric
        now = self._clock()
        answers: list[Sample] = []
        grouped: dict[str, tuple[State, dict[str, list[Value]], list[Value]] | None] = {}
        for key in request.objects:
            namespace, name = key
            if namespace not in grouped:
                grouped[namespace] = self._grouped(namespace, metric, now)
            found = grouped[namespace]
            if found is None:
                continue
            state, by_pod, owned = found
            served = state.definition.served_as
            if served.type == "Pods" and resource == PODS:
                mine = by_pod.get(name, [])
            elif served.workload == (resource, name):
                mine = owned
            else:
                continue
            if not mine:
                continue
            total = math.fsum(value.value for value in mine)
            if served.type == "Object" and served.pod_values == "average":
                total /= len(mine)
            windows = [value.window for value in mine if value.window]
            answers.append(
                sample(
                    request,
                    key,
                    total,
                    timestamp=min(value.timestamp for value in mine),
                    window=max(1, round(max(windows))) if windows else None,
                )
            )
        return answers

    def _grouped(
        self, namespace: str, metric: str, now: float
    ) -> tuple[State, dict[str, list[Value]], list[Value]] | None:
        """The serving definition of (namespace, metric), its values by pod, and those of its
        described workload's pods. O(values)."""
        state = self._serving(namespace, metric)
        if state is None:
            return None
        workload = state.definition.served_as.workload
        by_pod: dict[str, list[Value]] = {}
        owned: list[Value] = []
        for value in self._values(state, now):
            if value.pod is not None:
                by_pod.setdefault(value.pod, []).append(value)
            if workload is not None and workload in value.workloads:
                owned.append(value)
        return state, by_pod, owned

    async def explain_fetch(
        self, request: BackendRequest | ExternalBackendRequest
    ) -> dict[str, object]:
        """`?explain=1`: the definitions of the metric in the request's namespace, the serving
        one first, each with its state (valid, ready, reason, last value and error). O(the
        namespace's definitions)."""
        if isinstance(request, ExternalBackendRequest):
            namespace, metric = request.namespace, request.metric
        else:
            metric = request.metric.metric
            namespace = request.objects[0][0] if request.objects else ""
        return self.catalog.explain(namespace, metric)

    def definition_states(self) -> list[dict[str, object]]:
        """Every definition's state (explanations, the metric status page, tests)."""
        return [state.describe() for _, state in sorted(self.catalog.states.items())]
