"""The kubelet reader: a ``/metrics/resource`` body to a :class:`~.samples.ResourceScrape`,
by metrics-server's rules.

PURE: standard library only, no I/O, no clocks, no logging, no rates (that is :mod:`usage.store`).
This module owns :func:`parse_resource_metrics`, which applies metrics-server's
``decodeBatch`` rules (``pkg/scraper/client/resource/decode.go``) for which samples count to
the columns :mod:`.columns` scans (node, pod and container CPU counters and working
sets, container start times, the kubelet's scrape-error flag).

**Decode rules (metrics-server's, checked against its real output in the tests).** Samples
come from the ``container_*``, ``node_*`` and ``scrape_error`` series; a sample without a
timestamp gets ``default_time``. A container counts only with a CPU counter of at least one
nanocore-second *and* a working set of at least one byte (metrics-server keeps
``uint64(value * 1e9)`` and ``uint64(value)`` and drops zeros); one incomplete container
drops its whole pod's containers. The node needs both its CPU counter and its working set
under the same rule. Differences from upstream, all on inputs no kubelet writes: lines of
metrics we do not read, and comments, are skipped without being validated (upstream rejects
the whole body for a malformed line anywhere); label values are unescaped and labels found by
name (upstream slices the raw bytes, so it would return escaped names and could match
``init_container=`` for ``container=``); negative or NaN counters and working sets count as
missing (Go's conversion of those to ``uint64`` is platform-defined), a NaN or infinite start
time as not reported; numbers are read by Python's ``float`` (underscores refused, as Go
does), which rejects the hexadecimal floats Go accepts; lines of metrics we read that are not
UTF-8 are refused. Pod-level series (``pod_cpu_usage_seconds_total``,
``pod_memory_working_set_bytes``), which metrics-server ignores, are returned beside the
containers under the same completeness rule.

**Errors.** A malformed line of a metric we read raises :class:`ValueError` naming the line
(as upstream, the whole body is then unusable): an unparsable value, a timestamp that is not
a non-negative 64-bit integer (upstream's ``expected timestamp or new record``), broken
label syntax, a container series without its ``container``/``namespace``/``pod`` labels, or
such a line that is not UTF-8. Nothing else is raised.

**Speed.** The body is scanned into columns mostly in C (see :mod:`.columns`); the
rules then run over whole columns: when the body is what a kubelet writes (one run per
container metric, the same series in the same order, every container complete) the
containers are zipped together in C (``_Assembly.containers_fast``), otherwise each series
is keyed and checked (``_Assembly.containers_general``, the same result).

Cost: :func:`parse_resource_metrics` is O(len(body)): a few Python steps per family for
kubelet output, then O(containers + pods) to assemble, mostly in C.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import Any, TypeVar

from custom_metrics_server.kubelet_format.columns import (
    CONTAINER_CPU,
    CONTAINER_MEMORY,
    CONTAINER_START,
    POD_CPU,
    POD_MEMORY,
    Column,
    Columns,
    read_columns,
)
from custom_metrics_server.kubelet_format.samples import (
    ContainerSample,
    CpuSample,
    MemorySample,
    NodeSample,
    PodKey,
    PodSample,
    ResourceScrape,
)

__all__ = ["parse_resource_metrics"]

_Sample = TypeVar("_Sample", CpuSample, MemorySample)


def parse_resource_metrics(body: bytes, *, default_time: float) -> ResourceScrape:
    """Decode a kubelet ``/metrics/resource`` body (see the module docstring for the rules).

    ``default_time`` (Unix seconds) stamps samples written without a timestamp, as
    metrics-server stamps them with the scrape time. Raises :class:`ValueError` for a
    malformed line of a metric we read (including one that is not UTF-8).

    Cost: O(len(body)). A kubelet body costs a few Python steps per *family*: each run of
    lines is found with C searches and decoded with C splits and maps; only comments,
    unlabelled lines and non-canonical runs are handled line by line.
    """
    return _Assembly(read_columns(body, default_time=default_time)).result()


def _complete_cpu(seconds_total: float) -> bool:
    # metrics-server keeps uint64(value*1e9) and treats 0 as missing (NaN fails too).
    return seconds_total * 1e9 >= 1.0


def _complete_memory(bytes_: float) -> bool:
    # metrics-server keeps uint64(value) and treats 0 as missing (NaN fails too).
    return bytes_ >= 1.0


def _all_complete(values: list[float], scale: float) -> bool:
    """Whether every value passes ``value * scale >= 1``; O(n) in C. ``sum`` is NaN when
    any value is NaN (``min`` would skip it)."""
    return not values or (min(values) * scale >= 1.0 and not math.isnan(sum(values)))


def _finite_or_none(values: list[float]) -> Sequence[float | None]:
    """Start times as reported, non-finite ones (NaN, infinities) as None. O(n), in C
    when all are finite."""
    if math.isfinite(sum(values)):
        return values
    return [value if math.isfinite(value) else None for value in values]


class _Assembly:
    """The scrape from a body's columns, by metrics-server's rules."""

    def __init__(self, found: Columns) -> None:
        self.default_time = found.default_time
        self.columns = found.runs
        self.node_cpu = found.node_cpu
        self.node_memory = found.node_memory
        self.scrape_error = found.scrape_error

    def _times(self, column: Column) -> Iterable[float]:
        return repeat(self.default_time) if column.times is None else column.times

    def containers_fast(self) -> dict[PodKey, dict[str, ContainerSample]] | None:
        """Containers when the body has one run per container metric with the same series
        in the same order and no incomplete container (what a kubelet writes); else None.
        O(containers), mostly in C."""
        cpu_runs = self.columns[CONTAINER_CPU]
        memory_runs = self.columns[CONTAINER_MEMORY]
        start_runs = self.columns[CONTAINER_START]
        if len(cpu_runs) != 1 or len(memory_runs) != 1 or len(start_runs) > 1:
            return None
        cpu, memory = cpu_runs[0], memory_runs[0]
        if not (
            cpu.containers == memory.containers
            and cpu.pods == memory.pods
            and cpu.namespaces == memory.namespaces
            and _all_complete(cpu.values, 1e9)
            and _all_complete(memory.values, 1.0)
        ):
            return None
        assert cpu.containers is not None
        starts: Iterable[float | None] = repeat(None)
        if start_runs:
            start = start_runs[0]
            assert start.containers is not None
            if (
                start.containers == cpu.containers
                and start.pods == cpu.pods
                and start.namespaces == cpu.namespaces
            ):
                starts = _finite_or_none(start.values)
            else:
                start_keys = zip(start.namespaces, start.pods, start.containers, strict=True)
                by_key = dict(zip(start_keys, _finite_or_none(start.values), strict=True))
                keys = list(zip(cpu.namespaces, cpu.pods, cpu.containers, strict=True))
                if not by_key.keys() <= set(keys):
                    return None  # a container with a start time only: its pod is dropped
                starts = map(by_key.get, keys)
        containers = map(
            tuple.__new__,
            repeat(ContainerSample),
            zip(
                cpu.values,
                self._times(cpu),
                memory.values,
                self._times(memory),
                starts,
                strict=False,
            ),
        )
        grouped: defaultdict[PodKey, dict[str, ContainerSample]] = defaultdict(dict)
        pod_keys = zip(cpu.namespaces, cpu.pods, strict=True)
        for key, name, container in zip(pod_keys, cpu.containers, containers, strict=True):
            grouped[key][name] = container
        return grouped

    def _pairs(self, metric: str) -> dict[Any, tuple[float, float]]:
        """(value, time) by series key for every run of ``metric``, later ones winning."""
        result: dict[Any, tuple[float, float]] = {}
        for column in self.columns[metric]:
            keys: Iterable[Any] = (
                zip(column.namespaces, column.pods, strict=True)
                if column.containers is None
                else zip(column.namespaces, column.pods, column.containers, strict=True)
            )
            pairs = zip(column.values, self._times(column), strict=False)
            result.update(zip(keys, pairs, strict=True))
        return result

    def containers_general(self) -> dict[PodKey, dict[str, ContainerSample]]:
        """Containers by metrics-server's rules for any body. O(series)."""
        cpu = self._pairs(CONTAINER_CPU)
        memory = self._pairs(CONTAINER_MEMORY)
        start_pairs = self._pairs(CONTAINER_START)
        start = dict(
            zip(start_pairs, _finite_or_none([v for v, _ in start_pairs.values()]), strict=True)
        )
        incomplete: set[PodKey] = set()
        for key in cpu.keys() | memory.keys() | start.keys():
            cpu_pair, memory_pair = cpu.get(key), memory.get(key)
            if not (
                cpu_pair
                and memory_pair
                and _complete_cpu(cpu_pair[0])
                and _complete_memory(memory_pair[0])
            ):
                incomplete.add((key[0], key[1]))
        grouped: defaultdict[PodKey, dict[str, ContainerSample]] = defaultdict(dict)
        for key, (cpu_value, cpu_time) in cpu.items():
            pod_key = (key[0], key[1])
            if pod_key not in incomplete:
                memory_value, memory_time = memory[key]
                grouped[pod_key][key[2]] = ContainerSample(
                    cpu_value, cpu_time, memory_value, memory_time, start.get(key)
                )
        return grouped

    def _pod_samples(self, metric: str, kind: type[_Sample], scale: float) -> dict[PodKey, _Sample]:
        runs = self.columns[metric]
        if len(runs) == 1 and _all_complete(runs[0].values, scale):
            run = runs[0]
            pairs = zip(run.values, self._times(run), strict=False)
            samples = map(tuple.__new__, repeat(kind), pairs)
            return dict(zip(zip(run.namespaces, run.pods, strict=True), samples, strict=True))
        return {
            key: kind(value, when)
            for key, (value, when) in self._pairs(metric).items()
            if value * scale >= 1.0
        }

    def result(self) -> ResourceScrape:
        """The scrape. O(containers + pods)."""
        node = None
        node_cpu, node_memory = self.node_cpu, self.node_memory
        if (
            node_cpu is not None
            and node_memory is not None
            and _complete_cpu(node_cpu.seconds_total)
            and _complete_memory(node_memory.bytes)
        ):
            node = NodeSample(node_cpu, node_memory)
        grouped = self.containers_fast()
        if grouped is None:
            grouped = self.containers_general()
        pod_cpu = self._pod_samples(POD_CPU, CpuSample, 1e9)
        pod_memory = self._pod_samples(POD_MEMORY, MemorySample, 1.0)
        keys = list(grouped)
        fields = zip(
            map(pod_cpu.get, keys), map(pod_memory.get, keys), grouped.values(), strict=True
        )
        pods: dict[PodKey, PodSample] = dict(
            zip(keys, map(tuple.__new__, repeat(PodSample), fields), strict=True)
        )
        for key in (pod_cpu.keys() | pod_memory.keys()) - grouped.keys():
            pods[key] = PodSample(pod_cpu.get(key), pod_memory.get(key), {})
        return ResourceScrape(node=node, pods=pods, scrape_error=self.scrape_error)
