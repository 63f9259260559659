"""Prometheus text expositions we read and write: the kubelet's ``/metrics/resource`` and
kube-scheduler's KEP-1748 ``/metrics/resources``.

This module owns two pure conversions and nothing else:

* :func:`parse_resource_metrics` turns a kubelet ``/metrics/resource`` body into a
  :class:`ResourceScrape` (node, pod and container CPU counters and working sets, container
  start times, the kubelet's scrape-error flag), applying metrics-server's
  ``decodeBatch`` rules (``pkg/scraper/client/resource/decode.go``) for which samples count;
* :func:`render_pod_resource_metrics` (from rows) and :func:`render_pod_resources` (from
  one record per pod, faster) write ``kube_pod_resource_request`` and
  ``kube_pod_resource_limit`` byte for byte as kube-scheduler's collector
  (``pkg/scheduler/metrics/resources/resources.go``) and the Go Prometheus client write
  them: HELP with component-base's ``[STABLE]`` prefix, families sorted by name, labels
  sorted by name, series sorted by label values, Go's escaping and float formatting, zero
  values left out. One difference: a series given twice is written twice, where the Go
  registry fails the whole scrape.

It must not do I/O, log, read clocks or compute rates (that is :mod:`.usage`); it imports the
standard library only.

**Decode rules (metrics-server's, checked against its real output in the tests).** Samples
come from the ``container_*``, ``node_*`` and ``scrape_error`` series; a sample without a
timestamp gets ``default_time``. A container counts only with a CPU counter of at least one
nanocore-second *and* a working set of at least one byte (metrics-server keeps
``uint64(value * 1e9)`` and ``uint64(value)`` and drops zeros); one incomplete container
drops its whole pod's containers. The node needs both its CPU counter and its working set
under the same rule. A series is matched by the text of its line exactly as upstream does:
a line indented with spaces or tabs, or with whitespace between the metric name and ``{``,
names no metric and is skipped. Differences from upstream, all on inputs no kubelet
writes: lines of metrics we do not read, and comments, are skipped without being validated
(upstream rejects the whole body for a malformed line anywhere); label values are
unescaped and labels found by name (upstream slices the raw bytes, so it would return
escaped names and could match ``init_container=`` for ``container=``); negative or NaN
counters and working sets count as missing (Go's conversion of those to ``uint64`` is
platform-defined), a NaN or infinite start time as not reported; numbers are read by
Python's ``float`` (underscores refused, as Go does), which rejects the hexadecimal floats
Go accepts; lines of metrics we read that are not UTF-8 are refused. Pod-level
series (``pod_cpu_usage_seconds_total``, ``pod_memory_working_set_bytes``), which
metrics-server ignores, are returned beside the containers under the same completeness rule.

**Errors.** A malformed line of a metric we read raises :class:`ValueError` naming the line
(as upstream, the whole body is then unusable): an unparsable value, a timestamp that is not
a non-negative 64-bit integer (upstream's ``expected timestamp or new record``), broken
label syntax, a container series without its ``container``/``namespace``/``pod`` labels, or
such a line that is not UTF-8. Nothing else is raised.

**Speed.** Kubelets write each family as one run of lines with identical label layout. The
parser finds a run with a few C searches (no per-line Python), then decodes it on the raw
bytes with ``bytes.split``, slicing and ``map`` (C loops): the label text of the first run
of each layout is split once, and later runs (memory, start time) whose series are the same
in the same order are matched against it with one string comparison. Any run not in the
canonical layout (other label order, escapes, tabs, some lines without a timestamp) falls
back to a per-line parser with the full grammar, which gives the same result. The result
types are ``NamedTuple``\\s so a run's samples are built from C as well: a frozen slotted
dataclass costs ~0.7 us per instance in ``__init__``, which alone would spend half of the
50 ms budget for 40,000 series; for the same reason :class:`ContainerSample` is flat.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import truediv
from typing import Any, Final, NamedTuple, TypeVar

__all__ = [
    "LIMIT_HELP",
    "REQUEST_HELP",
    "ContainerSample",
    "CpuSample",
    "MemorySample",
    "NodeSample",
    "PodKey",
    "PodResourceRow",
    "PodResources",
    "PodSample",
    "ResourceScrape",
    "escape_label_value",
    "format_go_float",
    "parse_resource_metrics",
    "render_pod_resource_metrics",
    "render_pod_resources",
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

    def container_pods(self) -> dict[PodKey, dict[str, ContainerSample]]:
        """The pods metrics-server's decodeBatch would return, with their containers."""
        return {key: pod.containers for key, pod in self.pods.items() if pod.containers}


# --- parsing ---------------------------------------------------------------------------

_CONTAINER_CPU: Final = "container_cpu_usage_seconds_total"
_CONTAINER_MEMORY: Final = "container_memory_working_set_bytes"
_CONTAINER_START: Final = "container_start_time_seconds"
_POD_CPU: Final = "pod_cpu_usage_seconds_total"
_POD_MEMORY: Final = "pod_memory_working_set_bytes"
_NODE_CPU: Final = "node_cpu_usage_seconds_total"
_NODE_MEMORY: Final = "node_memory_working_set_bytes"
_SCRAPE_ERRORS: Final = frozenset({"scrape_error", "resource_scrape_error"})
_CONTAINER_METRICS: Final = frozenset({_CONTAINER_CPU, _CONTAINER_MEMORY, _CONTAINER_START})
_POD_METRICS: Final = frozenset({_POD_CPU, _POD_MEMORY})
_KNOWN: Final = _CONTAINER_METRICS | _POD_METRICS | {_NODE_CPU, _NODE_MEMORY} | _SCRAPE_ERRORS

#: The text before the first quote of a canonical kubelet line (labels sorted by name, as
#: the Go client writes them) -> (metric, labels on the line).
_CANONICAL_HEADS: Final[dict[bytes, tuple[str, int]]] = {
    f"{name}{{container=".encode(): (name, 3) for name in _CONTAINER_METRICS
} | {f"{name}{{namespace=".encode(): (name, 2) for name in _POD_METRICS}
_CONTAINER_SEPARATORS: Final = (",namespace=", ",pod=")
_POD_SEPARATORS: Final = (",pod=",)

_MAX_INT64: Final = 2**63 - 1
_NAME_END: Final = re.compile(r"[ \t{]")
_NAME_END_BYTES: Final = re.compile(rb"[ \t{]")
_KNOWN_BYTES: Final = frozenset(name.encode() for name in _KNOWN)
_BLANKS: Final = re.compile(r"[ \t]+")
_LABEL_NAME: Final = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_UNESCAPES: Final = {"\\": "\\", '"': '"', "n": "\n"}


class _Series(NamedTuple):
    name: str
    labels: dict[str, str]
    value: float
    timestamp_ms: int | None


def _error(lineno: int, line: str, problem: str) -> ValueError:
    shown = line if len(line) <= 200 else line[:200] + "..."
    return ValueError(f"line {lineno}: {problem}: {shown!r}")


def _timestamp_ms(text: str, lineno: int, line: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise _error(lineno, line, f"expected timestamp or new record, got {text!r}")
    value = int(text)
    if value > _MAX_INT64:
        raise _error(lineno, line, "timestamp out of range")
    return value


def _float(text: str, lineno: int, line: str) -> float:
    # Python's float() also strips Unicode blanks and takes digit-group underscores; Go's
    # ParseFloat takes neither.
    if "_" in text or not text.isprintable():
        raise _error(lineno, line, f"invalid value {text!r}")
    try:
        return float(text)
    except ValueError:
        raise _error(lineno, line, f"invalid value {text!r}") from None


def _parse_labels(line: str, start: int, lineno: int) -> tuple[dict[str, str], int]:
    """Parse ``name="value",...}`` from ``line[start:]``; returns the labels and the index
    after ``}``. O(len(line)); used only off the fast path."""
    labels: dict[str, str] = {}
    i, n = start, len(line)
    while True:
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] == "}":
            return labels, i + 1
        match = _LABEL_NAME.match(line, i)
        if match is None:
            raise _error(lineno, line, "invalid label name")
        name = match.group()
        i = match.end()
        while i < n and line[i] in " \t":
            i += 1
        if i >= n or line[i] != "=":
            raise _error(lineno, line, "expected '=' after label name")
        i += 1
        while i < n and line[i] in " \t":
            i += 1
        if i >= n or line[i] != '"':
            raise _error(lineno, line, "expected quoted label value")
        i += 1
        chars: list[str] = []
        while True:
            if i >= n:
                raise _error(lineno, line, "unterminated label value")
            char = line[i]
            if char == '"':
                i += 1
                break
            if char == "\\":
                if i + 1 >= n:
                    raise _error(lineno, line, "unterminated label value")
                following = line[i + 1]
                # Prometheus keeps unknown escapes as written (lvalReplacer).
                chars.append(_UNESCAPES.get(following, "\\" + following))
                i += 2
                continue
            chars.append(char)
            i += 1
        if name in labels:
            raise _error(lineno, line, f"duplicate label {name!r}")
        labels[name] = "".join(chars)
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] == ",":
            i += 1
        elif i < n and line[i] == "}":
            return labels, i + 1
        else:
            raise _error(lineno, line, "expected ',' or '}' in label set")


def _parse_line(line: str, lineno: int) -> _Series | None:
    """Parse one series line with the full grammar; None when upstream would not match it
    to any metric (whitespace before the name or between the name and ``{``). O(len)."""
    match = _NAME_END.search(line)
    end = match.start() if match else len(line)
    name = line[:end]
    labels: dict[str, str] = {}
    i = end
    if i < len(line) and line[i] == "{":
        labels, i = _parse_labels(line, i + 1, lineno)
    elif line[i:].lstrip(" \t").startswith("{"):
        return None
    fields = _BLANKS.split(line[i:].strip(" \t"))
    if fields == [""]:
        raise _error(lineno, line, "expected value after metric")
    if len(fields) > 2:
        raise _error(lineno, line, "expected next entry after timestamp")
    value = _float(fields[0], lineno, line)
    timestamp = _timestamp_ms(fields[1], lineno, line) if len(fields) == 2 else None
    return _Series(name, labels, value, timestamp)


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


_ContainerKey = tuple[str, str, str]
_Sample = TypeVar("_Sample", CpuSample, MemorySample)
_Labels = tuple[list[str], list[str], list[str] | None]  # namespaces, pods, containers


class _Column(NamedTuple):
    """Series of one metric from one run of lines, in file order. ``containers`` is None
    for pod-level metrics; ``times`` None means every sample has the default time."""

    metric: str
    namespaces: list[str]
    pods: list[str]
    containers: list[str] | None
    values: list[float]
    times: list[float] | None


def _split_labels(raw: bytes, head: str, label_count: int, count: int) -> _Labels | None:
    """The label columns of ``count`` newline-separated label tokens
    (``head"c",namespace="ns",pod="p"}``), or None when any token is not in exactly that
    layout (or not UTF-8). O(len(raw)) in C."""
    if b"\\" in raw:
        return None
    try:
        labels = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    quotes = 2 * label_count
    parts = labels.split('"')
    if len(parts) != quotes * count + 1 or parts[0] != head:
        return None
    ends = parts[quotes::quotes]
    if ends[-1] != "}" or ends.count("}\n" + head) != count - 1:
        return None
    separators = _CONTAINER_SEPARATORS if label_count == 3 else _POD_SEPARATORS
    for offset, separator in enumerate(separators):
        if parts[2 + 2 * offset :: quotes].count(separator) != count:
            return None
    if label_count == 3:
        return parts[3::quotes], parts[5::quotes], parts[1::quotes]
    return parts[1::quotes], parts[3::quotes], None


class _Decoder:
    """Collects columns per metric in file order (later duplicates win, as in upstream's
    maps) and the node and scrape-error series, then assembles the scrape."""

    def __init__(self, default_time: float) -> None:
        self.default_time = default_time
        self.columns: dict[str, list[_Column]] = {
            name: [] for name in _CONTAINER_METRICS | _POD_METRICS
        }
        self.node_cpu: CpuSample | None = None
        self.node_memory: MemorySample | None = None
        self.scrape_error = False
        # The first validated label text per layout (3 labels or 2): later runs with the
        # same series in the same order share its columns after one string comparison.
        self._reference: dict[int, tuple[bytes, bytes, _Labels]] = {}
        self._stamps: tuple[bytes, list[float]] = (b"", [])

    def add(self, column: _Column) -> None:
        """Record a decoded run."""
        self.columns[column.metric].append(column)

    def _labels(self, labels: bytes, head: bytes, label_count: int, count: int) -> _Labels | None:
        reference = self._reference.get(label_count)
        if reference is not None:
            reference_head, reference_labels, columns = reference
            expected = head + reference_labels[len(reference_head) :].replace(
                b"\n" + reference_head, b"\n" + head
            )
            if labels == expected:
                return columns
        columns_or_none = _split_labels(labels, head.decode(), label_count, count)
        if columns_or_none is not None and reference is None:
            self._reference[label_count] = (head, labels, columns_or_none)
        return columns_or_none

    def run(self, region: bytes, count: int, head: bytes, metric: str, label_count: int) -> bool:
        """Decode a run of lines that all start with the canonical ``head`` with C-level
        splits and maps; False (nothing recorded) when the run is not in the canonical
        layout (``labels} value[ timestamp]``, single spaces) and must be parsed line by
        line. ``count`` is the number of lines, each newline being followed by ``head``.
        O(len(region))."""
        tokens = region.split()
        if len(tokens) == 3 * count:
            step = 3
        elif len(tokens) == 2 * count:
            step = 2
        else:
            return False
        # Only single spaces and the newlines separate tokens (bytes.split also splits on
        # tabs and carriage returns, which the per-line parser judges).
        spaces = region.count(b" ")
        if spaces != len(tokens) - count or len(b"".join(tokens)) != len(region) - spaces - (
            count - 1
        ):
            return False
        columns = self._labels(b"\n".join(tokens[0::step]), head, label_count, count)
        if columns is None:
            return False
        times: list[float] | None = None
        if step == 3:
            stamps = tokens[2::3]
            joined = b"".join(stamps)
            if joined == self._stamps[0]:
                times = self._stamps[1]  # cpu and memory series share their timestamps
            else:
                if not joined.isdigit() or max(map(len, stamps)) > 18:
                    return False  # the per-line parser says what is wrong
                times = list(map(truediv, map(float, stamps), repeat(1000.0)))
                self._stamps = (joined, times)
        texts = tokens[1::step]
        if b"_" in b"".join(texts):
            return False
        try:
            values = list(map(float, texts))
        except ValueError:
            return False
        self.add(_Column(metric, *columns, values, times))
        return True

    def line(self, line: str, lineno: int) -> None:
        """Record one line of a metric we read, with the full grammar. O(len(line))."""
        series = _parse_line(line, lineno)
        if series is None:
            return
        name, labels, value, stamp = series
        if name not in _KNOWN:
            return
        when = self.default_time if stamp is None else stamp / 1000.0
        if name in _SCRAPE_ERRORS:
            self.scrape_error = self.scrape_error or value != 0
        elif name == _NODE_CPU:
            self.node_cpu = CpuSample(value, when)
        elif name == _NODE_MEMORY:
            self.node_memory = MemorySample(value, when)
        else:
            is_container = name in _CONTAINER_METRICS
            for label in (
                ("namespace", "pod", "container") if is_container else ("namespace", "pod")
            ):
                if label not in labels:
                    raise _error(lineno, line, f"missing label {label!r}")
            container = [labels["container"]] if is_container else None
            self.add(
                _Column(name, [labels["namespace"]], [labels["pod"]], container, [value], [when])
            )

    def _times(self, column: _Column) -> Iterable[float]:
        return repeat(self.default_time) if column.times is None else column.times

    def _containers_fast(self) -> dict[PodKey, dict[str, ContainerSample]] | None:
        """Containers when the body has one run per container metric with the same series
        in the same order and no incomplete container (what a kubelet writes); else None.
        O(containers), mostly in C."""
        cpu_runs = self.columns[_CONTAINER_CPU]
        memory_runs = self.columns[_CONTAINER_MEMORY]
        start_runs = self.columns[_CONTAINER_START]
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

    def _containers_general(self) -> dict[PodKey, dict[str, ContainerSample]]:
        """Containers by metrics-server's rules for any body. O(series)."""
        cpu = self._pairs(_CONTAINER_CPU)
        memory = self._pairs(_CONTAINER_MEMORY)
        start_pairs = self._pairs(_CONTAINER_START)
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
        grouped = self._containers_fast()
        if grouped is None:
            grouped = self._containers_general()
        pod_cpu = self._pod_samples(_POD_CPU, CpuSample, 1e9)
        pod_memory = self._pod_samples(_POD_MEMORY, MemorySample, 1.0)
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


def _series_name(text: bytes) -> bytes:
    match = _NAME_END_BYTES.search(text)
    return text[: match.start()] if match else text


def _run_end(body: bytes, start: int, first_end: int, head: bytes) -> tuple[int, int]:
    """End (index of the newline, or len) and line count of the run of lines from
    ``start`` that all begin with ``head``. O(run length) in C for kubelet output.

    Kubelets write each family once, so the run usually ends with the last line that
    begins with ``head``; a count of newlines against newline-plus-head confirms it.
    Otherwise it walks line by line.
    """
    needle = b"\n" + head
    last = body.rfind(needle, first_end)
    if last >= 0:
        end = body.find(b"\n", last + 1)
        if end < 0:
            end = len(body)
        newlines = body.count(b"\n", start, end)
        if newlines == body.count(needle, start, end):
            return end, newlines + 1
    end, count = first_end, 1
    while body.startswith(needle, end):
        following = body.find(b"\n", end + 1)
        end = following if following >= 0 else len(body)
        count += 1
    return end, count


def _text(line: bytes, lineno: int) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"line {lineno}: not UTF-8: {err}") from None


def parse_resource_metrics(body: bytes, *, default_time: float) -> ResourceScrape:
    """Decode a kubelet ``/metrics/resource`` body (see the module docstring for the rules).

    ``default_time`` (Unix seconds) stamps samples written without a timestamp, as
    metrics-server stamps them with the scrape time. Raises :class:`ValueError` for a
    malformed line of a metric we read (including one that is not UTF-8).

    Cost: O(len(body)). A kubelet body costs a few Python steps per *family*: each run of
    lines is found with C searches and decoded with C splits and maps; only comments,
    unlabelled lines and non-canonical runs are handled line by line.
    """
    decoder = _Decoder(default_time)
    length = len(body)
    position, lineno = 0, 1
    while position < length:
        newline = body.find(b"\n", position)
        if newline < 0:
            newline = length
        line = body[position:newline]
        head, quote, _ = line.partition(b'"')
        if quote and (b"{" in head or head[:1] == b"#"):
            end, count = _run_end(body, position, newline, head)
            region = body[position:end]
            canonical = _CANONICAL_HEADS.get(head)
            if canonical is not None and decoder.run(region, count, head, *canonical):
                pass
            elif head[:1] != b"#" and _series_name(head) in _KNOWN_BYTES:
                for offset, raw in enumerate(region.split(b"\n")):
                    decoder.line(_text(raw, lineno + offset), lineno + offset)
            lineno += count
            position = end + 1
            continue
        # Comments, blank lines, unlabelled series (node_*, scrape_error).
        if line and line[:1] != b"#" and _series_name(line) in _KNOWN_BYTES:
            decoder.line(_text(line, lineno), lineno)
        lineno += 1
        position = newline + 1
    return decoder.result()


# --- rendering -------------------------------------------------------------------------


class PodResourceRow(NamedTuple):
    """One series of kube-scheduler's ``/metrics/resources``: a pod's request (or limit) of
    one resource. ``priority`` is the decimal ``spec.priority`` or ``""`` when unset."""

    namespace: str
    pod: str
    node: str
    scheduler: str
    priority: str
    resource: str
    unit: str
    value: float


_Row = tuple[str, str, str, str, str, str, str, float]
"""A :class:`PodResourceRow`, or any tuple with the same fields in the same order."""

#: kube-scheduler's help texts, with component-base's stability prefix.
REQUEST_HELP: Final = (
    "[STABLE] Resources requested by workloads on the cluster, broken down by pod. This shows"
    " the resource usage the scheduler and kubelet expect per pod for resources along with the"
    " unit for the resource if any."
)
LIMIT_HELP: Final = (
    "[STABLE] Resources limit for workloads on the cluster, broken down by pod. This shows the"
    " resource usage the scheduler and kubelet expect per pod for resources along with the unit"
    " for the resource if any."
)
_REQUEST: Final = "kube_pod_resource_request"
_LIMIT: Final = "kube_pod_resource_limit"
#: Characters that would make sorting rendered lines differ from sorting label values
#: (anything that sorts before the closing quote, and escapes).
_UNSAFE: Final = re.compile(r"[\x00-\x22\\]")


def format_go_float(value: float) -> str:
    """``value`` as the Go Prometheus text format writes it. O(digits).

    That is ``strconv.FormatFloat(v, 'g', -1, 64)``: the shortest digits that read back
    as ``v`` (Python's ``repr`` finds the same ones), in exponent form (``1e+06``,
    ``1.34217728e+08``, ``1e-05``) when the decimal exponent is below -4 or at least 6;
    ``+Inf``, ``-Inf``, ``NaN``; and 0 (also -0) as ``0``, as expfmt's ``writeFloat``.
    """
    if value == 0:
        return "0"
    if math.isnan(value):
        return "NaN"
    if value in (math.inf, -math.inf):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(value)
    sign = ""
    if text[0] == "-":
        sign, text = "-", text[1:]
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    point = len(whole) + (int(exponent) if exponent else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    # value = 0.<digits> x 10^point
    scientific = point - 1
    if scientific < -4 or scientific >= 6:
        head = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        exp_sign = "-" if scientific < 0 else "+"
        return f"{sign}{head}e{exp_sign}{abs(scientific):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def escape_label_value(value: str) -> str:
    """A label value as the Go client writes it: backslash, double quote and newline escaped.
    O(len(value))."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


_VALUE: Final = r'((?:[^"\\]|\\.)*)'
_RENDERED_LINE: Final = re.compile(
    rf"\{{namespace=\"{_VALUE}\",node=\"{_VALUE}\",pod=\"{_VALUE}\",priority=\"{_VALUE}\","
    rf"resource=\"{_VALUE}\",scheduler=\"{_VALUE}\",unit=\"{_VALUE}\"\}} "
)
_ESCAPED: Final = re.compile(r"\\(.)")


def _unescape(value: str) -> str:
    return _ESCAPED.sub(lambda match: "\n" if match.group(1) == "n" else match.group(1), value)


def _label_values(line: str) -> tuple[str, ...]:
    match = _RENDERED_LINE.match(line)
    assert match is not None  # we rendered it
    return tuple(_unescape(value) for value in match.groups())


class _Family:
    """Renders one family's series lines (without the metric name) in Go's order."""

    def __init__(self) -> None:
        self.escaped: dict[str, str] = {}
        self.tails: dict[tuple[str, str, str], str] = {}
        self.numbers: dict[float, str] = {}
        self.unsafe = False

    def _label(self, value: str) -> str:
        escaped = self.escaped.get(value)
        if escaped is None:
            escaped = value
            if _UNSAFE.search(value):
                self.unsafe = True
                escaped = escape_label_value(value)
            self.escaped[value] = escaped
        return escaped

    def lines(self, rows: Iterable[_Row]) -> list[str]:
        """The family's lines (label set, space, value), sorted as the Go client sorts the
        series: by label values in label-name order.

        O(n log n) for n rows: per row a few comparisons, two dict hits and one string
        build (a pod's label prefix is built once while its rows are consecutive); the sort
        runs in C over the lines, which orders them as their label values when no value
        holds a character sorting before ``"`` (checked; else they are sorted by values).
        """
        out: list[str] = []
        append = out.append
        numbers = self.numbers
        tails = self.tails
        label = self._label
        last_namespace = last_pod = last_node = last_priority = None
        head = ""
        for namespace, pod, node, scheduler, priority, resource, unit, value in rows:
            if value == 0:
                continue
            if (
                pod != last_pod
                or namespace != last_namespace
                or node != last_node
                or priority != last_priority
            ):
                last_namespace, last_pod, last_node, last_priority = namespace, pod, node, priority
                pod_label = pod
                if _UNSAFE.search(pod):
                    self.unsafe = True
                    pod_label = escape_label_value(pod)
                head = (
                    f'{{namespace="{label(namespace)}",node="{label(node)}",pod="{pod_label}",'
                    f'priority="{label(priority)}",resource="'
                )
            tail = tails.get((resource, scheduler, unit))
            if tail is None:
                tail = f'{label(resource)}",scheduler="{label(scheduler)}",unit="{label(unit)}"}} '
                tails[(resource, scheduler, unit)] = tail
            number = numbers.get(value)
            if number is None:
                number = format_go_float(value)
                numbers[value] = number
            append(f"{head}{tail}{number}")
        if self.unsafe:
            out.sort(key=_label_values)
        else:
            out.sort()
        return out


def _body(families: list[tuple[str, str, list[str]]]) -> bytes:
    """The exposition of ``(name, help, lines)`` families. A body of 50,000 pods is about
    36 MB: joining each family with ``"\\n" + name`` and then the families (two C joins)
    measured faster than one join over interleaved pieces."""
    parts: list[str] = []
    for name, help_text, lines in families:
        if lines:
            parts.append(f"# HELP {name} {help_text}\n# TYPE {name} gauge\n{name}")
            parts.append(f"\n{name}".join(lines))
            parts.append("\n")
    return "".join(parts).encode("utf-8")


def render_pod_resource_metrics(requests: Iterable[_Row], limits: Iterable[_Row]) -> bytes:
    """The KEP-1748 ``/metrics/resources`` body exactly as kube-scheduler serves it.

    Families in name order (``kube_pod_resource_limit`` first), each with its HELP/TYPE
    lines and only when it has a series; series sorted by label values in label-name order
    (``namespace, node, pod, priority, resource, scheduler, unit``), labels escaped as the
    Go client escapes them (``\\``, ``"``, newline), values formatted by
    :func:`format_go_float`; zero values are left out. Rows are consumed once and not kept;
    plain tuples in :class:`PodResourceRow`'s field order work too (and are cheaper to make).
    A caller walking per-pod records should use :func:`render_pod_resources` instead.

    Cost: O(n log n) for n rows (the sort runs in C over the rendered lines); about 1 us of
    Python per row.
    """
    limit_lines = _Family().lines(limits)
    request_lines = _Family().lines(requests)
    return _body([(_LIMIT, LIMIT_HELP, limit_lines), (_REQUEST, REQUEST_HELP, request_lines)])


class PodResources(NamedTuple):
    """One pod's ``/metrics/resources`` series: its labels and its request and limit of
    each resource (values as floats; zeros are left out)."""

    namespace: str
    pod: str
    node: str
    scheduler: str
    priority: str
    requests: Mapping[str, float]
    limits: Mapping[str, float]


def render_pod_resources(pods: Iterable[PodResources], *, unit: Callable[[str], str]) -> bytes:
    """The same body as :func:`render_pod_resource_metrics`, from one record per pod: the
    faster form for a caller that walks pod records (no row objects; each pod's label
    prefix is built once for both families and its lines are sorted as one block).

    ``unit`` gives a resource's ``unit`` label (``resource_model.resource_unit``). Cost:
    O(p log p) for p pods, about 1.5 us of Python per pod with two resources. Records are
    consumed once; only references to them are kept during the call.
    """
    escaped: dict[str, str] = {}
    tails: dict[str, dict[str, str]] = {}  # scheduler -> resource -> label tail
    numbers: dict[float, str] = {}
    seen: list[PodResources] = []
    heads: list[str] = []
    pod_names: list[str] = []
    unsafe = False

    def label(value: str) -> str:
        nonlocal unsafe
        if _UNSAFE.search(value):
            unsafe = True
        escaped[value] = value
        return value

    def scheduler_tails(scheduler: str) -> dict[str, str]:
        return tails.setdefault(scheduler, {})

    def block(
        head: str,
        values: Mapping[str, float],
        scheduler: str,
        by_resource: dict[str, str],
        sep: str,
    ) -> str:
        """A pod's lines of one family, in resource order (the one label that differs)."""
        lines = []
        for resource in sorted(values) if len(values) > 1 else values:
            value = values[resource]
            if value == 0:
                continue
            tail = by_resource.get(resource)
            if tail is None:
                tail = by_resource[resource] = (
                    f'{label(resource)}",scheduler="{label(scheduler)}",'
                    f'unit="{label(unit(resource))}"}} '
                )
            number = numbers.get(value)
            if number is None:
                number = numbers[value] = format_go_float(value)
            lines.append(f"{head}{tail}{number}")
        return sep.join(lines)

    request_chunks: list[str] = []
    limit_chunks: list[str] = []
    request_sep, limit_sep = "\n" + _REQUEST, "\n" + _LIMIT
    escaped_get, tails_get = escaped.get, tails.get
    add_request, add_limit = request_chunks.append, limit_chunks.append
    for record in pods:
        namespace, pod, node, scheduler, priority, requests, limits = record
        seen.append(record)
        pod_names.append(pod)
        head = (
            f'{{namespace="{escaped_get(namespace) or label(namespace)}",'
            f'node="{escaped_get(node) or label(node)}",pod="{pod}",'
            f'priority="{escaped_get(priority) or label(priority)}",resource="'
        )
        heads.append(head)
        by_resource = tails_get(scheduler) or scheduler_tails(scheduler)
        if requests and (text := block(head, requests, scheduler, by_resource, request_sep)):
            add_request(text)
        if limits and (text := block(head, limits, scheduler, by_resource, limit_sep)):
            add_limit(text)
    if unsafe or _UNSAFE.search("#".join(pod_names)) or len(set(heads)) != len(heads):
        # Escapes, characters sorting before '"', or a pod given twice: sort line by line.
        return render_pod_resource_metrics(
            _rows(seen, unit, limits=False), _rows(seen, unit, limits=True)
        )
    request_chunks.sort()
    limit_chunks.sort()
    return _body([(_LIMIT, LIMIT_HELP, limit_chunks), (_REQUEST, REQUEST_HELP, request_chunks)])


def _rows(
    pods: list[PodResources], unit: Callable[[str], str], *, limits: bool
) -> Iterator[PodResourceRow]:
    for namespace, pod, node, scheduler, priority, requests, limit_values in pods:
        for resource, value in (limit_values if limits else requests).items():
            yield PodResourceRow(
                namespace, pod, node, scheduler, priority, resource, unit(resource), value
            )
