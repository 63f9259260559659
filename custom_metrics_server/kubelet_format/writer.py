"""The kubelet's ``/metrics/resource`` body, byte for byte, from a :class:`.Summary`.

The kubelet's resource collector (``pkg/kubelet/metrics/collectors/resource_metrics.go``)
emits these series and component-base's registry writes them through the Go Prometheus
client. This module reproduces that writer: families sorted by name, each with its HELP
line (component-base's ``[STABLE]``/``[ALPHA]`` prefix) and TYPE line and only when it has a
series; labels sorted by name (``container``, ``namespace``, ``pod``); series sorted by label
values; Go's escaping of label values and float formatting
(:mod:`custom_metrics_server.machinery.promtext`); timestamps in milliseconds taken
from the stats themselves (Go's ``t.Unix()*1000 + t.Nanosecond()/1e6``, a floor division
of the nanoseconds), never from the time of the scrape. Values are converted as the
collector does: ``float64(nanoseconds) / 1e9`` for CPU counters and start times,
``float64(bytes)`` for gauges.

Which series exist follows the collector: a counter or gauge is written when its value is
reported; the container start time only when it is after the epoch's first second (and
without a timestamp); the swap limit is ``available + usage`` when ``available`` is
reported; ``resource_scrape_error`` always, and ``scrape_error`` unless left out (1 when the
stats could not be read, and then nothing else is written).

The node agent serves this body and the demo's simulated kubelets write it (so the demo reads
exactly what a kubelet writes, escapes included). It must not do I/O, read clocks or log.
Cost: O(s log s) for s series (one sort per family, in C over tuples), about 2 us of Python
per container.
"""

from __future__ import annotations

from typing import Final

from custom_metrics_server.kubelet_format.summary import (
    ContainerStats,
    CpuStats,
    MemoryStats,
    NodeStats,
    PodStats,
    Summary,
    SwapStats,
)
from custom_metrics_server.machinery.promtext import escape_label_value, format_go_float

__all__ = ["FAMILIES", "render_resource_metrics"]

_COUNTER: Final = "counter"
_GAUGE: Final = "gauge"
_NON_WINDOWS: Final = "Reported only on non-windows systems"

#: name -> (TYPE, HELP with the stability prefix), as the kubelet registers them.
FAMILIES: Final[dict[str, tuple[str, str]]] = {
    "container_cpu_usage_seconds_total": (
        _COUNTER,
        "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
    ),
    "container_memory_commit_bytes": (
        _GAUGE,
        "[ALPHA] Committed memory of the container in bytes. Reported only on Windows systems",
    ),
    "container_memory_working_set_bytes": (
        _GAUGE,
        "[STABLE] Current working set of the container in bytes",
    ),
    "container_start_time_seconds": (
        _GAUGE,
        "[STABLE] Start time of the container since unix epoch in seconds",
    ),
    "container_swap_limit_bytes": (
        _GAUGE,
        f"[ALPHA] Current amount of the container swap limit in bytes. {_NON_WINDOWS}",
    ),
    "container_swap_usage_bytes": (
        _GAUGE,
        f"[ALPHA] Current amount of the container swap usage in bytes. {_NON_WINDOWS}",
    ),
    "node_cpu_usage_seconds_total": (
        _COUNTER,
        "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
    ),
    "node_memory_commit_bytes": (
        _GAUGE,
        "[ALPHA] Committed memory of the node in bytes. Reported only on Windows systems",
    ),
    "node_memory_working_set_bytes": (_GAUGE, "[STABLE] Current working set of the node in bytes"),
    "node_swap_usage_bytes": (
        _GAUGE,
        f"[ALPHA] Current swap usage of the node in bytes. {_NON_WINDOWS}",
    ),
    "pod_cpu_usage_seconds_total": (
        _COUNTER,
        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
    ),
    "pod_memory_working_set_bytes": (_GAUGE, "[STABLE] Current working set of the pod in bytes"),
    "pod_swap_usage_bytes": (
        _GAUGE,
        f"[ALPHA] Current amount of the pod swap usage in bytes. {_NON_WINDOWS}",
    ),
    "resource_scrape_error": (
        _GAUGE,
        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
    ),
    "scrape_error": (
        _GAUGE,
        "[ALPHA] 1 if there was an error while getting container metrics, 0 otherwise",
    ),
}

_NANOS: Final = 1e9
# (sort key, rendered line without the metric name)
_Series = tuple[tuple[str, ...], str]


def _millis(time_ns: int) -> str:
    return str(time_ns // 1_000_000)


def _seconds(nanoseconds: int) -> str:
    return format_go_float(float(nanoseconds) / _NANOS)


def _bytes(value: int) -> str:
    return format_go_float(float(value))


class _Writer:
    """Collects series per family, then writes the body in the Go client's order."""

    def __init__(self) -> None:
        self.families: dict[str, list[_Series]] = {}

    def add(self, name: str, key: tuple[str, ...], labels: str, value: str, ts: str) -> None:
        line = f"{labels} {value} {ts}" if ts else f"{labels} {value}"
        self.families.setdefault(name, []).append((key, line))

    def body(self) -> bytes:
        parts: list[str] = []
        for name in sorted(self.families):
            kind, help_text = FAMILIES[name]
            parts.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
            series = self.families[name]
            series.sort(key=_key)
            parts.extend(f"{name}{line}\n" for _, line in series)
        return "".join(parts).encode("utf-8")


def _key(series: _Series) -> tuple[str, ...]:
    return series[0]


def _usage(
    writer: _Writer,
    prefix: str,
    *,
    key: tuple[str, ...],
    labels: str,
    cpu: CpuStats | None,
    memory: MemoryStats | None,
    swap: SwapStats | None,
    swap_limit: bool,
) -> None:
    """The CPU, memory and swap series of one node, pod or container."""
    add = writer.add
    if cpu is not None and cpu.usage_core_nanoseconds is not None:
        add(
            f"{prefix}_cpu_usage_seconds_total",
            key,
            labels,
            _seconds(cpu.usage_core_nanoseconds),
            _millis(cpu.time_ns),
        )
    if memory is not None:
        if memory.working_set_bytes is not None:
            add(
                f"{prefix}_memory_working_set_bytes",
                key,
                labels,
                _bytes(memory.working_set_bytes),
                _millis(memory.time_ns),
            )
        if memory.commit_bytes is not None and prefix != "pod":
            add(
                f"{prefix}_memory_commit_bytes",
                key,
                labels,
                _bytes(memory.commit_bytes),
                _millis(memory.time_ns),
            )
    if swap is not None:
        if swap.usage_bytes is not None:
            add(
                f"{prefix}_swap_usage_bytes",
                key,
                labels,
                _bytes(swap.usage_bytes),
                _millis(swap.time_ns),
            )
        if swap_limit and swap.available_bytes is not None:
            add(
                f"{prefix}_swap_limit_bytes",
                key,
                labels,
                _bytes(swap.available_bytes + (swap.usage_bytes or 0)),
                _millis(swap.time_ns),
            )


def _node(writer: _Writer, node: NodeStats) -> None:
    _usage(
        writer,
        "node",
        key=(),
        labels="",
        cpu=node.cpu,
        memory=node.memory,
        swap=node.swap,
        swap_limit=False,
    )


def _container(writer: _Writer, pod: PodStats, pod_labels: str, container: ContainerStats) -> None:
    name = container.name
    key = (name, pod.namespace, pod.name)
    labels = f'{{container="{escape_label_value(name)}",{pod_labels}}}'
    start = container.start_time_ns
    if start is not None and start // 1_000_000_000 > 0:
        writer.add("container_start_time_seconds", key, labels, _seconds(start), "")
    _usage(
        writer,
        "container",
        key=key,
        labels=labels,
        cpu=container.cpu,
        memory=container.memory,
        swap=container.swap,
        swap_limit=True,
    )


def render_resource_metrics(summary: Summary | None, *, legacy_scrape_error: bool = True) -> bytes:
    """The kubelet's ``/metrics/resource`` body for ``summary``; ``None`` means the stats
    could not be read (the body then says ``resource_scrape_error 1`` and nothing else).
    ``legacy_scrape_error`` adds the ``scrape_error`` family that kubelets before 1.30 wrote
    beside ``resource_scrape_error`` (the upstream collector tests have it; kubelet 1.36
    does not)."""
    writer = _Writer()
    error = "1" if summary is None else "0"
    if legacy_scrape_error:
        writer.add("scrape_error", (), "", error, "")
    writer.add("resource_scrape_error", (), "", error, "")
    if summary is not None:
        if summary.node is not None:
            _node(writer, summary.node)
        for pod in summary.pods:
            namespace, name = escape_label_value(pod.namespace), escape_label_value(pod.name)
            pod_labels = f'namespace="{namespace}",pod="{name}"'
            for each in pod.containers:
                _container(writer, pod, pod_labels, each)
            _usage(
                writer,
                "pod",
                key=(pod.namespace, pod.name),
                labels=f"{{{pod_labels}}}",
                cpu=pod.cpu,
                memory=pod.memory,
                swap=pod.swap,
                swap_limit=False,
            )
    return writer.body()
