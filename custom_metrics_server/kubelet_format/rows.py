"""The kubelet reader: a ``/metrics/resource`` body to the :class:`~.samples.UsageRows` the
usage store keeps, under metrics-server's rules, decoding only what it needs and nothing twice.

PURE: standard library only, no I/O, no clocks, no logging. This module owns
:func:`read_usage_rows`, the one reader of kubelet bodies (the scraper's, the demo's and the
tests'). It reads the container CPU, working-set and start-time series, the node's two series
and the scrape-error flags, which is all :mod:`usage.store` uses (the pod-level and swap
series are not read). A body in the kubelet's canonical layout is read here; any other goes
to :func:`.any_layout.read_any_layout`, line by line under the full grammar, whose docstring
states the decode rules and errors. The two give the same rows
(tests/kubelet_format/test_rows.py: kubelet bodies, upstream's samples, mutated bodies), with
two differences on bodies no kubelet writes (the kubelet's client_golang writes every family
once, as one group, in name order, as the text format requires): malformed lines of the
series it does not read are not noticed here (the line reader refuses the body for them), and
a line of a series it reads written outside its family's group (after another family's lines)
is not looked for, except for the start-time family when its group is missing.

**How it stays cheap.** A kubelet writes each family as one group of lines, ``name{container=
"c",namespace="n",pod="p"} value timestamp`` after its ``# HELP``/``# TYPE`` comments, CPU
first, then working set, then start time. Each group is found where the previous one ends
(its end is the next ``#``: one ``memchr``) and read by :func:`.runs.read_run`: one
pass in the optional C extension, or a split into tokens proven to be exactly that canonical
text by rebuilding it from its tokens, and C maps for the values. The node's lines follow the
swap group; the error flags are searched from the end; each of those lines is one more
:func:`~.runs.read_run`. Label text is decoded
into strings, and the working-set and start-time groups' series checked against the CPU
group's (same series, same order, as metrics-server pairs them), only when the fingerprint of
the CPU and working-set label texts differs from the one the caller knows for the node: on a
node whose pods did not change, no label string is made at all. The start-time group is
skipped whole when its bytes hash as last time. A body with an incomplete container (a CPU
counter or working set of zero: metrics-server drops its pod) is read the same way, its
labels decoded and the pod's rows dropped, without a layout. Any group not in that shape, a
duplicate series or a value that needs the grammar's judgement sends the whole body to
:func:`~.any_layout.read_any_layout` (the same result, slower).

A fingerprint is Python's 64-bit hash of the bytes: two different label texts of one node
taken for the same would need a hash collision (2**-64 per scrape); the rows would then keep
the previous scrape's pods for one scrape.

Cost: :func:`read_usage_rows` is O(len(body)) in C: ~10 C-level calls per group read and no
Python step per series (docs/performance.md, "Reading kubelet text"); plus O(series) to decode
label text when a node's pods changed (or a container is incomplete). A body in another layout
costs O(len(body)) in Python per line (:mod:`.any_layout`).
"""

from __future__ import annotations

import math
from typing import Final, NamedTuple

from custom_metrics_server.kubelet_format.any_layout import read_any_layout
from custom_metrics_server.kubelet_format.runs import NotCanonical, read_run, same_series
from custom_metrics_server.kubelet_format.samples import (
    CpuSample,
    MemorySample,
    NodeSample,
    PodKey,
    UsageRows,
)

__all__ = ["Known", "read_usage_rows"]

Known = tuple[tuple[int, int] | None, int | None]
"""What the caller knows of a node's last scrape: its ``layout`` and ``start_layout``."""

_CPU: Final = b"container_cpu_usage_seconds_total"
_MEMORY: Final = b"container_memory_working_set_bytes"
_START: Final = b"container_start_time_seconds"
_SWAP: Final = b"container_swap_usage_bytes{"
_NODE_CPU: Final = b"node_cpu_usage_seconds_total"
_NODE_MEMORY: Final = b"node_memory_working_set_bytes"
_SCRAPE_ERRORS: Final = (b"scrape_error", b"resource_scrape_error")
#: The canonical text before a container series' first quote (labels sorted by name).
_HEAD: Final = b'{container="'
_SPLIT_HEAD: Final = "container_cpu_usage_seconds_total{container="
_SEPARATORS: Final = (",namespace=", ",pod=")
_NAN: Final = math.nan
_NEWLINE: Final = ord("\n")


def _split_labels(raw: bytes, count: int) -> tuple[list[str], list[str], list[str]] | None:
    """The namespaces, pods and containers of ``count`` newline-separated CPU label tokens
    (``container_cpu_usage_seconds_total{container="c",namespace="ns",pod="p"}``), or None
    when any token is not in exactly that layout (or not UTF-8). O(len(raw)) in C."""
    if b"\\" in raw:
        return None
    try:
        labels = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    parts = labels.split('"')
    if len(parts) != 6 * count + 1 or parts[0] != _SPLIT_HEAD:
        return None
    ends = parts[6::6]
    if ends[-1] != "}" or ends.count("}\n" + _SPLIT_HEAD) != count - 1:
        return None
    for offset, separator in enumerate(_SEPARATORS):
        if parts[2 + 2 * offset :: 6].count(separator) != count:
            return None
    return parts[3::6], parts[5::6], parts[1::6]


def _comments_end(body: bytes, position: int) -> int:
    """Start of the first line at or after ``position`` that is not a comment. O(comments)."""
    while body.startswith(b"#", position):
        newline = body.find(b"\n", position)
        if newline < 0:
            return len(body)
        position = newline + 1
    return position


def _group(body: bytes, position: int, name: bytes) -> tuple[int, int] | None:
    """The family group of ``name`` that starts after the comments at ``position``: its
    first line's start and its end (the newline before the next comment line, or len);
    None when the next line that is not a comment is not a series of ``name`` in the
    canonical layout; :class:`NotCanonical` when a ``#`` in it does not start a line.
    O(len(group)) in C (one ``memchr``)."""
    first = _comments_end(body, position)
    if not body.startswith(name, first):
        return None
    end = body.find(b"#", first)
    if end < 0:
        return first, len(body)
    if body[end - 1] != _NEWLINE:
        raise NotCanonical
    return first, end - 1


def _complete(least: float, scale: float) -> bool:
    """metrics-server's completeness (``uint64(value * scale) > 0``) for every value of a run
    whose smallest is ``least`` (NaN, when a value is NaN, fails)."""
    return least * scale >= 1.0


def _single(
    body: bytes, name: bytes, tail: int, *, last: bool
) -> tuple[float, float | None] | None:
    """The value and timestamp (seconds) of an unlabelled series written on one line (``name
    value[ timestamp]``, single spaces) after ``tail`` (the first such line, or the ``last``),
    None when absent; :class:`NotCanonical` when written otherwise. O(len(body) - tail) in C
    at most."""
    needle = b"\n" + name + b" "
    found = body.rfind(needle, tail) if last else body.find(needle, tail)
    if found < 0:
        return None
    found += 1
    end = body.find(b"\n", found)
    _, values, times, _ = read_run(body, found, len(body) if end < 0 else end, name)
    return values[0], None if times is None else times[0]


def _when(seconds: float | None, default_time: float) -> float:
    return default_time if seconds is None else seconds


def _node(body: bytes, tail: int, default_time: float) -> NodeSample | None:
    cpu = _single(body, _NODE_CPU, tail, last=False)
    if cpu is None:
        return None
    memory = _single(body, _NODE_MEMORY, tail, last=False)
    if memory is None or not (cpu[0] * 1e9 >= 1.0 and memory[0] >= 1.0):
        return None
    return NodeSample(
        CpuSample(cpu[0], _when(cpu[1], default_time)),
        MemorySample(memory[0], _when(memory[1], default_time)),
    )


def _node_lines(body: bytes, tail: int, default_time: float) -> NodeSample | None:
    """The node's sample when its two series follow the container groups in the kubelet's
    order (after ``container_swap_usage_bytes``, if any, at ``tail``); else from a search."""
    position = _comments_end(body, tail)
    swap = _group(body, position, _SWAP)
    if swap is not None:
        position = _comments_end(body, swap[1] + 1)
    if not body.startswith(_NODE_CPU + b" ", position):
        return _node(body, tail, default_time)
    return _node(body, position - 1, default_time)


class _Containers(NamedTuple):
    """The CPU and working-set groups of a body."""

    labels: bytes
    memory_labels: bytes
    cpu: list[float]
    times: list[float]
    memory: list[float]
    tail: int  # the end of the working-set group
    complete: bool  # every container has a CPU counter and a working set (metrics-server's rule)


def _containers(body: bytes, default_time: float) -> _Containers:
    """The CPU and working-set groups (the first two); :class:`NotCanonical` unless both
    are canonical and stamped alike."""
    found = _group(body, 0, _CPU + _HEAD)
    if found is None:
        raise NotCanonical
    labels, cpu, stamped, least = read_run(body, found[0], found[1], _CPU + _HEAD)
    complete = _complete(least, 1e9)
    times = [default_time] * len(cpu) if stamped is None else stamped

    found = _group(body, found[1] + 1, _MEMORY + _HEAD)
    if found is None:
        raise NotCanonical
    # `memory_labels is labels` when the C reader proved them the same series as the CPU's
    memory_labels, memory, _, least = read_run(
        body, found[0], found[1], _MEMORY + _HEAD, (labels, _CPU + _HEAD)
    )
    complete = complete and _complete(least, 1.0)
    return _Containers(labels, memory_labels, cpu, times, memory, found[1], complete)


def _fast(body: bytes, default_time: float, known: Known | None) -> UsageRows:
    """The rows of a body in the kubelet's canonical layout; :class:`NotCanonical` else."""
    labels, memory_labels, cpu, times, memory, tail, complete = _containers(body, default_time)
    if not complete:
        known = None  # the rows are filtered below: name them, read every start
    rows = len(cpu)
    layout = (hash(labels), hash(memory_labels))
    pods: list[PodKey] | None = None
    containers: list[str] | None = None
    if known is None or known[0] != layout:
        if memory_labels is not labels and not same_series(
            memory_labels, labels, _MEMORY + _HEAD, _CPU + _HEAD
        ):
            raise NotCanonical
        split = _split_labels(labels, rows)
        if split is None:
            raise NotCanonical
        namespaces, names, containers_found = split
        pods = list(zip(namespaces, names, strict=True))
        if len(set(zip(pods, containers_found, strict=True))) != rows:
            raise NotCanonical  # a series written twice: upstream keeps the later one
        containers = containers_found

    starts: list[float] | None
    start_layout: int | None = None
    found = _group(body, tail + 1, _START + _HEAD)
    if found is None:
        if body.find(b"\n" + _START, tail) >= 0:
            raise NotCanonical  # written elsewhere, or in another layout
        starts = [_NAN] * rows
    else:
        tail = found[1]
        region = body[found[0] : tail]
        start_layout = hash(region)
        if known is not None and known[0] == layout and known[1] == start_layout:
            starts = None  # byte for byte the start series of the known scrape
        else:
            start_labels, starts, _, _ = read_run(
                body, found[0], tail, _START + _HEAD, (labels, _CPU + _HEAD)
            )
            if start_labels is not labels and not same_series(
                start_labels, labels, _START + _HEAD, _CPU + _HEAD
            ):
                raise NotCanonical
            if not math.isfinite(sum(starts)):
                starts = [value if math.isfinite(value) else _NAN for value in starts]

    scrape_error = False
    for name in _SCRAPE_ERRORS:
        flag = _single(body, name, tail, last=True)
        if flag is not None and flag[0] != 0:
            scrape_error = True
    rows_read = UsageRows(
        layout=layout,
        pods=pods,
        containers=containers,
        cpu=cpu,
        times=times,
        memory=memory,
        starts=starts,
        start_layout=start_layout,
        node=_node_lines(body, tail + 1, default_time),
        scrape_error=scrape_error,
    )
    return rows_read if complete else _without_incomplete(rows_read)


def _without_incomplete(rows: UsageRows) -> UsageRows:
    """``rows`` (named, with starts) without the pods that have an incomplete container (as
    metrics-server drops them) and without a layout, so that the next scrape names its rows
    again. O(rows)."""
    assert rows.pods is not None
    assert rows.containers is not None
    assert rows.starts is not None
    dropped = {
        pod
        for pod, cpu, memory in zip(rows.pods, rows.cpu, rows.memory, strict=True)
        if not (cpu * 1e9 >= 1.0 and memory >= 1.0)
    }
    kept = [index for index, pod in enumerate(rows.pods) if pod not in dropped]
    return UsageRows(
        layout=None,
        pods=[rows.pods[index] for index in kept],
        containers=[rows.containers[index] for index in kept],
        cpu=[rows.cpu[index] for index in kept],
        times=[rows.times[index] for index in kept],
        memory=[rows.memory[index] for index in kept],
        starts=[rows.starts[index] for index in kept],
        start_layout=None,
        node=rows.node,
        scrape_error=rows.scrape_error,
    )


def read_usage_rows(body: bytes, *, default_time: float, known: Known | None = None) -> UsageRows:
    """The usage rows of a kubelet ``/metrics/resource`` body under metrics-server's rules.

    ``default_time`` (Unix seconds) stamps samples written without a timestamp; ``known`` is
    the ``(layout, start_layout)`` of the node's last rows the caller kept: rows whose label
    text has that layout come without ``pods`` and ``containers`` (and without ``starts`` when
    the start series are unchanged too). Raises :class:`ValueError` naming the line for a
    malformed line of a series it reads (:func:`~.any_layout.read_any_layout`).

    Cost: O(len(body)) in C with no per-series Python for a kubelet's body (one C call per
    family read with the extension, ~10 without); O(series) more when the node's pods
    changed; a body in any other layout costs a parse line by line.
    """
    try:
        return _fast(body, default_time, known)
    except NotCanonical:
        return read_any_layout(body, default_time=default_time)
