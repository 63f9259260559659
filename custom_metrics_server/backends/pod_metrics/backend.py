"""The `pod-metrics` backend: the watches, the scraper and the store wired together, answering
Pods metrics and Object metrics of the workloads that own the pods.

Values (docs/backends.md, "Pods' own metrics"):

* **a pod**: the sum of its series of the metric that match the request's
  `metricLabelSelector` and have a value now (gauges as they are, counters as rates; the
  series of all its targets), as the resource model sums a metric's series
  (`backends.kubernetes.metrics`); with exactly one series its labels ride along. Its timestamp
  is the oldest summed observation's, its window the longest summed rate's (none for gauges only);
* **a workload** (Deployment, StatefulSet, ReplicaSet, DaemonSet, Job, as `workloads`
  allows): the values of its scraped pods that have one, summed (`workloadValue: sum`, the
  default; an HPA Object metric with `AverageValue` divides by the replicas itself) or
  averaged over those pods (`average`);
* **absent** (no sample, never an error) for a pod that is not scraped, not yet scraped
  (counters: not yet twice), stale, or without a matching series, and for a workload none of
  whose pods has a value. Absent rather than zero: an HPA keeps its scale on a missing metric,
  where a zero would scale it down.

The listing is the metric names actually seen on targets now, per resource: on pods, and on
each workload resource that owns a pod exporting it; recomputed only when a target, an owner
or a target's set of names changed (O(pods x names)), answered from memory otherwise.

Readiness: the first list of the pods (and of the ReplicaSets, when Deployments are served)
has synced and the first scrape round has ended (whatever it found), so a new replica joins
its Service with the gauges of every answering pod already in memory (counters need a second
round, one interval later) and, during a rollout, the old replica answers meanwhile.

Cost of `fetch`: O(objects x pods held x series of the metric per pod).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from types import TracebackType
from typing import Self

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from custom_metrics_server.backends.pod_metrics.config import PodMetricsConfig
from custom_metrics_server.backends.pod_metrics.scraper import PodScraper
from custom_metrics_server.backends.pod_metrics.series import SeriesStore
from custom_metrics_server.backends.pod_metrics.targets import PODS, PodTargets
from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalSample,
    GroupResource,
    MetricInfo,
    ObjectKey,
    Readiness,
    Sample,
)
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kube.watcher import Reflector
from custom_metrics_server.machinery.labels import Selector
from custom_metrics_server.runtime.tasks import BackgroundTasks
from custom_metrics_server.sdk import sample

__all__ = ["PodMetricsBackend"]

logger = logging.getLogger(__name__)

#: (value, timestamp, window seconds or 0, labels of a single series or None)
_Value = tuple[float, float, float, dict[str, str] | None]


class PodMetricsBackend:
    """Pods' own `/metrics` as custom metrics (see the module)."""

    def __init__(
        self,
        config: PodMetricsConfig,
        client: KubeClient,
        *,
        name: str = "pod-metrics",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.config = config
        self.client = client
        self._clock = clock
        self.targets = PodTargets(config)
        self.store = SeriesStore(stale_after=config.stale_after)
        label_selector = ""
        if len(config.scrape) == 1 and config.annotations is None:
            label_selector = str(config.scrape[0].selector)
        pods = Reflector(
            client,
            path="/api/v1/pods",
            sink=self.targets,
            name=f"{name}-pods",
            label_selector=label_selector,
            field_selector="status.phase=Running",
            page_size=config.watch_page_size,
        )
        self.watches = [pods]
        if "deployments" in config.workloads:
            self.watches.append(
                Reflector(
                    client,
                    path="/apis/apps/v1/replicasets",
                    sink=self.targets.replicasets,
                    name=f"{name}-replicasets",
                    page_size=config.watch_page_size,
                )
            )
        self.scraper = PodScraper(
            self.targets,
            self.store,
            config,
            connection=client.connection,
            synced=self._synced,
            clock=clock,
            name=name,
        )
        self._tasks = BackgroundTasks()
        self._stack = contextlib.AsyncExitStack()
        self._listing: frozenset[MetricInfo] = frozenset()
        self._listed_at: tuple[int, int] | None = None

    async def _synced(self) -> None:
        for watch in self.watches:
            await watch.wait_synced()

    # -- lifecycle --

    async def __aenter__(self) -> Self:
        for watch in self.watches:
            self._tasks.start(watch.run(), name=f"watch-{watch.name}")
        await self._stack.enter_async_context(self.scraper)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._tasks.stop()
        await self._stack.aclose()
        await self.client.aclose()

    def ready(self) -> Readiness:
        """Ready once the watches listed and the first round ended; the reason names what is
        missing (or, once ready, that no pod answered the first round)."""
        waiting = [watch for watch in self.watches if not watch.readiness().ready]
        if waiting:
            reasons = "; ".join(f"{w.name}: {w.readiness().reason}" for w in waiting)
            return Readiness(False, reasons)
        return self.scraper.readiness()

    # -- listings --

    def list_metrics(self) -> Collection[MetricInfo]:
        """The names seen on targets now, per resource (see the module)."""
        stamp = (self.targets.generation, self.store.generation)
        if stamp != self._listed_at:
            self._listed_at = stamp
            self._listing = self._compute_listing()
        return self._listing

    def _compute_listing(self) -> frozenset[MetricInfo]:
        now = self._clock()
        found: set[MetricInfo] = set()
        targets, store = self.targets, self.store
        for pod in targets.pods():
            names: set[str] = set()
            for target in targets.pod_targets(pod):
                names.update(store.names(target.name, now))
            if not names:
                continue
            for resource in (PODS, *targets.workloads_of(pod)):
                found.update(MetricInfo(resource, True, name) for name in names)
        return frozenset(found)

    def list_external_metrics(self) -> Collection[str]:
        """No external metrics."""
        return ()

    async def fetch_external(self, request: ExternalBackendRequest) -> Sequence[ExternalSample]:
        """No external metrics."""
        return ()

    # -- values --

    async def fetch(self, request: BackendRequest) -> Sequence[Sample]:
        """A sample per requested object that has a value (see the module)."""
        resource = request.metric.group_resource
        metric = request.metric.metric
        selector = request.metric_selector
        now = self._clock()
        answers: list[Sample] = []
        for key in request.objects:
            found = (
                self.pod_value(key, metric, selector, now)
                if resource == PODS
                else self.workload_value(resource, key, metric, selector, now)
            )
            if found is None:
                continue
            value, timestamp, window, labels = found
            answers.append(
                sample(
                    request,
                    key,
                    value,
                    timestamp=timestamp,
                    window=max(1, round(window)) if window else None,
                    labels=labels,
                )
            )
        return answers

    def pod_value(
        self, key: ObjectKey, metric: str, selector: Selector, now: float
    ) -> _Value | None:
        """One pod's value of `metric` (see the module), or None."""
        total = 0.0
        count = 0
        oldest = math.inf
        window = 0.0
        labels = None
        everything = selector.is_everything()
        for target in self.targets.pod_targets(key):
            for series in self.store.series(target.name, metric, now):
                if not series.ready or (not everything and not selector.matches(series.labels)):
                    continue
                total += series.value
                count += 1
                oldest = min(oldest, series.time)
                window = max(window, series.window)
                labels = series.labels
        if not count:
            return None
        return total, oldest, window, dict(labels) if count == 1 and labels else None

    def workload_value(
        self,
        resource: GroupResource,
        key: ObjectKey,
        metric: str,
        selector: Selector,
        now: float,
    ) -> _Value | None:
        """A workload's value: its scraped pods' values summed or averaged, or None."""
        values = [
            found
            for pod in self.targets.pods_of(resource, key)
            if (found := self.pod_value(pod, metric, selector, now)) is not None
        ]
        if not values:
            return None
        total = math.fsum(value for value, _, _, _ in values)
        if self.config.workload_value == "average":
            total /= len(values)
        oldest = min(timestamp for _, timestamp, _, _ in values)
        window = max(window for _, _, window, _ in values)
        return total, oldest, window, None

    # -- self-metrics --

    def collector(self) -> Collector:
        """The scraper's self-metrics for the server's `/metrics`."""
        return _Collector(self)


class _Collector(Collector):
    """`custom_metrics_server_pod_scrape_*`, labelled by backend, read at scrape time."""

    def __init__(self, backend: PodMetricsBackend) -> None:
        self._backend = backend

    def collect(self) -> Iterator[Metric]:
        backend = self._backend
        stats = backend.scraper.stats()
        name = [backend.name]

        def gauge(suffix: str, documentation: str, value: float) -> Metric:
            family = GaugeMetricFamily(
                f"custom_metrics_server_pod_scrape_{suffix}", documentation, labels=["backend"]
            )
            family.add_metric(name, value)
            return family

        def counter(suffix: str, documentation: str, value: float) -> Metric:
            family = CounterMetricFamily(
                f"custom_metrics_server_pod_scrape_{suffix}", documentation, labels=["backend"]
            )
            family.add_metric(name, value)
            return family

        yield counter("rounds", "Pod scrape rounds completed.", stats.rounds_completed)
        yield counter("rounds_overrun", "Rounds that ran past the next tick.", stats.rounds_overrun)
        yield counter("deferred", "Scrapes left for the next round.", stats.deferred)
        yield counter("requests", "Pod scrapes attempted.", stats.scrapes)
        failures = CounterMetricFamily(
            "custom_metrics_server_pod_scrape_failures",
            "Failed pod scrapes by reason.",
            labels=["backend", "reason"],
        )
        for reason, count in sorted(stats.failures_by_reason.items()):
            failures.add_metric([backend.name, reason], count)
        yield failures
        yield gauge("targets", "Pod endpoints scraped.", stats.targets)
        yield gauge("targets_failing", "Targets whose last scrape failed.", stats.targets_failing)
        yield gauge("in_flight", "Scrapes running now.", stats.in_flight)
        store = backend.scraper.store
        yield gauge("series", "Series kept (the store's size).", store.series_count())
        yield counter(
            "series_dropped",
            "Selected series dropped past maxSeriesPerTarget.",
            store.dropped_series,
        )
        if stats.last_round_seconds is not None:
            yield gauge(
                "last_round_seconds", "Duration of the last round.", stats.last_round_seconds
            )
