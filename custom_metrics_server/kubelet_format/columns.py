"""The kubelet reader's scanner: a ``/metrics/resource`` body to columns of samples, fast.

PURE: standard library only, no I/O. This module owns the lexical half of reading a kubelet
body: finding the series of the metrics the reader knows (:data:`CONTAINER_METRICS`,
:data:`POD_METRICS`, the node's and ``scrape_error``) and decoding them into
:class:`Column`\\s (one per run of lines: metric, namespaces, pods, containers, values,
times) in file order, plus the node samples and the scrape-error flag (:class:`Columns`).
It must not decide which samples count (that is :mod:`.reader`, which follows
metrics-server's rules over these columns). A series is matched by the text of its line
exactly as upstream does: a line indented with spaces or tabs, or with whitespace between the
metric name and ``{``, names no metric and is skipped; comments and lines of other metrics are
skipped without being validated.

**Speed.** Kubelets write each family as one run of lines with identical label layout. The
scanner finds a run with a few C searches (no per-line Python), then decodes it on the raw
bytes with ``bytes.split``, slicing and ``map`` (C loops): the label text of the first run of
each layout is split once, and later runs (memory, start time) whose series are the same in
the same order are matched against it with one string comparison. Any run not in the
canonical layout (other label order, escapes, tabs, some lines without a timestamp) falls
back to the per-line grammar (:mod:`.lines`), which gives the same result.

Cost: :func:`read_columns` is O(len(body)), a few Python steps per *family* for kubelet
output; only comments, unlabelled lines and non-canonical runs are handled line by line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import repeat
from operator import truediv
from typing import Final, NamedTuple

from custom_metrics_server.kubelet_format.lines import line_error, parse_line
from custom_metrics_server.kubelet_format.samples import CpuSample, MemorySample

__all__ = [
    "CONTAINER_CPU",
    "CONTAINER_MEMORY",
    "CONTAINER_METRICS",
    "CONTAINER_START",
    "POD_CPU",
    "POD_MEMORY",
    "POD_METRICS",
    "Column",
    "Columns",
    "read_columns",
    "split_labels",
]

CONTAINER_CPU: Final = "container_cpu_usage_seconds_total"
CONTAINER_MEMORY: Final = "container_memory_working_set_bytes"
CONTAINER_START: Final = "container_start_time_seconds"
POD_CPU: Final = "pod_cpu_usage_seconds_total"
POD_MEMORY: Final = "pod_memory_working_set_bytes"
_NODE_CPU: Final = "node_cpu_usage_seconds_total"
_NODE_MEMORY: Final = "node_memory_working_set_bytes"
_SCRAPE_ERRORS: Final = frozenset({"scrape_error", "resource_scrape_error"})
CONTAINER_METRICS: Final = frozenset({CONTAINER_CPU, CONTAINER_MEMORY, CONTAINER_START})
POD_METRICS: Final = frozenset({POD_CPU, POD_MEMORY})
_KNOWN: Final = CONTAINER_METRICS | POD_METRICS | {_NODE_CPU, _NODE_MEMORY} | _SCRAPE_ERRORS

#: The text before the first quote of a canonical kubelet line (labels sorted by name, as
#: the Go client writes them) -> (metric, labels on the line).
_CANONICAL_HEADS: Final[dict[bytes, tuple[str, int]]] = {
    f"{name}{{container=".encode(): (name, 3) for name in CONTAINER_METRICS
} | {f"{name}{{namespace=".encode(): (name, 2) for name in POD_METRICS}
_CONTAINER_SEPARATORS: Final = (",namespace=", ",pod=")
_POD_SEPARATORS: Final = (",pod=",)
_NAME_END_BYTES: Final = re.compile(rb"[ \t{]")
_KNOWN_BYTES: Final = frozenset(name.encode() for name in _KNOWN)

_Labels = tuple[list[str], list[str], list[str] | None]  # namespaces, pods, containers


class Column(NamedTuple):
    """Series of one metric from one run of lines, in file order. ``containers`` is None
    for pod-level metrics; ``times`` None means every sample has the default time."""

    metric: str
    namespaces: list[str]
    pods: list[str]
    containers: list[str] | None
    values: list[float]
    times: list[float] | None


@dataclass(slots=True)
class Columns:
    """What a body holds: the columns of each container and pod metric in file order (later
    duplicates win when they are read, as in upstream's maps), the node's samples (None: not
    written) and whether any ``scrape_error`` series is non-zero."""

    default_time: float
    runs: dict[str, list[Column]] = field(
        default_factory=lambda: {name: [] for name in CONTAINER_METRICS | POD_METRICS}
    )
    node_cpu: CpuSample | None = None
    node_memory: MemorySample | None = None
    scrape_error: bool = False


def split_labels(raw: bytes, head: str, label_count: int, count: int) -> _Labels | None:
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


class _Scanner:
    """Decodes runs and lines into a :class:`Columns`."""

    def __init__(self, default_time: float) -> None:
        self.found = Columns(default_time)
        # The first validated label text per layout (3 labels or 2): later runs with the
        # same series in the same order share its columns after one string comparison.
        self._reference: dict[int, tuple[bytes, bytes, _Labels]] = {}
        self._stamps: tuple[bytes, list[float]] = (b"", [])

    def add(self, column: Column) -> None:
        """Record a decoded run."""
        self.found.runs[column.metric].append(column)

    def _labels(self, labels: bytes, head: bytes, label_count: int, count: int) -> _Labels | None:
        reference = self._reference.get(label_count)
        if reference is not None:
            reference_head, reference_labels, columns = reference
            expected = head + reference_labels[len(reference_head) :].replace(
                b"\n" + reference_head, b"\n" + head
            )
            if labels == expected:
                return columns
        columns_or_none = split_labels(labels, head.decode(), label_count, count)
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
        self.add(Column(metric, *columns, values, times))
        return True

    def line(self, line: str, lineno: int) -> None:
        """Record one line of a metric we read, with the full grammar. O(len(line))."""
        series = parse_line(line, lineno)
        if series is None:
            return
        name, labels, value, stamp = series
        if name not in _KNOWN:
            return
        when = self.found.default_time if stamp is None else stamp / 1000.0
        if name in _SCRAPE_ERRORS:
            self.found.scrape_error = self.found.scrape_error or value != 0
        elif name == _NODE_CPU:
            self.found.node_cpu = CpuSample(value, when)
        elif name == _NODE_MEMORY:
            self.found.node_memory = MemorySample(value, when)
        else:
            is_container = name in CONTAINER_METRICS
            for label in (
                ("namespace", "pod", "container") if is_container else ("namespace", "pod")
            ):
                if label not in labels:
                    raise line_error(lineno, line, f"missing label {label!r}")
            container = [labels["container"]] if is_container else None
            self.add(
                Column(name, [labels["namespace"]], [labels["pod"]], container, [value], [when])
            )


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


def read_columns(body: bytes, *, default_time: float) -> Columns:
    """The columns of a kubelet ``/metrics/resource`` body; samples written without a
    timestamp get ``default_time`` (Unix seconds). Raises :class:`ValueError` naming the line
    for a malformed line of a metric it reads (including one that is not UTF-8). O(len(body)).
    """
    decoder = _Scanner(default_time)
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
    return decoder.found
