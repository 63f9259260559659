"""The `pods` source: the pods' own `/metrics` of the definition's namespace, on the
`pod-metrics` backend's parts (docs/metric-definitions.md, "Source `pods`").

Per definition: a subscription to the shared list+watch of the Running pods of **its namespace
only** (`watched.RUNNING_PODS`: the collection path `/api/v1/namespaces/<ns>/pods`, one watch
for every definition of the namespace), so no selector, however crafted, reaches a pod of
another namespace; `PodTargets` matches the definition's selector on the client
(`machinery.labels`) and checks the namespace once more (the scrape config's `namespaces`).
The pods become targets at `port` (a number or a container
port's name) and `path`, scraped by `pod_metrics.scraper.PodScraper` on the scraping core
every `interval`, read by the exposition reader into a `SeriesStore`, keeping only the family
`metric`: a gauge as it is, a counter as its per-second rate over the last two scrapes (the
exposition's `# TYPE` says which; a series whose type is not the definition's `type` is not
served). A pod's value is the sum of its series. An Object definition on a Deployment also
subscribes to the namespace's ReplicaSets, for ownership.

Cost: one scraper per definition; the watches are the namespace's, shared (a pod event
O(labels) per definition of the namespace: kube/shared_watches.py); `values` O(pods x series
of the metric per pod).
"""

from __future__ import annotations

import contextlib
import math
from types import TracebackType
from typing import Self

from custom_metrics_server.backends.definitions.source import SourceTools, Value
from custom_metrics_server.backends.definitions.spec import Definition, PodsSpec, Refused
from custom_metrics_server.backends.definitions.watched import (
    REPLICASETS,
    RUNNING_PODS,
    subscriptions,
)
from custom_metrics_server.backends.pod_metrics.config import (
    WORKLOAD_KINDS,
    MetricRule,
    PodMetricsConfig,
    ScrapeConfig,
)
from custom_metrics_server.backends.pod_metrics.scraper import PodScraper
from custom_metrics_server.backends.pod_metrics.series import SeriesStore
from custom_metrics_server.backends.pod_metrics.targets import DEPLOYMENTS, PodTargets
from custom_metrics_server.kube.client import KubeClient

__all__ = ["PodsSource", "make_pods"]


class PodsSource:
    """One definition's pods, scraped (see the module)."""

    def __init__(self, definition: Definition, pods: PodsSpec, tools: SourceTools) -> None:
        client = tools.client
        if not isinstance(client, KubeClient):
            raise TypeError("the pods source needs the server's KubeClient")
        namespace = definition.namespace
        self.namespace = namespace
        self.pods = pods
        self.workload = definition.served_as.workload
        source = tools.settings.get("podSource", "direct")
        interval = definition.interval
        self.config = PodMetricsConfig(
            metrics=(MetricRule(pods.metric),),
            scrape=(
                ScrapeConfig(
                    name=f"{namespace}/{definition.name}",
                    port=pods.port,
                    path=pods.path,
                    namespaces=frozenset({namespace}),
                    selector=pods.selector,
                ),
            ),
            source="proxy" if source == "proxy" else "direct",
            interval=interval,
            timeout=min(tools.scrape_timeout, interval),
            concurrency=8,
            max_body_bytes=tools.max_body_bytes,
            stale_after=3 * interval,
            workloads=tuple(WORKLOAD_KINDS),
        )
        self.pod_targets = PodTargets(self.config)
        self.store = SeriesStore(stale_after=self.config.stale_after)
        name = f"mdef-{namespace}-{definition.name}"
        self.watches = subscriptions(tools, namespace)
        self.watches.add(RUNNING_PODS, self.pod_targets, name=f"{name}-pods")
        if self.workload is not None and self.workload[0] == DEPLOYMENTS:
            self.watches.add(REPLICASETS, self.pod_targets.replicasets, name=f"{name}-replicasets")
        self.scraper = PodScraper(
            self.pod_targets,
            self.store,
            self.config,
            connection=client.connection,
            synced=self._synced,
            name=name,
        )
        self._stack = contextlib.AsyncExitStack()

    async def _synced(self) -> None:
        await self.watches.wait_synced()

    async def __aenter__(self) -> Self:
        await self._stack.enter_async_context(self.watches)
        await self._stack.enter_async_context(self.scraper)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stack.aclose()  # the scraper first, then the subscriptions

    async def refresh(self) -> None:
        """Nothing: the scraper reads on its own cadence (`interval`)."""

    def values(self, now: float) -> list[Value]:
        """One value per scraped pod of the namespace with a served series of the metric.
        O(pods x series of the metric per pod)."""
        members: set[str] | None = None
        if self.workload is not None:
            resource, name = self.workload
            members = {pod for _, pod in self.pod_targets.pods_of(resource, (self.namespace, name))}
        found = []
        metric, counter = self.pods.metric, self.pods.counter
        for key in sorted(self.pod_targets.pods()):
            if key[0] != self.namespace:  # the watch's path already confines it
                continue
            total, count, oldest, window = 0.0, 0, math.inf, 0.0
            for target in self.pod_targets.pod_targets(key):
                for series in self.store.series(target.name, metric, now):
                    if not series.ready or series.counter != counter:
                        continue
                    total += series.value
                    count += 1
                    oldest = min(oldest, series.time)
                    window = max(window, series.window)
            if not count:
                continue
            pod = key[1]
            owners = (
                frozenset({self.workload})
                if self.workload is not None and members is not None and pod in members
                else frozenset()
            )
            found.append(
                Value(
                    total,
                    oldest,
                    {"pod": pod},
                    pod=pod,
                    workloads=owners,
                    window=window or None,
                )
            )
        return found

    def next_change(self, now: float) -> float:
        """`now`: the scraper's reads land on their own cadence, unannounced, so the backend
        reads the values again at every tick (as for any source without `next_change`)."""
        return now

    def targets(self) -> int:
        """Endpoints scraped now (the platform's limit on scrape targets counts them)."""
        return len(self.pod_targets.targets)


def make_pods(definition: Definition, tools: SourceTools) -> PodsSource:
    """The `SourceMaker` of `Pods`."""
    if definition.pods is None:
        raise Refused("InvalidSpec", "spec.source.pods is missing")
    return PodsSource(definition, definition.pods, tools)
