"""What resource usage is, for every source and consumer: the values of rates and usage.

PURE: data only. This module owns the value types the usage sources produce (the kubelet
store of :mod:`.store`, Prometheus's `resourceRules` in :mod:`..prometheus.usage`, the demo)
and the APIs read (:mod:`metrics_api.responses`, the KEP-1748 metrics): :class:`Rate`,
:class:`PodUsage`, :class:`MemoryUsage`, :class:`NodeUsage`, :class:`ContainerResourceUsage` and
:class:`ResourceUsage`. They are ``NamedTuple``\\s (built from C, compared and hashed in C).
It must not compute anything.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "ContainerResourceUsage",
    "MemoryUsage",
    "NodeUsage",
    "PodUsage",
    "Rate",
    "ResourceUsage",
]


class Rate(NamedTuple):
    """CPU usage between two samples: ``cores`` over ``window`` seconds ending at
    ``timestamp`` (Unix seconds)."""

    cores: float
    timestamp: float
    window: float


class PodUsage(NamedTuple):
    """A pod's usage: the sum over its containers of CPU cores and working-set bytes."""

    cpu_cores: float
    memory_bytes: float
    timestamp: float
    window: float


class MemoryUsage(NamedTuple):
    """A pod's working set alone (the sum over its containers), known after one sample:
    memory is a gauge, only CPU needs a second sample for a rate."""

    memory_bytes: float
    timestamp: float


class NodeUsage(NamedTuple):
    """A node's own usage (the node cgroup, not the sum of its pods)."""

    cpu_cores: float
    memory_bytes: float
    timestamp: float
    window: float


class ContainerResourceUsage(NamedTuple):
    """One container's usage as metrics-server's ``resourceUsage`` computes it: whole
    nanocores (``uint64`` truncation of nanocore-seconds over the window) and whole bytes."""

    name: str
    nanocores: int
    memory_bytes: int


class ResourceUsage(NamedTuple):
    """A pod's per-container usage, or a node's (``containers`` empty, totals set), for the
    Resource Metrics API: ``timestamp`` in Unix seconds, ``window_ns`` in nanoseconds."""

    timestamp: float
    window_ns: int
    containers: tuple[ContainerResourceUsage, ...]
    nanocores: int
    memory_bytes: int
