"""CPU and memory usage from successive kubelet scrapes: the rate code.

This module owns :class:`UsageStore`, which keeps per node the last two points of every
container and of the node itself and publishes pod and node usage (values of
:mod:`.values`); the arithmetic of one container's points and of one pod's stored entry
is :mod:`.rates`'s. Together they follow
metrics-server's storage (``pkg/storage/pod.go``, ``node.go``, ``types.go``):

* a rate is ``delta(cpu seconds) / delta(its own timestamps)``; the window is that span and
  the usage's timestamp the later sample's time;
* a new point replaces the stored one; the stored one becomes the previous point when the
  new one is later, else the older previous point is kept if it is still earlier than the
  new one (a kubelet answering from its cache does not shorten the window to zero);
* a container whose start time is not before the stored point's timestamp has restarted:
  its history is dropped. A container that started less than one metric resolution (but at
  least 10 s) before its sample gets a synthetic previous point (0 s of CPU at its start
  time), so young containers have usage after one scrape;
* a pod has usage once *every* container of its latest scrape has a previous point (its
  memory alone, ``pod_memory``, from the first scrape: a gauge needs no rate); a
  container whose counter went backwards (or whose start time went back) is left out of
  the sums, as upstream skips it; a pod left with no container has no usage;
* the pod's timestamp and window are those of its container with the earliest timestamp.

Deviations, on inputs that upstream mishandles: a previous point is never fabricated for a
container missing from the previous pod point (upstream's zero-value lookup gives a window
back to year 1), and a pod whose every container is skipped has no usage instead of an
empty one.

It must not do I/O, parse text, read clocks (callers pass ``now``) or log; it is not
thread-safe (call it from one thread, the event loop). Storage is compact: per node one
``array('d')`` holding every pod's entry (4 + 7 per container floats), and per pod a tuple of
its container names and its entry's offset; no sample objects. A scrape replaces the node's
array and, when the node's pods and containers are those of its last scrape, nothing else:
per-pod arrays (tracked by the cyclic GC since Python 3.10) and their tuples, replaced on
every scrape, kept the young generation at 20,000-80,000 objects at 150,000 pods, and every
collection walked them on the event loop.

The scraper feeds it :class:`~kubelet_format.samples.UsageRows` (``apply_rows``): columns in
the body's order and, when the node's pods are those of its last scrape (the store tells the
reader what it knows with ``known``), no keys or names at all.

Cost: ``UsageStore.apply_rows`` is O(containers in the scrape + pods the node had); every lookup
is O(1).

One piece (about 430 lines, over the house's 400): the write side (``apply_rows`` and the
per-node bookkeeping) and the read side share the private per-node state and the packed
entry layout of :mod:`.rates`; split, either half would have to reach into the other's
privates. The arithmetic already lives in :mod:`.rates` and :mod:`.values`.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from math import isnan
from sys import intern

from custom_metrics_server.kubelet_format.samples import (
    CpuSample,
    NodeSample,
    PodKey,
    UsageRows,
)
from custom_metrics_server.machinery.journal import Journal
from custom_metrics_server.usage.rates import (
    CORES,
    FRESH_CONTAINER_MIN_AGE,
    HEADER,
    MEMORY,
    TIME,
    WINDOW,
    cpu_rate,
    nanocores,
    pod_entry,
    resource_usage,
    window_ns,
)
from custom_metrics_server.usage.values import (
    MemoryUsage,
    NodeUsage,
    PodUsage,
    ResourceUsage,
)

__all__ = ["FRESH_CONTAINER_MIN_AGE", "StoreStats", "UsageStore", "cpu_rate"]


class _NodeState:
    """One node's stored points: last and previous node points, and its pods."""

    __slots__ = ("data", "last", "layout", "order", "pods", "previous", "start_layout", "usage")

    def __init__(self) -> None:
        self.last: tuple[float, float, float] | None = None  # cpu, time, memory
        self.previous: tuple[float, float] | None = None  # cpu, time
        self.usage: NodeUsage | None = None
        # pod -> (its container names, its entry's offset in `data`)
        self.pods: dict[PodKey, tuple[tuple[str, ...], int]] = {}
        self.data: array[float] = array("d")
        # The last rows' layout (UsageRows.layout, start_layout) and, for each pod of `pods`
        # in order and each of its containers in order, the row it came from.
        self.layout: tuple[int, int] | None = None
        self.start_layout: int | None = None
        self.order: list[int] = []


@dataclass(frozen=True, slots=True)
class StoreStats:
    """Sizes for self-metrics."""

    nodes: int
    pods: int
    pods_with_usage: int
    generation: int


class UsageStore:
    """Per-node usage state fed by kubelet scrapes; lookups by pod and node.

    ``apply_rows`` is O(containers in the scrape + pods the node had); every lookup is O(1).
    ``generation`` increases whenever a published value (or the set of pods or nodes with
    usage) changes, so owners can cache what they derive from it.
    """

    def __init__(
        self,
        *,
        metric_resolution: float = 15.0,
        pod_key: Callable[[PodKey], PodKey] | None = None,
    ) -> None:
        self.metric_resolution = metric_resolution
        # The key a pod new to a node is stored under: another index's strings for the same
        # pod (`ClusterState.pod_key`), so the store's 150,000 pod names are not copies
        # (~10 MiB); the namespace is interned either way.
        self._pod_key = pod_key
        self._nodes: dict[str, _NodeState] = {}
        # node -> the `now` of its last apply (`last_seen`, `seen_by_node`, `expire`): one
        # dict, read in C by the list answers.
        self._seen: dict[str, float] = {}
        #: The nodes whose `last_seen` moved (applied or forgotten), in order (`journal`).
        self.node_journal: Journal[str] = Journal()
        self._pod_node: dict[PodKey, str] = {}
        self._generation = 0
        # pod -> (its node's array, the ResourceUsage derived from it): memoised per array,
        # which `apply` replaces whenever the pod's node is scraped.
        self._resource_usage: dict[PodKey, tuple[array[float], ResourceUsage | None]] = {}

    @property
    def generation(self) -> int:
        """Increases on every change of a published value."""
        return self._generation

    # -- writes --

    def known(self, node: str) -> tuple[tuple[int, int] | None, int | None] | None:
        """The ``layout`` and ``start_layout`` of the rows last applied for ``node`` (what
        :func:`~kubelet_format.rows.read_usage_rows` takes as ``known``), None for a node without
        state. O(1)."""
        state = self._nodes.get(node)
        return None if state is None else (state.layout, state.start_layout)

    def apply_rows(self, node: str, rows: UsageRows, now: float) -> None:
        """Take ``rows`` as ``node``'s current state (pods it no longer lists are gone) and
        record ``now`` as the node's last answer. Callers skip rows whose ``scrape_error`` is
        set: they carry no usage. ``rows`` without ``pods`` are the pods and containers of
        the rows last applied for ``node`` (the reader was given :meth:`known`), and rows
        without ``starts`` have the start times stored. O(containers + previous pods); no
        key or name is built when the layout is unchanged."""
        state = self._nodes.get(node)
        if state is None:
            state = self._nodes[node] = _NodeState()
        self._seen[node] = now
        self.node_journal.append(node)
        changed = self._apply_node(state, rows.node)
        if rows.pods is None or rows.containers is None:
            changed = self._same_pods(state, rows) or changed
            # The last node to report a pod has it (another may have reported it since).
            self._pod_node.update(dict.fromkeys(state.pods, node))
        else:
            changed = self._new_pods(node, state, rows) or changed
        state.layout = rows.layout
        state.start_layout = rows.start_layout
        if changed:
            self._generation += 1

    def _same_pods(self, state: _NodeState, rows: UsageRows) -> bool:
        """Apply rows whose pods and containers are those of the node's last rows (the pods,
        their names and their offsets stay); whether a published value changed.
        O(containers)."""
        old_data = state.data
        values: list[float] = []
        resolution = self.metric_resolution
        columns = (rows.cpu, rows.times, rows.memory, rows.starts)
        order = state.order
        at = 0
        for names, base in state.pods.values():
            count = len(names)
            old = (names, old_data, base)
            pod_entry(names, order[at : at + count], columns, old, resolution, into=values)
            at += count
        state.data = array("d", values)
        return _published_changed(state.pods, old_data, state.pods, state.data)

    def _new_pods(self, node: str, state: _NodeState, rows: UsageRows) -> bool:
        """Apply rows that name their pods and containers; whether a published value (or
        the set of pods with usage) changed. O(containers + previous pods)."""
        pods, containers, starts = rows.pods, rows.containers, rows.starts
        if pods is None or containers is None or starts is None:
            raise ValueError("rows that name their pods need their containers and start times")
        old_pods, old_data = state.pods, state.data
        new_pods: dict[PodKey, tuple[tuple[str, ...], int]] = {}
        values: list[float] = []
        resolution = self.metric_resolution
        columns = (rows.cpu, rows.times, rows.memory, starts)
        by_pod: dict[PodKey, list[int]] = {}
        for row, key in enumerate(pods):
            found = by_pod.get(key)
            if found is None:
                by_pod[key] = [row]
            else:
                found.append(row)
        order: list[int] = []
        for parsed, row_list in by_pod.items():
            # One string per container name and namespace, whatever the number of pods.
            names = tuple([intern(containers[row]) for row in row_list])
            key = (intern(parsed[0]), parsed[1])
            if self._pod_key is not None:
                key = self._pod_key(key)
            old = old_pods.get(key)
            base = len(values)
            names = pod_entry(
                names,
                row_list,
                columns,
                None if old is None else (old[0], old_data, old[1]),
                resolution,
                into=values,
            )
            order.extend(row_list)
            new_pods[key] = (names, base)
        data = array("d", values)
        changed = _published_changed(old_pods, old_data, new_pods, data)
        index = self._pod_node
        for key in old_pods.keys() - new_pods.keys():
            changed = changed or not isnan(old_data[old_pods[key][1] + CORES])
            if index.get(key) == node:
                del index[key]
        for key in new_pods:
            index[key] = node
        state.pods = new_pods
        state.data = data
        state.order = order
        return changed

    def _apply_node(self, state: _NodeState, sample: NodeSample | None) -> bool:
        old_usage = state.usage
        if sample is None:
            state.last = state.previous = None
            state.usage = None
            return old_usage is not None
        cpu, when = sample.cpu
        memory = sample.memory.bytes
        previous: tuple[float, float] | None = None
        last = state.last
        if last is not None:
            if when > last[1]:
                previous = (last[0], last[1])
            elif state.previous is not None and state.previous[1] < when:
                previous = state.previous
        state.last = (cpu, when, memory)
        state.previous = previous
        usage = None
        if previous is not None:
            rate = cpu_rate(CpuSample(*previous), CpuSample(cpu, when))
            if rate is not None:
                usage = NodeUsage(rate.cores, memory, rate.timestamp, rate.window)
        state.usage = usage
        return usage != old_usage

    def forget_node(self, node: str) -> bool:
        """Drop everything known about ``node``; False if it was unknown. O(its pods)."""
        state = self._nodes.pop(node, None)
        if state is None:
            return False
        del self._seen[node]
        self.node_journal.append(node)
        index = self._pod_node
        for key in state.pods:
            if index.get(key) == node:
                del index[key]
        self._generation += 1
        return True

    def expire(self, now: float, max_age: float) -> list[str]:
        """Forget the nodes whose last answer is older than ``max_age`` seconds; returns
        their names. O(nodes + their pods)."""
        cutoff = now - max_age
        stale = [name for name, seen in self._seen.items() if seen < cutoff]
        for name in stale:
            self.forget_node(name)
        return stale

    # -- reads --

    def pod_usage(self, namespace: str, pod: str) -> PodUsage | None:
        """The pod's usage, or None until every container has two samples. O(1)."""
        key = (namespace, pod)
        node = self._pod_node.get(key)
        if node is None:
            return None
        state = self._nodes[node]
        base = state.pods[key][1]
        data = state.data
        cores = data[base + CORES]
        if isnan(cores):
            return None
        return PodUsage(cores, data[base + MEMORY], data[base + TIME], data[base + WINDOW])

    def pod_memory(self, namespace: str, pod: str) -> MemoryUsage | None:
        """The pod's working set (the sum over its containers) and its earliest sample's
        time, from its first scrape on: no CPU rate is needed for it. When the pod has usage
        (:meth:`pod_usage`), the same memory as there. None while a container's memory is
        not reported. O(1)."""
        key = (namespace, pod)
        node = self._pod_node.get(key)
        if node is None:
            return None
        state = self._nodes[node]
        base = state.pods[key][1]
        data = state.data
        memory = data[base + MEMORY]
        if isnan(memory):
            return None
        return MemoryUsage(memory, data[base + TIME])

    def pod_resource_usage(self, namespace: str, pod: str) -> ResourceUsage | None:
        """The pod's usage per container, for the Resource Metrics API (``PodMetrics``):
        None until every container has two samples (``pod_usage`` is None then too). A
        container left out of the pod's sums (counter or start time went back) is left out
        here. Timestamp and window are those of the container with the earliest timestamp.
        O(containers) after each scrape of the pod's node, then O(1) (memoised; the same
        object is returned until the node is scraped again)."""
        key = (namespace, pod)
        node = self._pod_node.get(key)
        if node is None:
            return None
        state = self._nodes[node]
        names, base = state.pods[key]
        data = state.data
        cache = self._resource_usage
        cached = cache.get(key)
        if cached is not None and cached[0] is data:
            return cached[1]
        if len(cache) > 2 * len(self._pod_node) + 1024:
            cache.clear()  # pods that went away
        found = cache[key] = (data, resource_usage(names, data, base))
        return found[1]

    def node_resource_usage(self, node: str) -> ResourceUsage | None:
        """The node's own usage for the Resource Metrics API (``NodeMetrics``), None until
        it has two samples. O(1)."""
        state = self._nodes.get(node)
        if state is None or state.usage is None or state.last is None or state.previous is None:
            return None
        cpu, when, memory = state.last
        previous_cpu, previous_time = state.previous
        span = window_ns(when, previous_time)
        if span <= 0:
            return None
        return ResourceUsage(when, span, (), nanocores(cpu, previous_cpu, span), int(memory))

    def pod_node(self, namespace: str, pod: str) -> str | None:
        """The node whose kubelet last reported the pod. O(1)."""
        return self._pod_node.get((namespace, pod))

    def node_usage(self, node: str) -> NodeUsage | None:
        """The node's own usage, or None until it has two samples. O(1)."""
        state = self._nodes.get(node)
        return None if state is None else state.usage

    def last_seen(self, node: str) -> float | None:
        """When ``node`` last answered (the ``now`` of its last apply). O(1)."""
        return self._seen.get(node)

    @property
    def seen_by_node(self) -> Mapping[str, float]:
        """:meth:`last_seen` of every node with state: the store's own dict, for reading only
        (its ``get`` is mapped over thousands of pods' nodes in C; a ``MappingProxyType``
        doubles that cost). O(1)."""
        return self._seen

    def nodes(self) -> list[str]:
        """Names of the nodes with state. O(nodes)."""
        return list(self._nodes)

    def pod_usages(self) -> Iterator[tuple[PodKey, PodUsage]]:
        """Every pod with usage. O(pods) for the whole walk; do not apply meanwhile."""
        index = self._pod_node
        for node, state in self._nodes.items():
            data = state.data
            for key, (_, base) in state.pods.items():
                cores = data[base + CORES]
                if not isnan(cores) and index.get(key) == node:
                    yield (
                        key,
                        PodUsage(
                            cores, data[base + MEMORY], data[base + TIME], data[base + WINDOW]
                        ),
                    )

    def stats(self) -> StoreStats:
        """Sizes for self-metrics. O(pods)."""
        with_usage = sum(1 for _ in self.pod_usages())
        return StoreStats(len(self._nodes), len(self._pod_node), with_usage, self._generation)


def _published_changed(
    old_pods: Mapping[PodKey, tuple[tuple[str, ...], int]],
    old_data: array[float],
    new_pods: Mapping[PodKey, tuple[tuple[str, ...], int]],
    data: array[float],
) -> bool:
    """Whether a pod of ``new_pods`` publishes another value than it did in ``old_pods``
    (a pod new with usage included). Compares bytes, so that "no usage" (NaN) equals "no
    usage". O(pods) at worst; a scrape usually changes the first pod it compares."""
    for key, (_, base) in new_pods.items():
        old = old_pods.get(key)
        if old is None:
            if not isnan(data[base + CORES]):
                return True
        elif old_data[old[1] : old[1] + HEADER].tobytes() != data[base : base + HEADER].tobytes():
            return True
    return False
