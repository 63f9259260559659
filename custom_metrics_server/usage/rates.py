"""The per-container arithmetic of the usage store (:mod:`.store`), as metrics-server's
storage does it: CPU counters to nanocores over a window in whole nanoseconds, Go's time
comparisons with NaN as the zero time, and a pod's stored entry (a header and 7 floats per
container, a slice of its node's one ``array('d')``) built from its containers' rows and its
old entry, with the fresh-container rule.

Pure: no state, no I/O, no clock. Cost: ``pod_entry`` is O(containers) and is the loop every
scrape runs per pod; the rest is O(1).
"""

from __future__ import annotations

import math
from array import array
from math import isnan
from typing import Final

from custom_metrics_server.kubelet_format.samples import CpuSample
from custom_metrics_server.usage.values import (
    ContainerResourceUsage,
    Rate,
    ResourceUsage,
)

__all__ = [
    "CORES",
    "FRESH_CONTAINER_MIN_AGE",
    "HEADER",
    "MEMORY",
    "NAN",
    "STRIDE",
    "TIME",
    "WINDOW",
    "before",
    "cpu_rate",
    "nanocores",
    "nanos",
    "pod_entry",
    "resource_usage",
    "window_ns",
]

#: metrics-server's freshContainerMinMetricsResolution: a container younger than this at
#: its first sample gets no synthetic previous point (its counter is too noisy).
FRESH_CONTAINER_MIN_AGE: Final = 10.0

NAN: Final = math.nan
# Layout of a pod's array: a header, then 7 floats per container (NaN = absent).
CORES, MEMORY, TIME, WINDOW = 0, 1, 2, 3
HEADER: Final = 4
STRIDE: Final = 7  # cpu, time, start, previous cpu, previous time, previous start, memory


def nanos(seconds: float) -> int:
    """metrics-server's ``uint64(value * 1e9)`` of a CPU counter (truncation)."""
    return int(seconds * 1e9)


def window_ns(later: float, earlier: float) -> int:
    """A window between two timestamps in whole nanoseconds. Kubelet timestamps are
    milliseconds; rounding to microseconds removes float noise and keeps them exact."""
    return round((later - earlier) * 1e6) * 1000


def nanocores(cpu: float, previous_cpu: float, window_ns: int) -> int:
    """``uint64(float64(last - prev) / window.Seconds())``, as upstream."""
    return int((nanos(cpu) - nanos(previous_cpu)) / (window_ns / 1e9))


def cpu_rate(previous: CpuSample, current: CpuSample) -> Rate | None:
    """Cores used between two samples of one counter, or None when their timestamps do not
    advance or the counter went backwards (a reset: metrics-server skips the point and
    the next pair of samples gives a rate again). O(1)."""
    window = current.timestamp - previous.timestamp
    delta = current.seconds_total - previous.seconds_total
    if not (window > 0 and delta >= 0):
        return None
    return Rate(delta / window, current.timestamp, window)


def before(start: float, other: float) -> bool:
    """Go's ``start.Before(other)`` where NaN stands for the zero time (before all else)."""
    if isnan(other):
        return False
    return isnan(start) or start < other


def pod_entry(  # noqa: PLR0915 - the per-container loop of every scrape, kept inline
    names: tuple[str, ...],
    rows: list[int],
    columns: tuple[list[float], list[float], list[float], list[float] | None],
    old: tuple[tuple[str, ...], array[float], int] | None,
    resolution: float,
    *,
    into: list[float],
) -> tuple[str, ...]:
    """Append a pod's stored entry (a header and ``STRIDE`` floats per container) to its
    node's values ``into``, from its containers' rows (``names[i]`` is row ``rows[i]`` of the CPU,
    time, memory and start ``columns``; no start column: the starts stored in ``old``, whose
    names are then ``names``) and its old entry (names, the node's old array, the entry's
    offset in it). Returns the names to store: ``old``'s tuple when equal, so one copy of
    the strings is kept. O(containers)."""
    cpu_column, time_column, memory_column, start_column = columns
    old_offsets: dict[str, int] | None = None
    old_data: array[float] | None = None
    old_base = 0
    if old is not None:
        old_names, old_data, old_base = old
        if old_names == names:
            names = old_names
        else:
            old_offsets = {name: old_base + HEADER + STRIDE * i for i, name in enumerate(old_names)}
    values = into
    base = len(values)
    extend = values.extend
    extend((NAN, NAN, NAN, NAN))
    cores = 0.0
    memory = 0.0
    earliest = math.inf
    window = NAN
    complete = True
    used = 0
    # Memory alone, over every container (a gauge: one sample is enough).
    memory_all = 0.0
    memory_at = math.inf
    offset = old_base + HEADER
    for index, row in enumerate(rows):
        cpu = cpu_column[row]
        when = time_column[row]
        memory_bytes = memory_column[row]
        # Without a start column, the same containers as `old`'s, in the same order.
        start = old_data[offset + 2] if start_column is None else start_column[row]  # type: ignore[index]
        previous_cpu = previous_time = previous_start = NAN
        age = when - start
        if start < when and FRESH_CONTAINER_MIN_AGE <= age < resolution:
            previous_cpu, previous_time, previous_start = 0.0, start, start
        elif old_data is not None:
            at = offset if old_offsets is None else old_offsets.get(names[index], -1)
            if at >= 0:
                last_time = old_data[at + 1]
                if before(start, last_time):  # not restarted since the stored point
                    if when > last_time:
                        previous_cpu, previous_time, previous_start = (
                            old_data[at],
                            last_time,
                            old_data[at + 2],
                        )
                    elif old_data[at + 4] < when:
                        previous_cpu, previous_time, previous_start = (
                            old_data[at + 3],
                            old_data[at + 4],
                            old_data[at + 5],
                        )
        extend((cpu, when, start, previous_cpu, previous_time, previous_start, memory_bytes))
        offset += STRIDE
        memory_all += memory_bytes  # NaN (not reported) stays NaN
        memory_at = min(memory_at, when)
        if isnan(previous_time):
            complete = False
        elif complete and not before(start, previous_start) and cpu >= previous_cpu:
            span = when - previous_time
            cores += (cpu - previous_cpu) / span
            memory += memory_bytes
            used += 1
            if when < earliest:
                earliest, window = when, span
    if complete and used:
        values[base + CORES] = cores
        values[base + MEMORY] = memory
        values[base + TIME] = earliest
        values[base + WINDOW] = window
    elif rows and not isnan(memory_all) and memory_at != math.inf:
        # No CPU rate yet: the header carries the memory alone (CORES and WINDOW stay NaN).
        values[base + MEMORY] = memory_all
        values[base + TIME] = memory_at
    return names


def resource_usage(names: tuple[str, ...], data: array[float], base: int) -> ResourceUsage | None:
    """A pod's per-container usage from its stored entry (at ``base`` in its node's array).
    O(containers)."""
    if isnan(data[base + CORES]):
        return None
    containers: list[ContainerResourceUsage] = []
    earliest = math.inf
    window = 0
    total_cores = total_memory = 0
    offset = base + HEADER
    for name in names:
        cpu, when, start, previous_cpu, previous_time, previous_start, memory = data[
            offset : offset + STRIDE
        ]
        offset += STRIDE
        if before(start, previous_start) or cpu < previous_cpu:
            continue  # skipped by upstream's resourceUsage (and by the pod's sums)
        span = window_ns(when, previous_time)
        if span <= 0:
            continue
        cores = nanocores(cpu, previous_cpu, span)
        containers.append(ContainerResourceUsage(name, cores, int(memory)))
        total_cores += cores
        total_memory += int(memory)
        if when < earliest:
            earliest, window = when, span
    if not containers:
        return None
    return ResourceUsage(earliest, window, tuple(containers), total_cores, total_memory)
