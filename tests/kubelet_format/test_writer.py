"""The kubelet-format writer against the kubelet's own collector test expectations."""

from __future__ import annotations

import pytest

from custom_metrics_server.kubelet_format.summary import (
    ContainerStats,
    CpuStats,
    NodeStats,
    PodStats,
    Summary,
)
from custom_metrics_server.kubelet_format.writer import FAMILIES, render_resource_metrics
from tests.node_agent.samples import CASES, SAMPLES, families, go_order, sample_path


@pytest.mark.parametrize("case", sorted(CASES))
def test_body_is_the_kubelet_sample_byte_for_byte(case: str) -> None:
    text = sample_path(case).read_text()
    expected = go_order(text)
    assert sorted(families(expected.decode())) == sorted(families(text))  # nothing lost
    assert render_resource_metrics(CASES[case]) == expected


def test_help_and_type_lines_are_the_kubelets() -> None:
    """Every HELP/TYPE line in every kubelet sample (both stability generations) that names
    a family we write is ours, for the newest generation ([STABLE] where upstream is)."""
    seen = 0
    for path in SAMPLES.glob("kubernetes_kubelet_collector_*.dedented.txt"):
        for name, block in families(path.read_text()).items():
            kind, help_text = FAMILIES[name]
            assert block.startswith(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
            seen += 1
    assert seen > 20
    assert len(FAMILIES) == 15


def test_real_kubelet_order_families_then_series_sorted() -> None:
    """Series sorted by (container, namespace, pod) whatever the pod order; escaping as Go."""
    summary = Summary(
        None,
        (
            PodStats("z", "p", None, None, None, (ContainerStats('a"b\\c', None, None, None),)),
            PodStats(
                "a",
                "q\nr",
                None,
                None,
                None,
                (
                    ContainerStats("b", 2_000_000_000, None, None),
                    ContainerStats("a", 1_500_000_000, None, None),
                ),
            ),
        ),
    )
    body = render_resource_metrics(summary).decode()
    starts = [line for line in body.splitlines() if line.startswith("container_start")]
    assert starts == [
        'container_start_time_seconds{container="a",namespace="a",pod="q\\nr"} 1.5',
        'container_start_time_seconds{container="b",namespace="a",pod="q\\nr"} 2',
    ]  # the first container (start 0) has no start time series
    assert body.index("# HELP container_start") < body.index("# HELP resource_scrape_error")


def test_timestamps_are_the_stats_own_in_floor_milliseconds() -> None:
    body = render_resource_metrics(Summary(NodeStats(CpuStats(1, 1_999_999), None), ()))
    assert b"node_cpu_usage_seconds_total 1e-09 1\n" in body
    body = render_resource_metrics(Summary(NodeStats(CpuStats(1, -1), None), ()))
    assert b"node_cpu_usage_seconds_total 1e-09 -1\n" in body
