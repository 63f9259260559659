"""Tests for kubelet_format.rows (the kubelet reader) and the usage store's ``apply_rows``:
the canonical path gives the same rows, values and errors as the line reader
(kubelet_format.any_layout) under metrics-server's rules, and the same usage in the store
whether a node's rows name their pods or reuse the layout of its last scrape.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custom_metrics_server.kubelet_format.any_layout import read_any_layout
from custom_metrics_server.kubelet_format.rows import read_usage_rows
from custom_metrics_server.kubelet_format.samples import UsageRows
from custom_metrics_server.usage.store import UsageStore
from tests.fakes.envelope_world import KubeletFarm, plan_world, scale_shape
from tests.kubelet_format.test_any_layout import POD_MODEL, kubelet_body

SAMPLES = Path(__file__).resolve().parent.parent / "fixtures" / "kubelet-samples"
T0 = float(round(time.time()))  # the fake kubelets start containers before now


@cache
def farm() -> KubeletFarm:
    return KubeletFarm(plan_world(scale_shape(600)))


def nodes() -> list[str]:
    return sorted(farm().nodes)[:12]


def content(rows: UsageRows) -> dict[str, Any]:
    """What the rows say, keyed by (pod, container); NaN as None so that it compares."""
    assert rows.pods is not None
    assert rows.containers is not None
    assert rows.starts is not None
    series = {
        (pod, container): (cpu, when, memory, None if math.isnan(start) else start)
        for pod, container, cpu, when, memory, start in zip(
            rows.pods,
            rows.containers,
            rows.cpu,
            rows.times,
            rows.memory,
            rows.starts,
            strict=True,
        )
    }
    assert len(series) == len(rows.cpu)
    return {"series": series, "node": rows.node, "scrape_error": rows.scrape_error}


def full(body: bytes, now: float = T0) -> dict[str, Any]:
    return content(read_any_layout(body, default_time=now))


def test_kubelet_bodies_take_the_canonical_path_and_read_as_the_line_reader_does() -> None:
    for name in nodes():
        for body in (farm().body(name, T0), farm().exact_body(name, T0)):
            rows = read_usage_rows(body, default_time=T0)
            assert rows.layout is not None  # not the line reader
            assert content(rows) == full(body)


def test_a_known_layout_gives_no_pods_and_unchanged_start_series_no_starts() -> None:
    name = nodes()[0]
    first = read_usage_rows(farm().body(name, T0), default_time=T0)
    body = farm().body(name, T0 + 15)
    again = read_usage_rows(body, default_time=T0, known=(first.layout, first.start_layout))
    assert again.pods is None
    assert again.containers is None
    assert again.starts is None
    assert again.layout == first.layout
    fresh = read_usage_rows(body, default_time=T0)
    assert (again.cpu, again.times, again.memory, again.node) == (
        fresh.cpu,
        fresh.times,
        fresh.memory,
        fresh.node,
    )
    other = read_usage_rows(
        farm().body(nodes()[1], T0), default_time=T0, known=(first.layout, first.start_layout)
    )
    assert other.pods is not None  # another node's pods: named again


@pytest.mark.skipif(not SAMPLES.is_dir(), reason="kubelet samples not present")
@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.txt")) if SAMPLES.is_dir() else [])
def test_upstream_kubelet_samples_read_as_the_line_reader_reads_them(path: Path) -> None:
    body = path.read_bytes()
    try:
        expected = full(body)
    except ValueError:
        with pytest.raises(ValueError, match="."):
            read_usage_rows(body, default_time=T0)
        return
    assert content(read_usage_rows(body, default_time=T0)) == expected


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_mutated_bodies_read_as_the_line_reader_reads_them(data: st.DataObject) -> None:
    """Whenever the line reader takes a body, the rows are its rows; when it refuses one the
    canonical path may only differ on lines of series it does not read."""
    source = data.draw(st.sampled_from(["farm", "model"]))
    base = farm().body(nodes()[0], T0) if source == "farm" else kubelet_body(POD_MODEL)
    body = bytearray(base)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(body) - 1))
        body[at : at + data.draw(st.integers(0, 3))] = data.draw(st.binary(max_size=3))
    try:
        expected = full(bytes(body))
    except ValueError:
        with contextlib.suppress(ValueError):
            read_usage_rows(bytes(body), default_time=T0)
        return
    assert content(read_usage_rows(bytes(body), default_time=T0)) == expected


def restarted(body: bytes, at: float) -> bytes:
    """The body with its first container restarted at ``at``: start time moved, counter
    back near zero."""
    body = re.sub(
        rb"^(container_start_time_seconds\{[^}]*\}) \S+",
        lambda m: m.group(1) + f" {at:.0f}".encode(),
        body,
        count=1,
        flags=re.MULTILINE,
    )
    return re.sub(
        rb"^(container_cpu_usage_seconds_total\{[^}]*\}) \S+",
        lambda m: m.group(1) + b" 0.5",
        body,
        count=1,
        flags=re.MULTILINE,
    )


def everything(store: UsageStore, names: list[str]) -> dict[str, Any]:
    pods = {}
    for name in names:
        for key in [k for k, node in store._pod_node.items() if node == name]:
            pods[key] = (store.pod_usage(*key), store.pod_resource_usage(*key))
    return {
        "pods": pods,
        "nodes": {name: store.node_resource_usage(name) for name in names},
        "node_usage": {name: store.node_usage(name) for name in names},
        "generation": store.generation,
        "with_usage": dict(store.pod_usages()),
    }


def test_the_store_gives_the_same_usage_from_known_layouts_as_from_rows_read_afresh() -> None:
    names = nodes()
    by_scrape, by_rows = UsageStore(), UsageStore()
    rounds: list[tuple[float, dict[str, bytes]]] = []
    for step in range(5):
        now = T0 + 15 * step
        bodies = {name: farm().body(name, now) for name in names}
        if step == 2:  # node 0 reports node 1's pods (a layout change), then its own again
            bodies[names[0]] = farm().body(names[1], now)
        if step == 3:
            bodies[names[2]] = restarted(bodies[names[2]], now - 5)
        if step == 4:
            bodies[names[3]] = restarted(bodies[names[3]], now - 12)
        rounds.append((now, bodies))
    fast_paths = 0
    for now, bodies in rounds:
        for name, body in bodies.items():
            by_scrape.apply_rows(name, read_any_layout(body, default_time=now), now)
            rows = read_usage_rows(body, default_time=now, known=by_rows.known(name))
            fast_paths += rows.pods is None
            by_rows.apply_rows(name, rows, now)
        assert everything(by_rows, names) == everything(by_scrape, names)
    assert fast_paths >= 3 * len(names)
    assert any(usage is not None for usage, _ in everything(by_rows, names)["pods"].values())
