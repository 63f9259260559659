"""Tests for backends.kubernetes.pod_usage_answers: memoised usage answers of pods hold exactly while the
pod's record and its node's usage are unchanged, and an answer is always the one a backend
without memory would give."""

from __future__ import annotations

from typing import Any

from custom_metrics_server.backends.demo_kubelets import ContainerUsage, kubelet_exposition
from custom_metrics_server.backends.kubernetes import pod_usage_answers
from custom_metrics_server.backends.kubernetes.metrics import (
    USAGE,
    UTILIZATION,
    ResourceMetricsBackend,
)
from custom_metrics_server.cluster_state.records import NAMESPACES, NODES, PODS, ClusterState
from custom_metrics_server.domain import BackendRequest, MetricInfo, Sample
from custom_metrics_server.kubelet_format.rows import read_usage_rows
from custom_metrics_server.machinery.label_parser import parse_selector
from custom_metrics_server.usage.store import UsageStore
from custom_metrics_server.usage.values import PodUsage

PLACEMENT = {"a": "n1", "b": "n1", "c": "n2", "d": "n2"}


def pod(name: str, node: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def cluster() -> ClusterState:
    state = ClusterState()
    state.load(
        {
            NAMESPACES: [{"metadata": {"name": "ns"}}],
            NODES: [{"metadata": {"name": n}} for n in ("n1", "n2")],
            PODS: [pod(name, node) for name, node in PLACEMENT.items()],
        }
    )
    return state


def scrape(store: UsageStore, node: str, now: float, cpu_seconds: float) -> None:
    """`node`'s kubelet answers at `now`: its pods have used `cpu_seconds` each so far."""
    containers = [
        ContainerUsage("ns", name, "c", cpu_seconds * (1 + i), 2**20 * (1 + i), 1.0)
        for i, (name, where) in enumerate(sorted(PLACEMENT.items()))
        if where == node
    ]
    body = kubelet_exposition(containers, node_cpu_seconds=cpu_seconds, node_memory=2**30, now=now)
    store.apply_rows(node, read_usage_rows(body, default_time=now), now)


def request(state: ClusterState, metric: str, selector: str = "") -> BackendRequest:
    mapping = state.mapping("pods")
    assert mapping is not None
    return BackendRequest(
        metric=MetricInfo(PODS, True, metric),
        mapping=mapping,
        objects=tuple(sorted(k for k in state.pods)),
        metric_selector=parse_selector(selector),
    )


async def answer(backend: ResourceMetricsBackend, metric: str) -> list[Sample]:
    return list(await backend.fetch(request(backend.state, metric, "resource=cpu")))


async def fresh(state: ClusterState, usage: object, metric: str) -> list[Sample]:
    """The answer of a backend that has memoised nothing."""
    return await answer(ResourceMetricsBackend(state, usage, clock=lambda: 5000.0), metric)  # type: ignore[arg-type]


async def test_a_scrape_of_one_node_recomputes_its_pods_only() -> None:
    state, store = cluster(), UsageStore()
    for now, used in ((1000.0, 10.0), (1015.0, 13.0)):
        scrape(store, "n1", now, used)
        scrape(store, "n2", now, used)
    backend = ResourceMetricsBackend(state, store, clock=lambda: 5000.0)
    for metric in (USAGE, UTILIZATION):
        await answer(backend, metric)  # a first ask leaves markers; the second memoises
        first = await answer(backend, metric)
        assert [s.described.name for s in first] == ["a", "b", "c", "d"]
        assert first == await fresh(state, store, metric)
        scrape(store, "n1", 1030.0, 19.0)  # a and b doubled their rate; n2 unchanged
        second = await answer(backend, metric)
        assert second == await fresh(state, store, metric)
        assert [s.value for s in second[:2]] != [s.value for s in first[:2]]
        assert all(new is not old for new, old in zip(second[:2], first[:2], strict=True))
        assert all(new is old for new, old in zip(second[2:], first[2:], strict=True))
        # Another node scraped (the store's generation moves): n1's pods, asked a second
        # time from the same scrape, are memoised now; n2's are still the memoised ones.
        scrape(store, "n-elsewhere", 1031.0, 1.0)
        third = await answer(backend, metric)
        assert third == second
        assert all(new is old for new, old in zip(third[2:], second[2:], strict=True))
        fourth = await answer(backend, metric)
        assert all(new is old for new, old in zip(fourth, third, strict=True))
        # Back to the first state for the next metric.
        store, state = UsageStore(), cluster()
        for now, used in ((1000.0, 10.0), (1015.0, 13.0)):
            scrape(store, "n1", now, used)
            scrape(store, "n2", now, used)
        backend = ResourceMetricsBackend(state, store, clock=lambda: 5000.0)


async def test_an_answer_is_memoised_on_its_second_ask_from_the_same_scrape() -> None:
    """An HPA asks every 15 s and every node is scraped every 15 s, so its answers would be
    memoised for nothing: only an answer asked twice from one scrape is kept whole."""
    state, store = cluster(), UsageStore()
    for now, used in ((1000.0, 10.0), (1015.0, 13.0)):
        scrape(store, "n1", now, used)
        scrape(store, "n2", now, used)
    backend = ResourceMetricsBackend(state, store, clock=lambda: 5000.0)

    def entries() -> dict[str, bool]:
        """Pod name -> whether its answer is memoised (False: only marked as asked)."""
        (which,) = (w for w in backend._answers if w[0] == USAGE)
        table, asked = backend._answers[which], backend._asked[which]
        assert not set(table) & set(asked)
        return {key[1]: True for key in table} | {key[1]: False for key in asked}

    first = await answer(backend, USAGE)
    assert entries() == dict.fromkeys("abcd", False)
    assert await answer(backend, USAGE) == first  # recomputed, equal, and now memoised
    assert entries() == dict.fromkeys("abcd", True)
    scrape(store, "n1", 1030.0, 19.0)  # a's and b's memoised answers go stale
    changed = await answer(backend, USAGE)
    assert changed == await fresh(state, store, USAGE)
    assert entries() == {"a": False, "b": False, "c": True, "d": True}
    scrape(store, "n1", 1045.0, 25.0)  # asked once per scrape, as an HPA does: never kept
    assert await answer(backend, USAGE) == await fresh(state, store, USAGE)
    assert entries() == {"a": False, "b": False, "c": True, "d": True}


async def test_a_forgotten_node_and_a_changed_record_show_at_once() -> None:
    state, store = cluster(), UsageStore()
    for now, used in ((1000.0, 10.0), (1015.0, 13.0)):
        scrape(store, "n1", now, used)
        scrape(store, "n2", now, used)
    backend = ResourceMetricsBackend(state, store, clock=lambda: 5000.0)
    assert len(await answer(backend, USAGE)) == 4
    store.forget_node("n2")
    after = await answer(backend, USAGE)
    assert [s.described.name for s in after] == ["a", "b"]
    assert after == await fresh(state, store, USAGE)
    # A record replaced (a watch event) is recomputed even though its node is unchanged.
    state.apply(PODS, pod("a", "n1") | {"status": {"phase": "Succeeded"}})
    done = await answer(backend, USAGE)
    assert [s.described.name for s in done] == ["b"]
    assert done == await fresh(state, store, USAGE)


async def test_without_last_seen_the_pod_s_usage_itself_is_the_token() -> None:
    state = cluster()
    values = {("ns", "a"): PodUsage(0.5, 2.0**20, 1000.0, 15.0)}

    class Source:  # a usage source without `last_seen` or `generation`
        def pod_usage(self, namespace: str, name: str) -> PodUsage | None:
            return values.get((namespace, name))

    backend = ResourceMetricsBackend(state, Source(), clock=lambda: 5000.0)
    assert [s.value for s in await answer(backend, USAGE)] == [0.5]
    values[("ns", "a")] = PodUsage(0.75, 2.0**20, 1015.0, 15.0)
    values[("ns", "c")] = PodUsage(0.25, 2.0**20, 1015.0, 15.0)
    assert [(s.described.name, s.value) for s in await answer(backend, USAGE)] == [
        ("a", 0.75),
        ("c", 0.25),
    ]


async def test_a_pod_not_bound_to_a_node_is_checked_by_its_usage() -> None:
    state = cluster()
    state.apply(PODS, pod("e", ""))
    values: dict[tuple[str, str], PodUsage] = {}

    class Source:  # has `last_seen`, but a pod without a node has no node to ask about
        def pod_usage(self, namespace: str, name: str) -> PodUsage | None:
            return values.get((namespace, name))

        def last_seen(self, node: str) -> float | None:
            return 1.0

    backend = ResourceMetricsBackend(state, Source(), clock=lambda: 5000.0)
    assert await answer(backend, USAGE) == []
    values[("ns", "e")] = PodUsage(0.5, 2.0**20, 1000.0, 15.0)  # reported before the binding
    assert [s.described.name for s in await answer(backend, USAGE)] == ["e"]


async def test_memo_entries_of_deleted_pods_are_dropped(monkeypatch: Any) -> None:
    monkeypatch.setattr(pod_usage_answers, "SLACK", 2)
    state, store = cluster(), UsageStore()
    for now, used in ((1000.0, 10.0), (1015.0, 13.0)):
        scrape(store, "n1", now, used)
        scrape(store, "n2", now, used)
    backend = ResourceMetricsBackend(state, store, clock=lambda: 1016.0)
    assert len(await answer(backend, USAGE)) == 4
    assert len(await answer(backend, USAGE)) == 4  # asked twice: memoised
    (table,) = backend._answers.values()
    assert set(table) == set(state.pods)
    (asked,) = backend._asked.values()
    state.apply(PODS, pod("e", "n1"))  # asked once: a marker, swept like the answers
    assert len(await answer(backend, USAGE)) == 4  # (no usage yet)
    assert set(asked) == {("ns", "e")}
    state.remove(PODS, ("ns", "e"))
    for name in ("a", "b", "c"):
        state.remove(PODS, ("ns", name))
    # 4 entries, 1 live pod: over 1 + the slack of 2, so the next answer sweeps
    assert len(await answer(backend, USAGE)) == 1
    assert set(table) == {("ns", "d")}
    assert set(asked) <= {("ns", "e")}  # within the slack: swept with a later sweep


async def test_a_memo_table_never_exceeds_the_live_pods_plus_the_slack(monkeypatch: Any) -> None:
    """Pods come and go (Jobs): every one is asked about once, then deleted."""
    monkeypatch.setattr(pod_usage_answers, "SLACK", 8)
    state, store = cluster(), UsageStore()
    backend = ResourceMetricsBackend(state, store, clock=lambda: 1016.0)
    sink = state.sink(PODS)
    sizes, totals = [], []
    for i in range(200):
        sink.event("ADDED", pod(f"job-{i}", "n1"))
        await backend.fetch(request(state, USAGE, "resource=cpu"))
        sizes.extend(len(t) for t in backend._answers.values())
        sizes.extend(len(t) for t in backend._asked.values())
        totals.append(
            sum(map(len, backend._answers.values())) + sum(map(len, backend._asked.values()))
        )
        sink.event("DELETED", pod(f"job-{i}", "n1"))
    live = len(state.pods) + 1  # the four pods and the one job pod of the moment
    assert max(sizes) <= live + 8 + 1
    assert min(totals[-50:]) >= live  # swept, not cleared: the live entries stay known


def test_prune_keeps_live_entries_and_is_a_no_op_within_the_slack() -> None:
    table: Any = {("ns", str(i)): (None, None, 0.0, None) for i in range(2000)}
    live = {("ns", str(i)): object() for i in range(500)}
    pod_usage_answers.prune(table, live)  # 2,000 > 500 + 1,024: swept
    assert set(table) == set(live)
    table[("ns", "gone")] = (None, None, 0.0, None)
    pod_usage_answers.prune(table, live)  # 501 <= 500 + 1,024: kept
    assert ("ns", "gone") in table
