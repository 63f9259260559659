"""Tests for custom_metrics_server.usage.store: rates, resets, restarts, the two-sample rule and
age-out, following metrics-server's storage (pkg/storage: pod.go, node.go, types.go)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from custom_metrics_server.kubelet_format.rows import read_usage_rows
from custom_metrics_server.kubelet_format.samples import CpuSample, UsageRows
from custom_metrics_server.usage.store import FRESH_CONTAINER_MIN_AGE, UsageStore, cpu_rate
from custom_metrics_server.usage.values import MemoryUsage, NodeUsage, PodUsage, Rate
from tests.fakes.usage_rows import Container, usage_rows

T0 = 1_700_000_000.0
OLD_START = T0 - 3600.0  # started long ago: no synthetic previous point


def c(cpu: float, at: float, memory: float = 100.0, start: float | None = OLD_START) -> Container:
    """A container sample whose cpu and memory share the timestamp ``at``."""
    return Container(cpu, at, memory, at, start)


def scrape(
    pods: dict[tuple[str, str], dict[str, Container]] | None = None,
    node: tuple[float, float, float] | None = None,
) -> UsageRows:
    """A scrape's rows; ``node`` is (cpu seconds, time, memory)."""
    return usage_rows(pods or {}, node)


P = ("ns", "p")


# --- cpu_rate -----------------------------------------------------------------------------


def test_a_rate_is_the_counter_delta_over_its_own_timestamps() -> None:
    assert cpu_rate(CpuSample(10.0, 100.0), CpuSample(40.0, 115.0)) == Rate(2.0, 115.0, 15.0)


@pytest.mark.parametrize(
    ("previous", "current"),
    [
        pytest.param(CpuSample(10.0, 100.0), CpuSample(20.0, 100.0), id="same-time"),
        pytest.param(CpuSample(10.0, 100.0), CpuSample(20.0, 90.0), id="time-backwards"),
        pytest.param(CpuSample(10.0, 100.0), CpuSample(5.0, 115.0), id="counter-reset"),
        pytest.param(CpuSample(10.0, 100.0), CpuSample(math.nan, 115.0), id="nan"),
    ],
)
def test_no_rate_when_time_does_not_advance_or_the_counter_goes_back(
    previous: CpuSample, current: CpuSample
) -> None:
    assert cpu_rate(previous, current) is None


def test_an_idle_counter_is_a_zero_rate_not_a_missing_one() -> None:
    assert cpu_rate(CpuSample(10.0, 100.0), CpuSample(10.0, 110.0)) == Rate(0.0, 110.0, 10.0)


@given(
    start=st.floats(0, 1e6),
    used=st.floats(0, 1e4),
    at=st.floats(1e9, 2e9),
    window=st.floats(1, 3600),
)
def test_rates_are_delta_over_window_for_any_counter(
    start: float, used: float, at: float, window: float
) -> None:
    current = CpuSample(start + used, at + window)
    rate = cpu_rate(CpuSample(start, at), current)
    assert rate is not None
    # Exactly the floating-point deltas of the two samples' own fields.
    span = current.timestamp - at
    assert rate == Rate((current.seconds_total - start) / span, current.timestamp, span)
    assert rate.cores == pytest.approx(used / window, rel=1e-3, abs=1e-3)


# --- the two-sample rule ------------------------------------------------------------------


def test_a_pod_has_no_usage_until_its_containers_have_two_samples() -> None:
    store = UsageStore()
    store.apply_rows("n1", scrape({P: {"a": c(10.0, T0, 50.0), "b": c(1.0, T0, 7.0)}}), T0)
    assert store.pod_usage(*P) is None
    store.apply_rows(
        "n1", scrape({P: {"a": c(25.0, T0 + 15, 60.0), "b": c(4.0, T0 + 15, 8.0)}}), T0 + 15
    )
    assert store.pod_usage(*P) == PodUsage(1.0 + 0.2, 68.0, T0 + 15, 15.0)


def test_a_pod_s_memory_is_there_after_one_sample() -> None:
    """Memory is a gauge: the pod's working set (all its containers) from the first scrape,
    timed by the earliest container, while its CPU rate still needs a second."""
    store = UsageStore()
    store.apply_rows("n1", scrape({P: {"a": c(10.0, T0 + 1, 50.0), "b": c(1.0, T0, 7.0)}}), T0)
    assert store.pod_usage(*P) is None
    assert store.pod_resource_usage(*P) is None  # the PodMetrics wait for CPU too
    assert store.pod_memory(*P) == MemoryUsage(57.0, T0)
    generation = store.generation
    store.apply_rows(
        "n1", scrape({P: {"a": c(25.0, T0 + 15, 60.0), "b": c(4.0, T0 + 15, 8.0)}}), T0 + 15
    )
    assert store.generation > generation
    assert store.pod_memory(*P) == MemoryUsage(68.0, T0 + 15)  # the usage's own
    # A container whose memory is not reported: no memory for the pod.
    store.apply_rows("n2", scrape({("ns", "q"): {"a": c(1.0, T0, math.nan)}}), T0)
    assert store.pod_memory("ns", "q") is None
    assert store.pod_memory("ns", "nope") is None


def test_a_container_new_in_the_pod_holds_the_pod_back_until_it_has_two_samples() -> None:
    store = UsageStore()
    store.apply_rows("n1", scrape({P: {"a": c(10.0, T0)}}), T0)
    store.apply_rows("n1", scrape({P: {"a": c(20.0, T0 + 10), "b": c(5.0, T0 + 10)}}), T0 + 10)
    assert store.pod_usage(*P) is None
    store.apply_rows("n1", scrape({P: {"a": c(30.0, T0 + 20), "b": c(6.0, T0 + 20)}}), T0 + 20)
    assert store.pod_usage(*P) == PodUsage(1.0 + 0.1, 200.0, T0 + 20, 10.0)


def test_the_pod_timestamp_and_window_are_its_earliest_container_s() -> None:
    store = UsageStore()
    store.apply_rows("n1", scrape({P: {"a": c(0.0 + 1, T0), "b": c(1.0, T0 + 2)}}), T0)
    store.apply_rows("n1", scrape({P: {"a": c(11.0, T0 + 10), "b": c(5.0, T0 + 14)}}), T0 + 15)
    usage = store.pod_usage(*P)
    assert usage is not None
    assert (usage.timestamp, usage.window) == (T0 + 10, 10.0)
    assert usage.cpu_cores == pytest.approx(1.0 + 4.0 / 12.0)


def test_a_container_without_start_time_keeps_its_history() -> None:
    store = UsageStore()
    store.apply_rows("n1", scrape({P: {"a": c(1.0, T0, start=None)}}), T0)
    store.apply_rows("n1", scrape({P: {"a": c(2.0, T0 + 10, start=None)}}), T0 + 10)
    assert store.pod_usage(*P) == PodUsage(0.1, 100.0, T0 + 10, 10.0)


# --- the kubelet's cache and stale points -------------------------------------------------


def test_a_repeated_point_keeps_the_previous_one_and_changes_nothing() -> None:
    store = UsageStore()
    store.apply_rows("n1", scrape({P: {"a": c(1.0, T0)}}), T0)
    store.apply_rows("n1", scrape({P: {"a": c(3.0, T0 + 10)}}), T0 + 10)
    before, generation = store.pod_usage(*P), store.generation
    store.apply_rows("n1", scrape({P: {"a": c(3.0, T0 + 10)}}), T0 + 15)  # kubelet cache
    assert store.pod_usage(*P) == before == PodUsage(0.2, 100.0, T0 + 10, 10.0)
    assert store.generation == generation
    store.apply_rows("n1", scrape({P: {"a": c(6.0, T0 + 20)}}), T0 + 20)
    assert store.pod_usage(*P) == PodUsage(0.3, 100.0, T0 + 20, 10.0)
    assert store.generation == generation + 1


def test_a_point_older_than_the_previous_one_leaves_the_pod_without_usage() -> None:
    store = UsageStore()
    store.apply_rows("n1", scrape({P: {"a": c(1.0, T0)}}), T0)
    store.apply_rows("n1", scrape({P: {"a": c(3.0, T0 + 10)}}), T0 + 10)
    store.apply_rows("n1", scrape({P: {"a": c(0.5, T0 - 5)}}), T0 + 15)
    assert store.pod_usage(*P) is None


# --- resets and restarts ------------------------------------------------------------------


def test_a_restarted_container_drops_its_history_until_it_has_two_new_samples() -> None:
    store = UsageStore()
    store.apply_rows("n1", scrape({P: {"a": c(100.0, T0)}}), T0)
    store.apply_rows("n1", scrape({P: {"a": c(110.0, T0 + 60)}}), T0 + 60)
    assert store.pod_usage(*P) is not None
    restarted = T0 + 65  # after the stored point: a new container instance
    store.apply_rows("n1", scrape({P: {"a": c(20.0, T0 + 120, start=restarted)}}), T0 + 120)
    assert store.pod_usage(*P) is None
    store.apply_rows("n1", scrape({P: {"a": c(26.0, T0 + 180, start=restarted)}}), T0 + 180)
    assert store.pod_usage(*P) == PodUsage(0.1, 100.0, T0 + 180, 60.0)


def test_a_counter_that_goes_back_without_a_restart_skips_the_container_as_upstream() -> None:
    store = UsageStore()
    pod = {"a": c(100.0, T0, 10.0), "b": c(5.0, T0, 20.0)}
    store.apply_rows("n1", scrape({P: pod}), T0)
    store.apply_rows(
        "n1", scrape({P: {"a": c(50.0, T0 + 10, 11.0), "b": c(6.0, T0 + 10, 21.0)}}), T0 + 10
    )
    assert store.pod_usage(*P) == PodUsage(0.1, 21.0, T0 + 10, 10.0)  # only b counted
    store.apply_rows(
        "n1", scrape({P: {"a": c(51.0, T0 + 20, 12.0), "b": c(7.0, T0 + 20, 22.0)}}), T0 + 20
    )
    assert store.pod_usage(*P) == PodUsage(0.2, 34.0, T0 + 20, 10.0)  # a is back


def test_a_pod_whose_every_container_is_skipped_has_no_usage() -> None:
    store = UsageStore()
    store.apply_rows("n1", scrape({P: {"a": c(100.0, T0)}}), T0)
    store.apply_rows("n1", scrape({P: {"a": c(50.0, T0 + 10)}}), T0 + 10)
    assert store.pod_usage(*P) is None


def test_a_start_time_that_goes_back_skips_the_container() -> None:
    store = UsageStore()
    store.apply_rows("n1", scrape({P: {"a": c(1.0, T0, start=T0 - 100)}}), T0)
    store.apply_rows("n1", scrape({P: {"a": c(2.0, T0 + 10, start=T0 - 200)}}), T0 + 10)
    assert store.pod_usage(*P) is None


def test_a_fresh_container_gets_usage_from_its_start_after_one_sample() -> None:
    store = UsageStore(metric_resolution=15.0)
    store.apply_rows("n1", scrape({P: {"a": c(6.0, T0, start=T0 - 12.0)}}), T0)
    assert store.pod_usage(*P) == PodUsage(0.5, 100.0, T0, 12.0)


@pytest.mark.parametrize(
    "age",
    [
        pytest.param(FRESH_CONTAINER_MIN_AGE - 1, id="too-young"),
        pytest.param(15.0, id="older-than-the-resolution"),
    ],
)
def test_only_containers_started_within_one_resolution_get_a_synthetic_point(age: float) -> None:
    store = UsageStore(metric_resolution=15.0)
    store.apply_rows("n1", scrape({P: {"a": c(6.0, T0, start=T0 - age)}}), T0)
    assert store.pod_usage(*P) is None


# --- nodes --------------------------------------------------------------------------------


def test_node_usage_needs_two_samples_and_follows_the_same_rules() -> None:
    store = UsageStore()
    store.apply_rows("n1", scrape(node=(100.0, T0, 1e9)), T0)
    assert store.node_usage("n1") is None
    store.apply_rows("n1", scrape(node=(130.0, T0 + 15, 2e9)), T0 + 15)
    assert store.node_usage("n1") == NodeUsage(2.0, 2e9, T0 + 15, 15.0)
    store.apply_rows("n1", scrape(node=(130.0, T0 + 15, 2e9)), T0 + 20)  # cached point
    assert store.node_usage("n1") == NodeUsage(2.0, 2e9, T0 + 15, 15.0)
    store.apply_rows("n1", scrape(node=(10.0, T0 + 30, 2e9)), T0 + 30)  # node counter reset
    assert store.node_usage("n1") is None
    store.apply_rows("n1", scrape(node=(25.0, T0 + 45, 3e9)), T0 + 45)
    assert store.node_usage("n1") == NodeUsage(1.0, 3e9, T0 + 45, 15.0)
    store.apply_rows("n1", scrape(), T0 + 60)  # the node's own sample went missing
    assert store.node_usage("n1") is None


def test_unknown_nodes_and_pods_have_no_usage() -> None:
    store = UsageStore()
    assert store.node_usage("nope") is None
    assert store.pod_usage("ns", "nope") is None
    assert store.last_seen("nope") is None


# --- membership, moves, forgetting and age-out --------------------------------------------


def two_scrapes(store: UsageStore, node: str, pods: list[tuple[str, str]], at: float) -> None:
    store.apply_rows(node, scrape({p: {"a": c(1.0, at)} for p in pods}), at)
    store.apply_rows(node, scrape({p: {"a": c(2.0, at + 10)} for p in pods}), at + 10)


def test_a_pod_missing_from_its_node_s_next_scrape_is_gone() -> None:
    store = UsageStore()
    two_scrapes(store, "n1", [P, ("ns", "q")], T0)
    store.apply_rows("n1", scrape({("ns", "q"): {"a": c(3.0, T0 + 20)}}), T0 + 20)
    assert store.pod_usage(*P) is None
    assert store.pod_node(*P) is None
    assert store.pod_usage("ns", "q") is not None


def test_pods_without_complete_containers_are_not_stored() -> None:
    store = UsageStore()
    two_scrapes(store, "n1", [P], T0)
    store.apply_rows("n1", scrape({P: {}}), T0 + 20)
    assert store.pod_usage(*P) is None


def test_a_pod_that_moves_node_follows_the_node_that_reported_it_last() -> None:
    store = UsageStore()
    two_scrapes(store, "n1", [P], T0)
    store.apply_rows("n2", scrape({P: {"a": c(0.5, T0 + 30, start=T0 + 25)}}), T0 + 30)
    assert store.pod_node(*P) == "n2"
    assert store.pod_usage(*P) is None  # the new instance has one sample
    store.apply_rows("n1", scrape(), T0 + 35)  # n1 stops listing it: n2's record stays
    assert store.pod_node(*P) == "n2"
    store.apply_rows("n2", scrape({P: {"a": c(1.5, T0 + 40, start=T0 + 25)}}), T0 + 40)
    assert store.pod_usage(*P) == PodUsage(0.1, 100.0, T0 + 40, 10.0)


def test_forget_node_drops_its_pods_and_node_usage() -> None:
    store = UsageStore()
    two_scrapes(store, "n1", [P], T0)
    store.apply_rows("n1", scrape({P: {"a": c(3.0, T0 + 20)}}, node=(1.0, T0, 1.0)), T0 + 20)
    generation = store.generation
    assert store.forget_node("n1") is True
    assert store.pod_usage(*P) is None
    assert store.node_usage("n1") is None
    assert store.nodes() == []
    assert store.generation > generation
    assert store.forget_node("n1") is False


def test_nodes_that_stopped_answering_age_out() -> None:
    store = UsageStore()
    two_scrapes(store, "quiet", [("ns", "a")], T0)
    two_scrapes(store, "busy", [("ns", "b")], T0 + 30)
    assert store.last_seen("quiet") == T0 + 10
    assert store.expire(T0 + 50, 45.0) == []
    assert store.expire(T0 + 56, 45.0) == ["quiet"]
    assert store.pod_usage("ns", "a") is None
    assert store.pod_usage("ns", "b") is not None
    assert store.nodes() == ["busy"]


def test_generation_moves_only_when_published_values_change() -> None:
    store = UsageStore()
    start = store.generation
    store.apply_rows("n1", scrape({P: {"a": c(1.0, T0)}}), T0)  # one sample: nothing published
    assert store.generation == start
    store.apply_rows("n1", scrape({P: {"a": c(2.0, T0 + 10)}}), T0 + 10)
    assert store.generation == start + 1
    store.apply_rows("n1", scrape(), T0 + 20)  # the pod is gone
    assert store.generation == start + 2


def test_pod_usages_and_stats_walk_the_pods_with_usage() -> None:
    store = UsageStore()
    two_scrapes(store, "n1", [("ns", "a"), ("ns", "b")], T0)
    store.apply_rows("n2", scrape({("ns", "c"): {"a": c(1.0, T0)}}), T0)
    walked = dict(store.pod_usages())
    assert set(walked) == {("ns", "a"), ("ns", "b")}
    assert walked["ns", "a"] == PodUsage(0.1, 100.0, T0 + 10, 10.0)
    stats = store.stats()
    assert (stats.nodes, stats.pods, stats.pods_with_usage) == (2, 3, 2)


def test_container_renames_within_a_pod_are_matched_by_name() -> None:
    store = UsageStore()
    store.apply_rows("n1", scrape({P: {"a": c(1.0, T0), "b": c(10.0, T0)}}), T0)
    store.apply_rows("n1", scrape({P: {"b": c(12.0, T0 + 10), "a": c(2.0, T0 + 10)}}), T0 + 10)
    assert store.pod_usage(*P) == PodUsage(0.1 + 0.2, 200.0, T0 + 10, 10.0)


def test_usage_from_parsed_kubelet_bodies_end_to_end() -> None:
    def body(cpu: float, at_ms: int) -> bytes:
        labels = 'container="app",namespace="ns",pod="p"'
        return (
            f"container_cpu_usage_seconds_total{{{labels}}} {cpu} {at_ms}\n"
            f"container_memory_working_set_bytes{{{labels}}} 1048576 {at_ms}\n"
            f"container_start_time_seconds{{{labels}}} 1.6e+09\n"
            f"node_cpu_usage_seconds_total {cpu * 10} {at_ms}\n"
            f"node_memory_working_set_bytes 2e9 {at_ms}\n"
        ).encode()

    store = UsageStore()
    store.apply_rows("n1", read_usage_rows(body(12.5, 1_700_000_000_000), default_time=0), T0)
    store.apply_rows("n1", read_usage_rows(body(14.0, 1_700_000_015_000), default_time=0), T0 + 15)
    pod, node = store.pod_usage("ns", "p"), store.node_usage("n1")
    assert pod is not None
    assert node is not None
    assert pod._replace(cpu_cores=0.1) == PodUsage(0.1, 1048576.0, T0 + 15, 15.0)
    assert pod.cpu_cores == pytest.approx(0.1)
    assert node._replace(cpu_cores=1.0) == NodeUsage(1.0, 2e9, T0 + 15, 15.0)
    assert node.cpu_cores == pytest.approx(1.0)


def test_a_pod_new_to_a_node_is_stored_under_the_key_pod_key_gives() -> None:
    # The cluster's own strings for the pod (ClusterState.pod_key): the store keeps no copy.
    name = "".join(["we", "b-1"])  # a string object of its own, as a decoded record holds
    known = {("ns", "web-1"): ("ns", name)}
    store = UsageStore(pod_key=lambda key: known.get(key, key))
    plain = UsageStore()
    pods = [("ns", "web-1"), ("ns", "web-2")]
    two_scrapes(store, "n1", pods, T0)
    two_scrapes(plain, "n1", pods, T0)
    walked = dict(store.pod_usages())
    assert walked == dict(plain.pod_usages())
    assert set(walked) == set(pods)
    stored = next(key for key in walked if key == ("ns", "web-1"))
    assert stored[1] is name
    assert store.pod_node("ns", "web-1") == "n1"
