"""What one kubelet ``/metrics/resource`` body says: the reader's result types.

Plain values, the contract between the reader (:mod:`.rows`, which builds them) and
:mod:`usage.store` (which turns them into rates): columns of container CPU counters, working
sets and start times in the body's order (:class:`UsageRows`), the node's CPU counter and
working set, and the kubelet's own scrape-error flag. Times are Unix seconds. Building them
is the only work here: no parsing, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "CpuSample",
    "MemorySample",
    "NodeSample",
    "PodKey",
    "UsageRows",
]

PodKey = tuple[str, str]
"""(namespace, pod name)."""


class CpuSample(NamedTuple):
    """A cumulative CPU counter: core-seconds used since start, at ``timestamp`` (Unix s)."""

    seconds_total: float
    timestamp: float


class MemorySample(NamedTuple):
    """A working-set reading in bytes at ``timestamp`` (Unix seconds)."""

    bytes: float
    timestamp: float


class NodeSample(NamedTuple):
    """The node's own CPU counter and working set (both complete, or no NodeSample)."""

    cpu: CpuSample
    memory: MemorySample


@dataclass(slots=True)
class UsageRows:
    """What the usage store needs from one body, as columns: one row per complete container
    (metrics-server's rules applied), in the order of the body's CPU series.

    ``layout`` identifies the rows' pods and containers (a fingerprint of their label text,
    or None when the reader did not take one: the store then matches them by name);
    ``pods`` and ``containers`` name each row, and are None when ``layout`` is the one the
    caller said it knows (the rows are then the same pods and containers as in that scrape).
    ``starts`` are the start times (NaN: not reported), None when the start series are byte
    for byte those of the known scrape (``start_layout`` identifies them). ``cpu`` and
    ``times`` are the CPU counters and their timestamps, ``memory`` the working sets.
    """

    layout: tuple[int, int] | None
    pods: list[PodKey] | None
    containers: list[str] | None
    cpu: list[float]
    times: list[float]
    memory: list[float]
    starts: list[float] | None
    start_layout: int | None
    node: NodeSample | None
    scrape_error: bool
