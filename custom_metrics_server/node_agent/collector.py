"""One collection = CRI stats + host totals -> the kubelet body, shared by concurrent scrapes.

:class:`Collector` runs at most one collection at a time: scrapes that arrive while one is
in flight wait for it and get its body (single flight), and a body younger than
``max_age`` seconds is served again without asking the runtime (default 1 s: a burst of
scrapers costs the runtime one round-trip). When the runtime fails the body is the kubelet's
``resource_scrape_error 1`` (nothing else), so a scraper keeps its last usage instead of
reading "no pods"; when only the host read fails, the node series are left out and the pods
are served. The body is kubelet 1.36's: no ``scrape_error`` family (the kubelet dropped it),
and on a node without swap (the host's ``SwapTotal`` and ``SwapFree`` both 0) a Linux
container the runtime reports no swap for gets the kubelet's zeros (usage 0, limit 0, at its
memory sample's time; its pod's sum too): containerd 1.6 reports no swap at all, while the
kubelet's cAdvisor reads 0. On a node with swap, what the runtime does not report is left
out. :meth:`Collector.usable` is the readiness check: whether the last collection (made now
if it is older than ``max_age``) gave figures.

Self-metrics (own registry, ``/metrics``): collections, their failures by reason, the last
collection's duration, the containers it saw and whether the runtime is up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from custom_metrics_server.kubelet_format.summary import (
    ContainerStats,
    NodeStats,
    PodStats,
    Summary,
    SwapStats,
)
from custom_metrics_server.kubelet_format.writer import render_resource_metrics
from custom_metrics_server.scraping.failure import ScrapeFailure

__all__ = ["Collector", "NodeSource"]

logger = logging.getLogger(__name__)


class NodeSource(Protocol):
    """Where the node's own totals come from (:class:`.host.HostReader`, or a fixed value)."""

    def read(self) -> NodeStats: ...


class Collector:
    """Builds ``/metrics/resource`` bodies from ``pods`` (the CRI) and ``node``."""

    def __init__(
        self,
        pods: Callable[[], Awaitable[tuple[PodStats, ...]]],
        node: NodeSource | None,
        *,
        max_age: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._pods = pods
        self._node = node
        self.max_age = max_age
        self._clock = clock
        self._body: bytes | None = None
        self._body_at = float("-inf")
        self._inflight: asyncio.Future[bytes] | None = None
        self._node_failing = False
        #: why the last collection gave no figures (None: it gave them, or none ran yet)
        self.last_failure: ScrapeFailure | None = None
        self.registry = registry or CollectorRegistry()
        self.collections = Counter(
            "node_agent_collections",
            "Collections of CRI and host stats (one per /metrics/resource scrape at most "
            "every --stats-cache-duration)",
            registry=self.registry,
        )
        self.failures = Counter(
            "node_agent_collection_failures",
            "Collections that failed, by reason (the CRI's status, or host)",
            ["reason"],
            registry=self.registry,
        )
        self.duration = Gauge(
            "node_agent_last_collection_seconds",
            "Duration of the last collection",
            registry=self.registry,
        )
        self.containers = Gauge(
            "node_agent_containers",
            "Running containers in the last successful collection",
            registry=self.registry,
        )
        self.runtime_up = Gauge(
            "node_agent_runtime_up",
            "1 if the last CRI call succeeded, 0 otherwise",
            registry=self.registry,
        )

    async def body(self) -> bytes:
        """The current body: cached, joined to the collection in flight, or a new one."""
        if self._body is not None and self._clock() - self._body_at < self.max_age:
            return self._body
        if self._inflight is None:
            self._inflight = asyncio.ensure_future(self._collect())
            self._inflight.add_done_callback(self._finished)
        return await asyncio.shield(self._inflight)

    async def usable(self) -> ScrapeFailure | None:
        """Why the agent has no figures to serve now (None: it has): the outcome of the last
        collection, made now when the last body is older than ``max_age``."""
        await self.body()
        return self.last_failure

    def _finished(self, _future: asyncio.Future[bytes]) -> None:
        self._inflight = None

    def _read_node(self) -> NodeStats | None:
        if self._node is None:
            return None
        try:
            node = self._node.read()
        except (OSError, ValueError, KeyError) as err:
            self.failures.labels("host").inc()
            if not self._node_failing:
                logger.warning("cannot read the node's totals from the host: %s", err)
            self._node_failing = True
            return None
        self._node_failing = False
        return node

    async def _collect(self) -> bytes:
        started = self._clock()
        self.collections.inc()
        summary: Summary | None
        try:
            pods = await self._pods()
        except ScrapeFailure as err:
            self.failures.labels(err.reason).inc()
            self.runtime_up.set(0)
            self.last_failure = err
            summary = None
        else:
            self.runtime_up.set(1)
            self.last_failure = None
            self.containers.set(sum(len(pod.containers) for pod in pods))
            node = self._read_node()
            if node is not None and _swapless(node):
                pods = tuple(_zero_swap(pod) for pod in pods)
            summary = Summary(node, pods)
        body = render_resource_metrics(summary, legacy_scrape_error=False)
        self._body, self._body_at = body, self._clock()
        self.duration.set(self._body_at - started)
        return body


def _swapless(node: NodeStats) -> bool:
    """Whether the host has no swap at all (none configured: nothing used, nothing free)."""
    swap = node.swap
    return swap is not None and swap.usage_bytes == 0 and swap.available_bytes == 0


def _zero_swap(pod: PodStats) -> PodStats:
    """``pod`` with the kubelet's zero swap for Linux containers the runtime reported none
    for (see the module), and its pod sum. O(containers)."""
    containers: list[ContainerStats] = []
    for each in pod.containers:
        sample = each.memory or each.cpu
        windows = each.memory is not None and each.memory.commit_bytes is not None
        if each.swap is None and sample is not None and not windows:
            each = each._replace(swap=SwapStats(0, 0, sample.time_ns))  # noqa: PLW2901
        containers.append(each)
    swap = pod.swap
    if swap is None:
        swaps = [c.swap for c in containers if c.swap is not None]
        if swaps:
            swap = SwapStats(
                sum(s.usage_bytes or 0 for s in swaps),
                sum(s.available_bytes or 0 for s in swaps),
                swaps[0].time_ns,
            )
    return pod._replace(swap=swap, containers=tuple(containers))
