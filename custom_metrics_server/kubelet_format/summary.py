"""What one collection of resource stats says: the subset of the kubelet's Summary API
(``k8s.io/kubelet/pkg/apis/stats/v1alpha1``) that its ``/metrics/resource`` collector reads.

Plain immutable values with integer nanosecond timestamps and integer counters, exactly as
the CRI reports them; ``None`` is "not reported" (the Summary API's nil pointers). Building
them is the only work here: no I/O, no formatting. The node agent builds them from the CRI and
the host, the demo from its simulated counters; :mod:`.writer` writes them.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "ContainerStats",
    "CpuStats",
    "MemoryStats",
    "NodeStats",
    "PodStats",
    "Summary",
    "SwapStats",
]


class CpuStats(NamedTuple):
    """Cumulative CPU time (core-nanoseconds) at ``time_ns`` (Unix nanoseconds)."""

    usage_core_nanoseconds: int | None
    time_ns: int


class MemoryStats(NamedTuple):
    """Working set (and, on Windows, committed memory) in bytes at ``time_ns``."""

    working_set_bytes: int | None
    time_ns: int
    commit_bytes: int | None = None


class SwapStats(NamedTuple):
    """Swap usage and what is left of the limit, in bytes, at ``time_ns``."""

    usage_bytes: int | None
    available_bytes: int | None
    time_ns: int


class ContainerStats(NamedTuple):
    """One container; ``start_time_ns`` is the runtime's creation time (None: unknown)."""

    name: str
    start_time_ns: int | None
    cpu: CpuStats | None
    memory: MemoryStats | None
    swap: SwapStats | None = None


class PodStats(NamedTuple):
    """One pod: its own cgroup's stats and its containers'."""

    namespace: str
    name: str
    cpu: CpuStats | None
    memory: MemoryStats | None
    swap: SwapStats | None
    containers: tuple[ContainerStats, ...]


class NodeStats(NamedTuple):
    """The node's own totals (the root cgroup, not the sum of its pods)."""

    cpu: CpuStats | None
    memory: MemoryStats | None
    swap: SwapStats | None = None


class Summary(NamedTuple):
    """One collection: the node (None: not read) and every pod."""

    node: NodeStats | None
    pods: tuple[PodStats, ...]
