"""The demo's kubelets: a node's container counters as the ``/metrics/resource`` body a kubelet
would serve.

PURE. This module owns :class:`ContainerUsage` (one container's counters, as the simulation
advances them) and :func:`kubelet_exposition`, which turns a node's containers into the
Summary values the node agent also builds (:mod:`..kubelet_format.summary`) and writes them with the
one exact writer (:mod:`..kubelet_format.writer`), so the demo's usage goes through the same
text, reader and rate code as a real cluster's. It must not advance counters (that is
:mod:`.simulated`).

Cost: O(c log c) for a node's c containers (the writer sorts each family).
"""

from __future__ import annotations

from dataclasses import dataclass

from custom_metrics_server.kubelet_format.summary import (
    ContainerStats,
    CpuStats,
    MemoryStats,
    NodeStats,
    PodStats,
    Summary,
)
from custom_metrics_server.kubelet_format.writer import render_resource_metrics

__all__ = ["ContainerUsage", "kubelet_exposition"]


@dataclass(frozen=True, slots=True)
class ContainerUsage:
    """One container's counters as a kubelet reports them."""

    namespace: str
    pod: str
    container: str
    cpu_seconds: float
    memory_bytes: float
    start_time: float


def kubelet_exposition(
    containers: list[ContainerUsage], *, node_cpu_seconds: float, node_memory: float, now: float
) -> bytes:
    """A node's `/metrics/resource` body as its kubelet writes it (`kubelet_format.writer`, the
    node agent's writer): every sample at `now` (whole milliseconds), each container with its
    start time, each pod with its containers' sums. Counters are kept in whole nanoseconds and
    working sets in whole bytes, as the Summary API holds them. O(c log c) for c containers."""
    time_ns = int(now * 1000) * 1_000_000
    by_pod: dict[tuple[str, str], list[ContainerUsage]] = {}
    for usage in containers:
        by_pod.setdefault((usage.namespace, usage.pod), []).append(usage)
    pods = []
    for (namespace, pod), members in by_pod.items():
        cpu = [round(usage.cpu_seconds * 1e9) for usage in members]
        memory = [round(usage.memory_bytes) for usage in members]
        stats = tuple(
            ContainerStats(
                usage.container,
                round(usage.start_time * 1e9),
                CpuStats(nanos, time_ns),
                MemoryStats(working_set, time_ns),
            )
            for usage, nanos, working_set in zip(members, cpu, memory, strict=True)
        )
        pod_cpu, pod_memory = CpuStats(sum(cpu), time_ns), MemoryStats(sum(memory), time_ns)
        pods.append(PodStats(namespace, pod, pod_cpu, pod_memory, None, stats))
    node = NodeStats(
        CpuStats(round(node_cpu_seconds * 1e9), time_ns), MemoryStats(round(node_memory), time_ns)
    )
    return render_resource_metrics(Summary(node, tuple(pods)))
