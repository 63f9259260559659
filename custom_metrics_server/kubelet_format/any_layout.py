"""The usage rows of a kubelet ``/metrics/resource`` body in any layout, line by line: the
path :func:`.rows.read_usage_rows` takes for a body not in the kubelet's canonical layout.

PURE: standard library only, no I/O. This module owns :func:`read_any_layout`, which applies
metrics-server's ``decodeBatch`` rules (``pkg/scraper/client/resource/decode.go``) to every
line of the series the usage store reads, parsed with the full grammar (:mod:`.lines`).

**Decode rules (metrics-server's, checked against its real output in
tests/kubelet_format/test_any_layout.py).** Samples come from the ``container_*``, ``node_*`` and
``scrape_error`` series; a sample without a timestamp gets ``default_time``. A container
counts only with a CPU counter of at least one nanocore-second *and* a working set of at
least one byte (metrics-server keeps ``uint64(value * 1e9)`` and ``uint64(value)`` and drops
zeros); one incomplete container (a container with a start time only included) drops its
whole pod's containers. The node needs both its CPU counter and its working set under the
same rule. A series given twice keeps its later sample, at the place of its first (upstream's
maps). Differences from upstream, all on inputs no kubelet writes: lines of metrics we do not
read, and comments, are skipped without being validated (upstream rejects the whole body for
a malformed line anywhere); label values are unescaped and labels found by name (upstream
slices the raw bytes, so it would return escaped names and could match ``init_container=``
for ``container=``); negative or NaN counters and working sets count as missing (Go's
conversion of those to ``uint64`` is platform-defined), a NaN or infinite start time as not
reported; numbers are read by Python's ``float`` (underscores refused, as Go does), which
rejects the hexadecimal floats Go accepts; lines of metrics we read that are not UTF-8 are
refused. Pod-level series (``pod_cpu_usage_seconds_total``, ``pod_memory_working_set_bytes``),
which metrics-server ignores, are validated and not kept.

**Errors.** A malformed line of a metric we read raises :class:`ValueError` naming the line
(as upstream, the whole body is then unusable): an unparsable value, a timestamp that is not
a non-negative 64-bit integer (upstream's ``expected timestamp or new record``), broken
label syntax, a container or pod series without its ``container``/``namespace``/``pod``
labels, or such a line that is not UTF-8. Nothing else is raised.

Cost: O(len(body)), in Python per line of a series read (~2 ms for a 41 KB body of 62
containers on the build machine, ~35x the canonical path): kubelet output reaches it only when
not in the canonical layout.
"""

from __future__ import annotations

import math
import re
from typing import Final

from custom_metrics_server.kubelet_format.lines import line_error, parse_line
from custom_metrics_server.kubelet_format.samples import (
    CpuSample,
    MemorySample,
    NodeSample,
    PodKey,
    UsageRows,
)

__all__ = ["read_any_layout"]

_CPU: Final = "container_cpu_usage_seconds_total"
_MEMORY: Final = "container_memory_working_set_bytes"
_START: Final = "container_start_time_seconds"
_CONTAINER_METRICS: Final = frozenset({_CPU, _MEMORY, _START})
_POD_METRICS: Final = frozenset({"pod_cpu_usage_seconds_total", "pod_memory_working_set_bytes"})
_NODE_CPU: Final = "node_cpu_usage_seconds_total"
_NODE_MEMORY: Final = "node_memory_working_set_bytes"
_SCRAPE_ERRORS: Final = frozenset({"scrape_error", "resource_scrape_error"})
_KNOWN: Final = frozenset(
    name.encode()
    for name in _CONTAINER_METRICS | _POD_METRICS | {_NODE_CPU, _NODE_MEMORY} | _SCRAPE_ERRORS
)
_NAME_END: Final = re.compile(rb"[ \t{]")

_Key = tuple[str, str, str]  # namespace, pod, container
_Pair = tuple[float, float]  # value, time


def _text(line: bytes, lineno: int) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"line {lineno}: not UTF-8: {err}") from None


def _complete_cpu(seconds_total: float) -> bool:
    # metrics-server keeps uint64(value*1e9) and treats 0 as missing (NaN fails too).
    return seconds_total * 1e9 >= 1.0


def _complete_memory(bytes_: float) -> bool:
    # metrics-server keeps uint64(value) and treats 0 as missing (NaN fails too).
    return bytes_ >= 1.0


def read_any_layout(body: bytes, *, default_time: float) -> UsageRows:
    """The usage rows of a body in any layout (see the module docstring for the rules), one
    row per complete container, grouped by pod in the order of the pods' first CPU series;
    no layout, so the store matches them by name. Raises :class:`ValueError` naming the line
    for a malformed line of a metric it reads. O(len(body))."""
    series: dict[str, dict[_Key, _Pair]] = {name: {} for name in _CONTAINER_METRICS}
    node_cpu: CpuSample | None = None
    node_memory: MemorySample | None = None
    scrape_error = False
    for lineno, raw in enumerate(body.split(b"\n"), 1):
        match = _NAME_END.search(raw)
        if (raw[: match.start()] if match else raw) not in _KNOWN:
            continue  # comments, blank lines, metrics we do not read
        line = _text(raw, lineno)
        parsed = parse_line(line, lineno)
        if parsed is None:
            continue
        name, labels, value, stamp = parsed
        when = default_time if stamp is None else stamp / 1000.0
        if name in _SCRAPE_ERRORS:
            scrape_error = scrape_error or value != 0
        elif name == _NODE_CPU:
            node_cpu = CpuSample(value, when)
        elif name == _NODE_MEMORY:
            node_memory = MemorySample(value, when)
        else:
            needed = (
                ("namespace", "pod", "container")
                if name in _CONTAINER_METRICS
                else ("namespace", "pod")
            )
            for label in needed:
                if label not in labels:
                    raise line_error(lineno, line, f"missing label {label!r}")
            if name in _CONTAINER_METRICS:
                key = (labels["namespace"], labels["pod"], labels["container"])
                series[name][key] = (value, when)
    return _rows(series, node_cpu, node_memory, scrape_error)


def _rows(
    series: dict[str, dict[_Key, _Pair]],
    node_cpu: CpuSample | None,
    node_memory: MemorySample | None,
    scrape_error: bool,
) -> UsageRows:
    """The rows of the series read, by metrics-server's rules. O(series)."""
    cpu, memory, start = series[_CPU], series[_MEMORY], series[_START]
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
    grouped: dict[PodKey, list[_Key]] = {}
    for key in cpu:
        pod = (key[0], key[1])
        if pod not in incomplete:
            grouped.setdefault(pod, []).append(key)
    keys = [key for pod_keys in grouped.values() for key in pod_keys]
    starts = [start.get(key, (math.nan, 0.0))[0] for key in keys]
    node = None
    if (
        node_cpu is not None
        and node_memory is not None
        and _complete_cpu(node_cpu.seconds_total)
        and _complete_memory(node_memory.bytes)
    ):
        node = NodeSample(node_cpu, node_memory)
    return UsageRows(
        layout=None,
        pods=[(key[0], key[1]) for key in keys],
        containers=[key[2] for key in keys],
        cpu=[cpu[key][0] for key in keys],
        times=[cpu[key][1] for key in keys],
        memory=[memory[key][0] for key in keys],
        starts=[value if math.isfinite(value) else math.nan for value in starts],
        start_layout=None,
        node=node,
        scrape_error=scrape_error,
    )
