"""What one kubelet ``/metrics/resource`` body says: the reader's result types.

Plain values, the contract between the readers (which build them) and :mod:`usage.store` (which
turns them into rates): node, pod and container CPU counters and working sets, container
start times, and the kubelet's own scrape-error flag. Times are Unix seconds. Two shapes:
:class:`ResourceScrape` (:mod:`.reader`: every pod and container as objects, for
tests, the demo and any body) and :class:`UsageRows` (:mod:`.rows`, the scraper's:
columns of floats in the body's order and, only when they changed since the node's last
scrape, the pods and containers the rows are). Building them is the only work here: no
parsing, no I/O.

They are ``NamedTuple``\\s, not dataclasses, so the reader builds a run of samples from C:
a frozen slotted dataclass's ``__init__`` alone would spend half a round's parse budget
(docs/performance.md, "Reading kubelet text"); for the same reason
:class:`ContainerSample` is flat.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "ContainerSample",
    "CpuSample",
    "MemorySample",
    "NodeSample",
    "PodKey",
    "PodSample",
    "ResourceScrape",
    "UsageRows",
    "rows_of",
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


class ContainerSample(NamedTuple):
    """One container's complete sample; ``start_time`` (Unix s) is None when not reported.

    Flat (five floats) so the parser builds it in one step from C; :attr:`cpu` and
    :attr:`memory` give the two samples as :class:`CpuSample` and :class:`MemorySample`.
    """

    cpu_seconds_total: float
    cpu_timestamp: float
    memory_bytes: float
    memory_timestamp: float
    start_time: float | None

    @classmethod
    def of(cls, cpu: CpuSample, memory: MemorySample, start_time: float | None) -> ContainerSample:
        """Build from the two samples."""
        return cls(cpu[0], cpu[1], memory[0], memory[1], start_time)

    @property
    def cpu(self) -> CpuSample:
        """The cumulative CPU counter."""
        return CpuSample(self[0], self[1])

    @property
    def memory(self) -> MemorySample:
        """The working set."""
        return MemorySample(self[2], self[3])


class PodSample(NamedTuple):
    """One pod: its containers (empty when metrics-server would drop them) and the pod-level
    counter and working set (None when absent or incomplete)."""

    cpu: CpuSample | None
    memory: MemorySample | None
    containers: dict[str, ContainerSample]


class NodeSample(NamedTuple):
    """The node's own CPU counter and working set (both complete, or no NodeSample)."""

    cpu: CpuSample
    memory: MemorySample


@dataclass(frozen=True, slots=True)
class ResourceScrape:
    """What one kubelet ``/metrics/resource`` body says.

    ``pods`` holds every pod with complete containers or a complete pod-level sample;
    ``scrape_error`` is the kubelet's own flag (its summary provider failed, so the body
    holds no usage and must not be read as "everything stopped").
    """

    node: NodeSample | None
    pods: dict[PodKey, PodSample]
    scrape_error: bool


@dataclass(slots=True)
class UsageRows:
    """What the usage store needs from one body, as columns: one row per complete container
    (metrics-server's rules applied), in the order of the body's CPU series.

    ``layout`` identifies the rows' pods and containers (a fingerprint of their label text,
    or None when they come from a :class:`ResourceScrape`); ``pods`` and ``containers`` name
    each row, and are None when ``layout`` is the one the caller said it knows (the rows are
    then the same pods and containers as in that scrape). ``starts`` are the start times (NaN:
    not reported), None when the start series are byte for byte those of the known scrape
    (``start_layout`` identifies them). ``cpu`` and ``times`` are the CPU counters and their
    timestamps, ``memory`` the working sets.
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


def rows_of(scrape: ResourceScrape) -> UsageRows:
    """The rows of a fully decoded scrape (every pod's complete containers, in its order);
    no layout, so the store matches them by name. O(containers)."""
    pods: list[PodKey] = []
    containers: list[str] = []
    cpu: list[float] = []
    times: list[float] = []
    memory: list[float] = []
    starts: list[float] = []
    for key, pod in scrape.pods.items():
        for name, sample in pod.containers.items():
            pods.append(key)
            containers.append(name)
            cpu.append(sample[0])
            times.append(sample[1])
            memory.append(sample[2])
            start = sample[4]
            starts.append(math.nan if start is None else start)
    return UsageRows(
        layout=None,
        pods=pods,
        containers=containers,
        cpu=cpu,
        times=times,
        memory=memory,
        starts=starts,
        start_layout=None,
        node=scrape.node,
        scrape_error=scrape.scrape_error,
    )
