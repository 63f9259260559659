"""Tests for backends.kubernetes.metric_series: the usage series' label sets are shared per node."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from custom_metrics_server.backends.kubernetes import metric_series
from custom_metrics_server.backends.kubernetes.metric_series import labels_of, usage_series


def usages(node: str, cpu: float = 0.5) -> Any:
    return [(SimpleNamespace(node=node), SimpleNamespace(cpu_cores=cpu, memory_bytes=2.0**20))]


def test_pods_on_one_node_share_their_label_sets_and_values_stay_their_own() -> None:
    a, b = usage_series(usages("n1", 0.5), node=True), usage_series(usages("n1", 0.25), node=True)
    assert a[0][0] is b[0][0]
    assert a[1][0] is b[1][0]
    assert a[0] == (labels_of("cpu", node="n1"), 0.5)
    assert b[0] == (labels_of("cpu", node="n1"), 0.25)
    assert a[1] == (labels_of("memory", node="n1"), float(2**20))
    other = usage_series(usages("n2"), node=True)
    assert other[0][0] == labels_of("cpu", node="n2")
    summed = usage_series(usages("n1"), node=False)  # an object's sum: no node label
    assert summed[0][0] == labels_of("cpu")


def test_the_shared_label_sets_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metric_series, "_USAGE_LABELS", {})
    monkeypatch.setattr(metric_series, "_USAGE_LABELS_LIMIT", 4)
    for i in range(10):
        usage_series(usages(f"n{i}"), node=True)
        assert len(metric_series._USAGE_LABELS) <= 4
