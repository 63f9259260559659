"""Tests for resources.exposition (kube-scheduler's ``/metrics/resources``) and machinery.promtext.

Rendering is checked byte for byte against kube-scheduler's format and round-tripped
through ``prometheus_client``'s parser.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from custom_metrics_server.machinery.promtext import format_go_float
from custom_metrics_server.resources.exposition import (
    LIMIT_HELP,
    REQUEST_HELP,
    PodResourceRow,
    render_pod_resource_metrics,
)
from custom_metrics_server.resources.exposition_stream import stream_pod_resources

# --- rendering ----------------------------------------------------------------------------

REQUEST_HEADER = (
    "# HELP kube_pod_resource_request [STABLE] Resources requested by workloads on the cluster,"
    " broken down by pod. This shows the resource usage the scheduler and kubelet expect per"
    " pod for resources along with the unit for the resource if any.\n"
    "# TYPE kube_pod_resource_request gauge\n"
)
LIMIT_HEADER = (
    "# HELP kube_pod_resource_limit [STABLE] Resources limit for workloads on the cluster,"
    " broken down by pod. This shows the resource usage the scheduler and kubelet expect per"
    " pod for resources along with the unit for the resource if any.\n"
    "# TYPE kube_pod_resource_limit gauge\n"
)


def row(
    ns: str,
    pod: str,
    resource: str,
    value: float,
    *,
    node: str = "node-1",
    priority: str = "0",
    scheduler: str = "default-scheduler",
) -> PodResourceRow:
    unit = {"cpu": "cores", "memory": "bytes"}.get(resource, "")
    return PodResourceRow(ns, pod, node, scheduler, priority, resource, unit, value)


def test_the_exposition_is_byte_for_byte_kube_scheduler_s() -> None:
    requests = [
        row("ns", "b", "memory", 134217728.0),
        row("ns", "b", "cpu", 0.1),
        row("ns", "a", "cpu", 2.0, node="node-2", priority=""),
        row("ns", "a", "nvidia.com/gpu", 1.0, node="node-2", priority=""),
        row("ns", "zero", "cpu", 0.0),
    ]
    limits = [row("ns", "b", "memory", 268435456.0)]
    expected = (
        LIMIT_HEADER + 'kube_pod_resource_limit{namespace="ns",node="node-1",pod="b",priority="0",'
        'resource="memory",scheduler="default-scheduler",unit="bytes"} 2.68435456e+08\n'
        + REQUEST_HEADER
        + 'kube_pod_resource_request{namespace="ns",node="node-1",pod="b",priority="0",'
        'resource="cpu",scheduler="default-scheduler",unit="cores"} 0.1\n'
        'kube_pod_resource_request{namespace="ns",node="node-1",pod="b",priority="0",'
        'resource="memory",scheduler="default-scheduler",unit="bytes"} 1.34217728e+08\n'
        'kube_pod_resource_request{namespace="ns",node="node-2",pod="a",priority="",'
        'resource="cpu",scheduler="default-scheduler",unit="cores"} 2\n'
        'kube_pod_resource_request{namespace="ns",node="node-2",pod="a",priority="",'
        'resource="nvidia.com/gpu",scheduler="default-scheduler",unit=""} 1\n'
    )
    assert render_pod_resource_metrics(iter(requests), iter(limits)).decode() == expected


def test_help_texts_are_kube_scheduler_s_with_the_stability_prefix() -> None:
    assert (
        f"# HELP kube_pod_resource_request {REQUEST_HELP}\n"
        == REQUEST_HEADER.split("# TYPE", maxsplit=1)[0]
    )
    assert (
        f"# HELP kube_pod_resource_limit {LIMIT_HELP}\n"
        == LIMIT_HEADER.split("# TYPE", maxsplit=1)[0]
    )


def test_families_without_series_are_left_out() -> None:
    assert render_pod_resource_metrics([], []) == b""
    only_requests = render_pod_resource_metrics([row("ns", "p", "cpu", 1.0)], [])
    assert only_requests.startswith(REQUEST_HEADER.encode())
    assert b"kube_pod_resource_limit" not in only_requests
    assert (
        render_pod_resource_metrics([row("ns", "p", "cpu", 0.0)], [row("n", "p", "cpu", -0.0)])
        == b""
    )


def test_label_values_are_escaped_as_the_go_client_escapes_them() -> None:
    text = render_pod_resource_metrics([row('a"b\\c\nd', "p", "cpu", 1.0)], []).decode()
    assert 'namespace="a\\"b\\\\c\\nd"' in text


def test_series_are_sorted_by_label_values_even_with_characters_before_the_quote() -> None:
    pods = ["a", "a b", "a!", "a-b", "a\\", "a\n", 'a"']
    text = render_pod_resource_metrics([row("ns", p, "cpu", 1.0) for p in pods], []).decode()
    families = list(text_string_to_metric_families(text))
    got = [s.labels["pod"] for s in families[0].samples]
    assert got == sorted(pods)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0"),
        (-0.0, "0"),
        (1.0, "1"),
        (-1.0, "-1"),
        (0.1, "0.1"),
        (1.5, "1.5"),
        (-2.0, "-2"),
        (100000.0, "100000"),
        (123456.0, "123456"),
        (999999.0, "999999"),
        (1e6, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (134217728.0, "1.34217728e+08"),
        (1e21, "1e+21"),
        (1e100, "1e+100"),
        (0.0001, "0.0001"),
        (0.000123, "0.000123"),
        (1e-05, "1e-05"),
        (2.5e-05, "2.5e-05"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (math.nan, "NaN"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
    ],
)
def test_values_are_formatted_as_go_formats_them(value: float, text: str) -> None:
    assert format_go_float(value) == text


GO_FLOAT = re.compile(r"-?(?:\d+(?:\.\d+)?|\d(?:\.\d+)?e[+-]\d{2,3})")


@given(st.floats(allow_nan=False, allow_infinity=False).filter(lambda v: v != 0))
def test_formatted_values_are_the_shortest_digits_in_go_s_shape(value: float) -> None:
    text = format_go_float(value)
    assert float(text) == value
    assert GO_FLOAT.fullmatch(text), text
    shortest = Decimal(repr(value)).normalize()  # Python's repr: the shortest round-trip digits
    mantissa, _, _ = text.lstrip("-").partition("e")
    assert mantissa.replace(".", "").strip("0") == "".join(map(str, shortest.as_tuple().digits))
    assert ("e" in text) == (shortest.adjusted() < -4 or shortest.adjusted() >= 6)


label_values = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], max_codepoint=0x2FF), max_size=10
)
row_keys = st.tuples(
    label_values,
    label_values,
    label_values,
    label_values,
    label_values,
    st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "hugepages-2Mi"]),
)
rows_strategy = st.dictionaries(
    row_keys, st.floats(allow_nan=False, allow_infinity=False, width=64), max_size=25
)


@settings(max_examples=150, deadline=None)
@given(requests=rows_strategy, limits=rows_strategy)
def test_rendered_text_parses_back_with_prometheus_client_to_the_same_series(
    requests: dict[tuple[str, ...], float], limits: dict[tuple[str, ...], float]
) -> None:
    def rows(table: dict[tuple[str, ...], float]) -> list[PodResourceRow]:
        return [
            PodResourceRow(ns, pod, node, sched, prio, res, "u", v)
            for (ns, pod, node, sched, prio, res), v in table.items()
        ]

    text = render_pod_resource_metrics(rows(requests), rows(limits)).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name, table, help_text in (
        ("kube_pod_resource_request", requests, REQUEST_HELP),
        ("kube_pod_resource_limit", limits, LIMIT_HELP),
    ):
        wanted = {k: v for k, v in table.items() if v != 0}
        if not wanted:
            assert name not in families
            continue
        family = families[name]
        assert (family.type, family.documentation) == ("gauge", help_text)
        got = {
            (
                s.labels["namespace"],
                s.labels["pod"],
                s.labels["node"],
                s.labels["scheduler"],
                s.labels["priority"],
                s.labels["resource"],
            ): s.value
            for s in family.samples
        }
        assert got == wanted
        assert all(s.labels["unit"] == "u" and s.name == name for s in family.samples)
        order = [
            tuple(
                s.labels[k]
                for k in ("namespace", "node", "pod", "priority", "resource", "scheduler", "unit")
            )
            for s in family.samples
        ]
        assert order == sorted(order)
    assert list(families) == sorted(families)
    assert text == "" or text.endswith("\n")


Labels = tuple[str, str, str, str, str]


@dataclass(frozen=True)
class Record:
    """A pod's record as the stream reads it."""

    namespace: str
    name: str
    node: str
    scheduler: str
    priority: str
    metric_requests: dict[str, float]
    metric_limits: dict[str, float]


def streamed(records: list[Record], chunk_bytes: int = 64) -> bytes:
    return b"".join(stream_pod_resources(records, unit=unit_of, chunk_bytes=chunk_bytes))


def records_of(table: dict[tuple[str, ...], float]) -> dict[Labels, dict[str, float]]:
    """Per-pod request maps from a (namespace, pod, node, scheduler, priority, resource)
    table."""
    pods: dict[Labels, dict[str, float]] = {}
    for (namespace, pod, node, scheduler, priority, resource), value in table.items():
        pods.setdefault((namespace, pod, node, scheduler, priority), {})[resource] = value
    return pods


def unit_of(resource: str) -> str:
    return {"cpu": "cores", "memory": "bytes"}.get(resource, "")


@settings(max_examples=150, deadline=None)
@given(requests=rows_strategy, limits=rows_strategy, repeat=st.booleans())
def test_streaming_per_pod_records_gives_the_same_bytes_as_rows(
    requests: dict[tuple[str, ...], float], limits: dict[tuple[str, ...], float], repeat: bool
) -> None:
    request_pods, limit_pods = records_of(requests), records_of(limits)
    records = [
        Record(*key, request_pods.get(key, {}), limit_pods.get(key, {}))
        for key in request_pods.keys() | limit_pods.keys()
    ]
    if repeat and records:
        # The same pod given twice with disjoint resources: still one sorted family.
        records.append(replace(records[0], metric_requests={"zz-extra": 1.0}, metric_limits={}))
    rows_requests = [
        PodResourceRow(r.namespace, r.name, r.node, r.scheduler, r.priority, res, unit_of(res), v)
        for r in records
        for res, v in r.metric_requests.items()
    ]
    rows_limits = [
        PodResourceRow(r.namespace, r.name, r.node, r.scheduler, r.priority, res, unit_of(res), v)
        for r in records
        for res, v in r.metric_limits.items()
    ]
    assert streamed(records) == render_pod_resource_metrics(rows_requests, rows_limits)


def test_streaming_per_pod_records_sorts_pods_and_their_resources() -> None:
    records = [
        Record("ns", "b", "n1", "default-scheduler", "0", {"memory": 2.0, "cpu": 1.0}, {}),
        Record("ns", "a", "n1", "default-scheduler", "0", {"cpu": 0.5}, {"cpu": 0.0}),
    ]
    text = streamed(records).decode()
    assert "kube_pod_resource_limit" not in text
    series = [line.split("{", 1)[1] for line in text.splitlines() if not line.startswith("#")]
    found = [re.findall(r'pod="(\w)".*resource="(\w+)"', s) for s in series]
    assert found == [[("a", "cpu")], [("b", "cpu")], [("b", "memory")]]
