"""Tests for kubelet_format.runs: the optional C reader of a run of kubelet series lines
answers as the pure-Python reader does (the same label text, values and timestamps, bit for
bit), or defers to it (None), on kubelet runs, upstream samples and mutated runs; and the
rows reader gives the same rows with either.
"""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custom_metrics_server.kubelet_format import runs as kubelet_runs
from custom_metrics_server.kubelet_format.rows import read_usage_rows
from custom_metrics_server.kubelet_format.runs import (
    SCANNER,
    NotCanonical,
    Run,
    read_run_python,
    same_series,
)
from tests.kubelet_format.test_any_layout import POD_MODEL, kubelet_body
from tests.kubelet_format.test_rows import SAMPLES, T0, content, farm, nodes

HEADS = [
    b'container_cpu_usage_seconds_total{container="',
    b'container_memory_working_set_bytes{container="',
    b'container_start_time_seconds{container="',
]

needs_c = pytest.mark.skipif(SCANNER is None, reason="the C reader was not built")


def bits(run: Run | None) -> object:
    """A run with its floats as bit patterns (NaN and -0.0 compare)."""
    if run is None:
        return None
    labels, values, times, least = run
    pack = [struct.pack("<d", v) for v in values]
    stamps = None if times is None else [struct.pack("<d", t) for t in times]
    return labels, pack, stamps, struct.pack("<d", least) if least == least else "nan"


def python(body: bytes, start: int, end: int, head: bytes) -> object:
    try:
        return bits(read_run_python(body, start, end, head))
    except NotCanonical:
        return "not canonical"


def agree(
    body: bytes, start: int, end: int, head: bytes, same_as: tuple[bytes, bytes] | None = None
) -> bool:
    """The C reader's answer is the pure-Python one's, or None (it defers); with a reference
    run, an answer is the reference itself and the pure-Python labels name the same series.
    True when it answered."""
    assert SCANNER is not None
    if same_as is None:
        answer = SCANNER(body, start, end, head)
        if answer is not None:
            assert bits(answer) == python(body, start, end, head)
        return answer is not None
    answer = SCANNER(body, start, end, head, *same_as)
    if answer is not None:
        labels, values, times, least = read_run_python(body, start, end, head)
        assert answer[0] is same_as[0]
        assert same_series(labels, same_as[0], head, same_as[1])
        assert bits(answer) == bits((answer[0], values, times, least))
    return answer is not None


def reference(body: bytes) -> tuple[bytes, bytes]:
    """The CPU run's label text and head, as the rows reader passes them."""
    start, end, head = runs(body)[0]
    return read_run_python(body, start, end, head)[0], head


def runs(body: bytes) -> list[tuple[int, int, bytes]]:
    """The (start, end, head) of each container family's run in a body."""
    found = []
    for head in HEADS:
        start = body.find(b"\n" + head)
        if start >= 0:
            end = body.find(b"\n#", start + 1)
            found.append((start + 1, len(body) if end < 0 else end, head))
    return found


@needs_c
def test_the_c_reader_reads_kubelet_runs_as_python_does() -> None:
    answered = 0
    for name in nodes():
        for body in (farm().body(name, T0), farm().exact_body(name, T0)):
            for start, end, head in runs(body):
                answered += agree(body, start, end, head)
                answered += agree(body, start, end, head, reference(body))
    assert answered == len(nodes()) * 2 * 3 * 2  # every kubelet run read in C


@needs_c
@pytest.mark.skipif(not SAMPLES.is_dir(), reason="kubelet samples not present")
def test_the_c_reader_reads_upstream_samples_as_python_does() -> None:
    for path in sorted(SAMPLES.glob("*.txt")):
        body = path.read_bytes()
        for start, end, head in runs(body):
            agree(body, start, end, head)


VALUE = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(lambda v: repr(v).encode()),
    st.integers(-(10**25), 10**25).map(lambda v: str(v).encode()),
    st.tuples(st.integers(0, 10**20), st.integers(0, 25), st.integers(-400, 400)).map(
        lambda t: f"{t[0]}e{t[2]}".encode() if t[1] == 0 else f"0.{t[0]:0{t[1]}d}e{t[2]}".encode()
    ),
    st.text("0123456789.eE+-_naifINF", min_size=1, max_size=12).map(str.encode),
)


@needs_c
@settings(max_examples=500, deadline=None)
@given(values=st.lists(VALUE, min_size=1, max_size=4), stamp=st.sampled_from([b"", b" 17"]))
def test_the_c_reader_reads_values_as_float_does(values: list[bytes], stamp: bytes) -> None:
    head = HEADS[0]
    body = b"\n".join(head + b'c",pod="p%d"} ' % i + v + stamp for i, v in enumerate(values))
    agree(body, 0, len(body), head)


@needs_c
@settings(max_examples=500, deadline=None)
@given(data=st.data())
def test_the_c_reader_reads_mutated_runs_as_python_does(data: st.DataObject) -> None:
    base = data.draw(st.sampled_from([farm().body(nodes()[0], T0), kubelet_body(POD_MODEL)]))
    start, end, head = data.draw(st.sampled_from(runs(base)))
    body = bytearray(base)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(start, end - 1))
        body[at : at + data.draw(st.integers(0, 3))] = data.draw(
            st.binary(max_size=3) | st.sampled_from([b" ", b"\t", b"\n", b"\r", b"  ", b"0"])
        )
    end += len(body) - len(base)
    agree(bytes(body), start, max(start, end), head)
    agree(bytes(body), start, max(start, end), head, reference(base))


@needs_c
def test_a_run_of_other_series_is_not_taken_for_the_reference() -> None:
    body = farm().body(nodes()[0], T0)
    cpu, memory, _ = runs(body)
    other = reference(farm().body(nodes()[1], T0))
    assert SCANNER is not None
    assert SCANNER(body, memory[0], memory[1], memory[2], *other) is None
    labels, _ = reference(body)
    shorter = labels[: labels.rindex(b"\n")]  # one series fewer
    assert SCANNER(body, memory[0], memory[1], memory[2], shorter, cpu[2]) is None
    assert SCANNER(body, memory[0], memory[1], memory[2], labels, cpu[2]) is not None


def test_rows_are_the_same_with_and_without_the_c_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    bodies = [farm().body(name, T0) for name in nodes()] + [kubelet_body(POD_MODEL)]
    with_c = [content(read_usage_rows(body, default_time=T0)) for body in bodies]
    monkeypatch.setattr(kubelet_runs, "SCANNER", None)
    without = [content(read_usage_rows(body, default_time=T0)) for body in bodies]
    assert with_c == without
    assert all(rows["series"] for rows in without)
    assert not any(math.isnan(rows["series"][key][0]) for rows in without for key in rows["series"])


@settings(max_examples=500, deadline=None)
@given(
    line=st.lists(
        st.sampled_from([b"node_cpu_usage_seconds_total", b"1.5", b"17", b"x", b"", b"NaN"]),
        max_size=4,
    ).map(b" ".join)
    | st.binary(max_size=12).map(lambda b: b"node_cpu_usage_seconds_total " + b)
)
def test_one_line_reads_as_the_general_python_reader_reads_it(line: bytes) -> None:
    """The one-line shortcut of the pure-Python reader (node and error lines) answers as its
    general case does."""
    head = b"node_cpu_usage_seconds_total"
    try:
        expected = bits(kubelet_runs._lines(line, line.split(), head))
    except NotCanonical:
        expected = "not canonical"
    assert python(line, 0, len(line), head) == expected
