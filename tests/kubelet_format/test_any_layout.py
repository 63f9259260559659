"""Tests for metrics-server's decode rules in the kubelet reader: kubelet_format.rows (the
production reader, ``read_usage_rows``) and the path it takes for bodies not in the kubelet's
layout, kubelet_format.any_layout (with the per-line grammar, kubelet_format.lines).

Every body goes through ``read_usage_rows``. It is checked against what the real
metrics-server decoded from upstream's own kubelet samples (``tests/fixtures/kubelet-samples/
decoded.json``), against itself (the canonical path and the line reader must agree on every
input) and for its error contract.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from custom_metrics_server.kubelet_format.any_layout import read_any_layout
from custom_metrics_server.kubelet_format.rows import read_usage_rows
from custom_metrics_server.kubelet_format.samples import (
    CpuSample,
    MemorySample,
    PodKey,
    UsageRows,
)

# Upstream's kubelet samples (metrics-server's test data), kept in the repo.
SAMPLES = Path(__file__).resolve().parent.parent / "fixtures" / "kubelet-samples"
DECODED: dict[str, Any] = (
    json.loads((SAMPLES / "decoded.json").read_text()) if SAMPLES.is_dir() else {"samples": []}
)
CPU = "container_cpu_usage_seconds_total"
MEMORY = "container_memory_working_set_bytes"
START = "container_start_time_seconds"


def nanos(seconds: float) -> int:
    """Go's ``time.Unix(0, ms*1e6)`` of a millisecond timestamp held as seconds."""
    return round(seconds * 1000) * 1_000_000


def default_time_of(sample: dict[str, Any]) -> float:
    return datetime.fromisoformat(sample["decode_call"]["default_time"]).timestamp()


Row = tuple[float, float, float, float | None]
"""A container's row: CPU seconds, the CPU sample's time, working set, start time (None: not
reported)."""


def container_pods(rows: UsageRows) -> dict[PodKey, dict[str, Row]]:
    """The pods metrics-server's decodeBatch would return, with their containers' rows."""
    assert rows.pods is not None
    assert rows.containers is not None
    assert rows.starts is not None
    pods: dict[PodKey, dict[str, Row]] = {}
    for pod, name, cpu, when, memory, start in zip(
        rows.pods, rows.containers, rows.cpu, rows.times, rows.memory, rows.starts, strict=True
    ):
        assert name not in pods.get(pod, {})
        pods.setdefault(pod, {})[name] = (cpu, when, memory, None if math.isnan(start) else start)
    return pods


def read(body: bytes, default_time: float) -> UsageRows:
    """``read_usage_rows`` of ``body``, checked to agree with the line reader (the same
    pods, values and errors)."""
    try:
        expected = read_any_layout(body, default_time=default_time)
    except ValueError as err:
        with pytest.raises(ValueError, match=re.escape(str(err))):
            read_usage_rows(body, default_time=default_time)
        raise
    rows = read_usage_rows(body, default_time=default_time)
    assert container_pods(rows) == container_pods(expected)
    assert (rows.node, rows.scrape_error) == (expected.node, expected.scrape_error)
    return rows


# --- against metrics-server's own decoding ------------------------------------------------


@pytest.mark.skipif(not DECODED["samples"], reason="shared kubelet samples not present")
@pytest.mark.parametrize("sample", [pytest.param(s, id=s["file"]) for s in DECODED["samples"]])
def test_every_kubelet_sample_decodes_as_metrics_server_decodes_it(sample: dict[str, Any]) -> None:
    body = (SAMPLES / sample["file"]).read_bytes()
    expected = sample["decoded_by_real_metrics_server"]
    if expected["error"] is not None:
        # Upstream refuses the whole body; so do we, naming the same problem.
        with pytest.raises(ValueError, match="expected timestamp or new record"):
            read(body, default_time_of(sample))
        return
    scrape = read(body, default_time_of(sample))
    nodes = expected["batch"]["nodes"]
    if nodes:
        want = nodes["node1"]
        assert scrape.node is not None
        assert (
            int(scrape.node.cpu.seconds_total * 1e9) == want["cumulative_cpu_used_nanocore_seconds"]
        )
        assert int(scrape.node.memory.bytes) == want["memory_usage_bytes"]
        assert want["timestamp_unix_nano"] in {
            nanos(scrape.node.cpu.timestamp),
            nanos(scrape.node.memory.timestamp),
        }
    else:
        assert scrape.node is None
    want_pods = {(p["namespace"], p["name"]): p["containers"] for p in expected["batch"]["pods"]}
    got_pods = container_pods(scrape)
    assert set(got_pods) == set(want_pods)
    for key, containers in want_pods.items():
        assert set(got_pods[key]) == set(containers)
        for name, want in containers.items():
            cpu, when, memory, start_time = got_pods[key][name]
            assert int(cpu * 1e9) == want["cumulative_cpu_used_nanocore_seconds"]
            assert int(memory) == want["memory_usage_bytes"]
            # metrics-server keeps one timestamp per point, the last line's (memory's); the
            # rows keep the CPU counter's, which the rate needs. A kubelet stamps both alike.
            assert want["timestamp_unix_nano"] == nanos(when)
            start = None if start_time is None else int(start_time * 1e9)
            assert start == want["start_time_unix_nano"]


def test_the_samples_cover_the_upstream_cases_this_module_claims() -> None:
    if not DECODED["samples"]:
        pytest.skip("shared kubelet samples not present")
    names = {s["file"] for s in DECODED["samples"]}
    assert len(names) == DECODED["counts"]["sample_files"] == 32
    assert any("no_container_cpu_drops" in n for n in names)
    assert any("incorrect_timestamp" in n for n in names)


# --- decode rules -------------------------------------------------------------------------


def line(metric: str, value: str, stamp: str | None = "1700000000123", **labels: str) -> str:
    """One kubelet series line with labels in the order given."""
    label_text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    body = f"{metric}{{{label_text}}}" if labels else metric
    return f"{body} {value}" + (f" {stamp}" if stamp is not None else "")


def container(
    metric: str,
    value: str,
    stamp: str | None = "1700000000123",
    *,
    pod: str = "p",
    name: str = "c",
    namespace: str = "ns",
) -> str:
    return line(metric, value, stamp, container=name, namespace=namespace, pod=pod)


def parse(*lines: str, default_time: float = 42.0) -> UsageRows:
    return read(("\n".join(lines) + "\n").encode(), default_time)


def sample(rows: UsageRows, pod: str = "p", name: str = "c") -> Row:
    return container_pods(rows)["ns", pod][name]


def test_a_complete_container_gives_its_cpu_counter_with_its_time_and_its_working_set() -> None:
    scrape = parse(
        container(CPU, "4.5", "1700000000123"),
        container(MEMORY, "1.25e+07", "1700000001000"),
        container(START, "1.6999e+09", None),
    )
    assert sample(scrape) == (4.5, 1700000000.123, 12_500_000.0, 1.6999e9)


def test_samples_without_a_timestamp_get_the_default_time() -> None:
    scrape = parse(
        container(CPU, "1", None),
        container(MEMORY, "2", None),
        "node_cpu_usage_seconds_total 10",
        "node_memory_working_set_bytes 9",
        default_time=77.5,
    )
    assert sample(scrape)[1] == 77.5
    assert scrape.node is not None
    assert (scrape.node.cpu.timestamp, scrape.node.memory.timestamp) == (77.5, 77.5)


def test_a_family_mixing_lines_with_and_without_timestamps_keeps_each_line_s_own() -> None:
    scrape = parse(
        container(CPU, "1", "5000", pod="a"),
        container(CPU, "1", None, pod="b"),
        container(MEMORY, "2", None, pod="a"),
        container(MEMORY, "2", "9000", pod="b"),
        default_time=1.0,
    )
    assert sample(scrape, "a")[1] == 5.0
    assert sample(scrape, "b")[1] == 1.0


@pytest.mark.parametrize(
    ("lines", "why"),
    [
        pytest.param([container(MEMORY, "5")], "no cpu", id="no-cpu"),
        pytest.param([container(CPU, "5")], "no memory", id="no-memory"),
        pytest.param([container(CPU, "0"), container(MEMORY, "5")], "zero cpu", id="zero-cpu"),
        pytest.param(
            [container(CPU, "5e-10"), container(MEMORY, "5")], "under 1 ns", id="sub-nano"
        ),
        pytest.param(
            [container(CPU, "5"), container(MEMORY, "0.5")], "under 1 byte", id="sub-byte"
        ),
        pytest.param([container(CPU, "NaN"), container(MEMORY, "5")], "NaN cpu", id="nan-cpu"),
        pytest.param([container(CPU, "-1"), container(MEMORY, "5")], "negative", id="negative"),
        pytest.param([container(START, "1e9", None)], "start time only", id="start-only"),
    ],
)
def test_an_incomplete_container_drops_its_pod_as_metrics_server_does(
    lines: list[str], why: str
) -> None:
    other = [container(CPU, "1", name="ok"), container(MEMORY, "1", name="ok")]
    scrape = parse(*other, *lines)
    assert container_pods(scrape) == {}, why


def test_an_incomplete_container_in_one_pod_leaves_other_pods_alone() -> None:
    scrape = parse(
        container(CPU, "1", pod="good"),
        container(CPU, "0", pod="bad"),
        container(MEMORY, "1", pod="good"),
        container(MEMORY, "1", pod="bad"),
    )
    assert set(container_pods(scrape)) == {("ns", "good")}


def test_the_node_needs_both_a_cpu_counter_and_a_working_set() -> None:
    assert parse("node_cpu_usage_seconds_total 10 1000").node is None
    assert parse("node_memory_working_set_bytes 10 1000").node is None
    assert (
        parse("node_cpu_usage_seconds_total 0 1", "node_memory_working_set_bytes 9 1").node is None
    )
    node = parse(
        "node_cpu_usage_seconds_total 10 1000", "node_memory_working_set_bytes 9 2000"
    ).node
    assert node is not None
    assert node.cpu == CpuSample(10.0, 1.0)
    assert node.memory == MemorySample(9.0, 2.0)


def test_pod_level_series_are_validated_and_not_kept_as_metrics_server_ignores_them() -> None:
    scrape = parse(
        container(CPU, "1"),
        container(MEMORY, "2"),
        line("pod_cpu_usage_seconds_total", "3", "4000", namespace="ns", pod="p"),
        line("pod_memory_working_set_bytes", "5", "6000", namespace="ns", pod="p"),
        line("pod_cpu_usage_seconds_total", "7", "8000", namespace="ns", pod="alone"),
    )
    assert container_pods(scrape) == {("ns", "p"): {"c": (1.0, 1700000000.123, 2.0, None)}}
    with pytest.raises(ValueError, match="line 3: missing label 'pod'"):
        parse(
            container(CPU, "1"),
            container(MEMORY, "2"),
            line("pod_cpu_usage_seconds_total", "3", namespace="ns"),
        )


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        pytest.param(["scrape_error 1"], True, id="alpha-name"),
        pytest.param(["resource_scrape_error 1"], True, id="stable-name"),
        pytest.param(["scrape_error 0", "resource_scrape_error 0"], False, id="both-zero"),
        pytest.param([], False, id="absent"),
    ],
)
def test_the_kubelet_scrape_error_flag_is_read(lines: list[str], expected: bool) -> None:
    assert parse(*lines).scrape_error is expected


def test_non_finite_start_times_count_as_not_reported() -> None:
    scrape = parse(
        container(CPU, "1", pod="a"),
        container(CPU, "1", pod="b"),
        container(MEMORY, "1", pod="a"),
        container(MEMORY, "1", pod="b"),
        container(START, "NaN", None, pod="a"),
        container(START, "+Inf", None, pod="b"),
    )
    assert sample(scrape, "a")[3] is None
    assert sample(scrape, "b")[3] is None


def test_infinite_values_are_kept_as_upstream_keeps_them() -> None:
    scrape = parse(container(CPU, "+Inf"), container(MEMORY, "Inf"))
    cpu, _, memory, _ = sample(scrape)
    assert math.isinf(cpu)
    assert math.isinf(memory)


def test_label_values_are_unescaped_and_unknown_escapes_kept() -> None:
    name = r"we\"ird\\na\nme\t"
    scrape = parse(container(CPU, "1", name=name), container(MEMORY, "1", name=name))
    assert list(container_pods(scrape)["ns", "p"]) == ['we"ird\\na\nme\\t']


def test_labels_in_any_order_and_extra_labels_give_the_same_result() -> None:
    canonical = parse(container(CPU, "1.5"), container(MEMORY, "2"))
    shuffled = parse(
        line(CPU, "1.5", "1700000000123", pod="p", extra="x", namespace="ns", container="c"),
        f'{MEMORY}{{ namespace = "ns" , pod="p",container="c", }}\t2\t1700000000123',
    )
    assert container_pods(shuffled) == container_pods(canonical)


def test_lines_upstream_does_not_match_to_a_metric_are_skipped() -> None:
    scrape = parse(
        "\t" + container(CPU, "1"),  # indented: upstream's series text starts with a tab
        f'{MEMORY} {{container="c",namespace="ns",pod="p"}} 1',  # space before the brace
        "  node_cpu_usage_seconds_total 10 1",
        "node_memory_working_set_bytes 10 1",
    )
    assert container_pods(scrape) == {}
    assert scrape.node is None


def test_comments_blank_lines_and_other_metrics_are_skipped_without_validation() -> None:
    scrape = parse(
        "",
        '# HELP container_cpu_usage_seconds_total [STABLE] help with {braces} and "quotes',
        "# TYPE container_cpu_usage_seconds_total counter",
        "#no space comment",
        'container_swap_usage_bytes{container="c",namespace="ns",pod="p"} not-a-number',
        "some_other_metric{{{ garbage",
        container(CPU, "1"),
        container(MEMORY, "1"),
    )
    assert set(container_pods(scrape)) == {("ns", "p")}


def test_later_duplicates_win_as_in_upstream_maps() -> None:
    scrape = parse(
        container(CPU, "1"), container(MEMORY, "1"), container(CPU, "9"), container(MEMORY, "8")
    )
    cpu, _, memory, _ = sample(scrape)
    assert (cpu, memory) == (9.0, 8.0)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        pytest.param(container(CPU, "abc"), "invalid value", id="value"),
        pytest.param(container(CPU, "1_0"), "invalid value", id="underscore"),
        pytest.param(container(CPU, "1", "-5"), "expected timestamp", id="negative-stamp"),
        pytest.param(container(CPU, "1", "1.5"), "expected timestamp", id="fraction-stamp"),
        pytest.param(container(CPU, "1", "99999999999999999999"), "out of range", id="overflow"),
        pytest.param(container(CPU, "1", "2") + " 3", "after timestamp", id="extra-field"),
        pytest.param(container(CPU, "1") + "\r", "expected timestamp", id="carriage-return"),
        pytest.param(container(CPU, "1\x0c2", None), "invalid value", id="form-feed"),
        pytest.param(
            f'{CPU}{{container="c",namespace="ns",pod="p"}}', "expected value", id="no-value"
        ),
        pytest.param(
            f'{CPU}{{container="c",namespace="ns",pod="p}} 1', "unterminated", id="open-quote"
        ),
        pytest.param(f'{CPU}{{container="c" namespace="ns"}} 1', "expected ','", id="no-comma"),
        pytest.param(f"{CPU}{{container=c}} 1", "quoted", id="unquoted"),
        pytest.param(f'{CPU}{{1x="c"}} 1', "label name", id="label-name"),
        pytest.param(f'{CPU}{{a="1",a="2"}} 1', "duplicate", id="duplicate-label"),
        pytest.param(
            line(CPU, "1", namespace="ns", pod="p"), "missing label 'container'", id="missing"
        ),
        pytest.param("node_cpu_usage_seconds_total", "expected value", id="bare-name"),
        pytest.param("scrape_error x", "invalid value", id="scrape-error"),
    ],
)
def test_a_malformed_line_of_a_metric_we_read_raises_value_error_naming_it(
    bad: str, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as caught:
        parse(container(MEMORY, "1"), bad)
    assert "line 2" in str(caught.value)


def test_a_bad_line_inside_a_canonical_run_is_reported_with_its_line_number() -> None:
    lines = [container(CPU, str(i + 1), pod=f"p{i}") for i in range(50)]
    lines[37] = container(CPU, "oops", pod="p37")
    with pytest.raises(ValueError, match="line 38: invalid value 'oops'"):
        parse(*lines)


def test_invalid_utf8_in_a_line_we_read_is_a_value_error_and_elsewhere_ignored() -> None:
    good = (container(CPU, "1") + "\n" + container(MEMORY, "1") + "\n").encode()
    ignored = b'# HELP x \xff\xfe\nother_metric{a="\xff"} 1\n' + good
    assert set(container_pods(read(ignored, 0))) == {("ns", "p")}
    bad = good + container(CPU, "1", pod="x").encode().replace(b"x", b"\xff") + b"\n"
    with pytest.raises(ValueError, match="UTF-8"):
        read(bad, 0)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_raise_anything_but_value_error(body: bytes) -> None:
    with contextlib.suppress(ValueError):
        assert isinstance(read_usage_rows(body, default_time=0), UsageRows)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_mutated_kubelet_bodies_never_raise_anything_but_value_error(data: st.DataObject) -> None:
    body = bytearray(kubelet_body(POD_MODEL))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(body) - 1))
        body[at : at + data.draw(st.integers(0, 3))] = data.draw(st.binary(max_size=3))
    with contextlib.suppress(ValueError):
        assert isinstance(read_usage_rows(bytes(body), default_time=0), UsageRows)


# --- the canonical path and the line reader agree ------------------------------------------

Model = dict[tuple[str, str], dict[str, tuple[float, int, float, int, float | None]]]

POD_MODEL: Model = {
    ("kube-system", "coredns-1"): {"coredns": (4.71, 1700000001001, 1.25e7, 1700000001001, 1.6e9)},
    ("default", "web-2"): {
        "app": (10.5, 1700000002002, 3.5e8, 1700000002002, 1.6e9),
        "istio-proxy": (2.25, 1700000002003, 6.5e7, 1700000002003, None),
    },
}


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def kubelet_body(model: Model, *, order: str = "canonical", seed: int = 0) -> bytes:
    """A body as a kubelet writes it (families sorted, labels sorted) or perturbed:
    ``shuffled`` label order and line order within families, ``tabs`` as separators."""
    rows = sorted(
        (name, ns, pod, sample)
        for (ns, pod), containers in model.items()
        for name, sample in containers.items()
    )
    rng = random.Random(seed)
    out: list[str] = []

    def series(metric: str, name: str, ns: str, pod: str, value: float, stamp: int | None) -> str:
        labels = [("container", name), ("namespace", ns), ("pod", pod)]
        if order == "shuffled":
            rng.shuffle(labels)
        text = ",".join(f'{k}="{escape(v)}"' for k, v in labels)
        sep = "\t" if order == "tabs" else " "
        tail = f"{sep}{stamp}" if stamp is not None else ""
        return f"{metric}{{{text}}}{sep}{value!r}{tail}\n"

    columns = {
        CPU: [(n, ns, p, s[0], s[1]) for n, ns, p, s in rows],
        MEMORY: [(n, ns, p, s[2], s[3]) for n, ns, p, s in rows],
    }
    for metric, entries in columns.items():
        out.append(f"# HELP {metric} [STABLE] help\n# TYPE {metric} gauge\n")
        lines = [series(metric, n, ns, p, value, at) for n, ns, p, value, at in entries]
        if order == "shuffled":
            rng.shuffle(lines)
        out.extend(lines)
    out.append(f"# HELP {START} [STABLE] help\n")
    out.extend(series(START, n, ns, p, s[4], None) for n, ns, p, s in rows if s[4] is not None)
    out.append("# HELP scrape_error [ALPHA] 1 if there was an error\n# TYPE scrape_error gauge\n")
    out.append("scrape_error 0\n")
    return "".join(out).encode()


def expected_scrape(model: Model) -> dict[tuple[str, str], dict[str, Row]]:
    return {
        key: {
            name: (cpu, cpu_ms / 1000, memory, start)
            for name, (cpu, cpu_ms, memory, _, start) in containers.items()
        }
        for key, containers in model.items()
        if containers
    }


names = st.text(alphabet='abcz-.0\\"\n é', min_size=1, max_size=8)
models = st.dictionaries(
    st.tuples(names, names),
    st.dictionaries(
        names,
        st.tuples(
            st.floats(1e-6, 1e9),
            st.integers(0, 2**50),
            st.floats(1, 1e12),
            st.integers(0, 2**50),
            st.none() | st.floats(0, 2e9),
        ),
        min_size=1,
        max_size=3,
    ),
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(model=models, order=st.sampled_from(["canonical", "shuffled", "tabs"]), seed=st.integers())
def test_any_layout_of_a_body_decodes_to_the_series_it_holds(
    model: Model, order: str, seed: int
) -> None:
    scrape = read(kubelet_body(model, order=order, seed=seed), 0)
    assert container_pods(scrape) == expected_scrape(model)


def test_the_canonical_and_the_per_line_paths_agree_on_a_large_body() -> None:
    model: Model = {
        (f"ns-{p % 7}", f"pod-{p}"): {
            f"c{c}": (1.0 + p + c / 8, 1700000000000 + p, 1e6 + p, 1700000000000 + p, 1.6e9 + c)
            for c in range(1 + p % 3)
        }
        for p in range(400)
    }
    canonical = read(kubelet_body(model), 0)
    assert canonical.layout is not None  # the canonical path
    per_line = read(kubelet_body(model, order="tabs"), 0)
    assert per_line.layout is None  # the line reader
    assert container_pods(canonical) == container_pods(per_line) == expected_scrape(model)


@pytest.mark.parametrize(
    ("cpu", "memory"),
    [
        pytest.param(0.0, 1e6, id="zero-cpu"),
        pytest.param(2.0, 0.0, id="zero-memory"),
        pytest.param(math.nan, 1e6, id="nan-cpu"),
        pytest.param(2.0, -1.0, id="negative-memory"),
    ],
)
def test_an_incomplete_container_in_a_kubelet_body_drops_its_pod_on_the_canonical_path(
    cpu: float, memory: float
) -> None:
    model: Model = {
        (f"ns-{p % 3}", f"pod-{p}"): {
            f"c{c}": (1.0 + p, 1700000000000, 1e6 + p, 1700000000000, 1.6e9 + c)
            for c in range(1 + p % 2)
        }
        for p in range(20)
    }
    model["ns-1", "pod-7"]["c1"] = (cpu, 1700000000000, memory, 1700000000000, None)
    body = kubelet_body(model)
    rows = read(body, 0)
    assert rows.layout is None  # named afresh at the next scrape
    del model["ns-1", "pod-7"]
    assert container_pods(rows) == expected_scrape(model)
    known = read_usage_rows(kubelet_body(model), default_time=0)
    assert known.layout is not None
    again = read_usage_rows(body, default_time=0, known=(known.layout, known.start_layout))
    assert container_pods(again) == expected_scrape(model)  # what it knows does not count
