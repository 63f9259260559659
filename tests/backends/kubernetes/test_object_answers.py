"""Tests for backends.kubernetes.object_answers: memoised answers of workloads, namespaces and nodes hold
while the pods they hold, those pods' usage and the node are unchanged, whatever happens to
other pods and nodes, and an answer is always the one a backend without memory would give.

"Memoised" is checked by identity: a recomputed answer is a new `Sample` object. Before the
answers were validated by the global generations, so every assertion `is` below after an
unrelated change failed."""

from __future__ import annotations

from typing import Any

import pytest

from custom_metrics_server.backends.demo_kubelets import ContainerUsage, kubelet_exposition
from custom_metrics_server.backends.kubernetes.metrics import (
    AVAILABLE,
    REQUEST,
    USAGE,
    UTILIZATION,
    ResourceMetricsBackend,
)
from custom_metrics_server.cluster_state.records import NAMESPACES, NODES, PODS, ClusterState
from custom_metrics_server.domain import BackendRequest, GroupResource, MetricInfo, Sample
from custom_metrics_server.kubelet_format.rows import read_usage_rows
from custom_metrics_server.machinery.label_parser import parse_selector
from custom_metrics_server.usage.store import UsageStore

DEPLOYMENTS = GroupResource("apps", "deployments")
REPLICASETS = GroupResource("apps", "replicasets")
#: pod -> (namespace, node, ReplicaSet): web's pods a, b, c; other's d (same namespace, on n2);
#: x in another namespace on n3.
PODS_AT = {
    "a": ("ns", "n1", "web-1"),
    "b": ("ns", "n1", "web-1"),
    "c": ("ns", "n2", "web-1"),
    "d": ("ns", "n2", "other-1"),
    "x": ("elsewhere", "n3", "far-1"),
}


def owner(kind: str, name: str) -> list[dict[str, Any]]:
    return [{"apiVersion": "apps/v1", "kind": kind, "name": name, "controller": True}]


def pod(name: str, *, cpu: str = "1", phase: str = "Running", **labels: str) -> dict[str, Any]:
    namespace, node, rs = PODS_AT[name]
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app": rs[:-2], **labels},
            "ownerReferences": owner("ReplicaSet", rs),
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
        },
        "status": {"phase": phase},
    }


def cluster() -> ClusterState:
    state = ClusterState()
    state.load(
        {
            NAMESPACES: [{"metadata": {"name": n}} for n in ("ns", "elsewhere")],
            NODES: [
                {"metadata": {"name": n}, "status": {"allocatable": {"cpu": "8"}}}
                for n in ("n1", "n2", "n3", "n4")
            ],
            DEPLOYMENTS: [
                {"metadata": {"name": d, "namespace": ns}}
                for d, ns in (("web", "ns"), ("other", "ns"), ("far", "elsewhere"))
            ],
            REPLICASETS: [
                {
                    "metadata": {
                        "name": f"{d}-1",
                        "namespace": ns,
                        "ownerReferences": owner("Deployment", d),
                    }
                }
                for d, ns in (("web", "ns"), ("other", "ns"), ("far", "elsewhere"))
            ],
            PODS: [pod(name) for name in PODS_AT],
        }
    )
    return state


def scrape(store: UsageStore, node: str, now: float, cpu_seconds: float) -> None:
    """`node`'s kubelet answers at `now`: its pods have used `cpu_seconds` each so far."""
    containers = [
        ContainerUsage(ns, name, "c", cpu_seconds * (1 + i), 2**20 * (1 + i), 1.0)
        for i, (name, (ns, where, _)) in enumerate(sorted(PODS_AT.items()))
        if where == node
    ]
    body = kubelet_exposition(containers, node_cpu_seconds=cpu_seconds, node_memory=2**30, now=now)
    store.apply_rows(node, read_usage_rows(body, default_time=now), now)


def warm_store() -> UsageStore:
    store = UsageStore()
    for now, used in ((1000.0, 10.0), (1015.0, 13.0)):
        for node in ("n1", "n2", "n3", "n4"):
            scrape(store, node, now, used)
    return store


def request(
    state: ClusterState, gr: GroupResource, key: tuple[str, str], metric: str, selector: str
) -> BackendRequest:
    mapping = next(m for m in state.mapper.mappings if m.group_resource == gr)
    return BackendRequest(
        metric=MetricInfo(gr, mapping.namespaced, metric),
        mapping=mapping,
        objects=(key,),
        metric_selector=parse_selector(selector),
    )


async def answer(
    backend: ResourceMetricsBackend,
    metric: str = USAGE,
    gr: GroupResource = DEPLOYMENTS,
    key: tuple[str, str] = ("ns", "web"),
    selector: str = "resource=cpu",
) -> Sample | None:
    found = list(await backend.fetch(request(backend.state, gr, key, metric, selector)))
    assert len(found) <= 1
    fresh = ResourceMetricsBackend(backend.state, backend.usage, clock=lambda: 5000.0)
    assert found == list(await fresh.fetch(request(backend.state, gr, key, metric, selector)))
    return found[0] if found else None


def unrelated_changes(state: ClusterState, store: UsageStore, turn: int) -> None:
    """Another node scraped, a pod of another namespace and one of another workload of the
    same namespace changed: both global generations move."""
    scrape(store, "n3", 1030.0 + turn, 20.0 + turn)
    state.apply(PODS, pod("x", turn=str(turn)))
    state.apply(PODS, pod("d", turn=str(turn)))


@pytest.mark.parametrize("metric", [USAGE, UTILIZATION])
async def test_a_workload_answer_stays_memoised_through_unrelated_changes(metric: str) -> None:
    state, store = cluster(), warm_store()
    backend = ResourceMetricsBackend(state, store, clock=lambda: 5000.0)
    first = await answer(backend, metric)
    assert first is not None
    for turn in range(3):
        generations = (state.generation, store.generation)
        unrelated_changes(state, store, turn)
        assert (state.generation, store.generation) != generations
        assert await answer(backend, metric) is first


async def test_a_member_s_usage_or_record_changes_the_workload_answer() -> None:
    state, store = cluster(), warm_store()
    backend = ResourceMetricsBackend(state, store, clock=lambda: 5000.0)
    first = await answer(backend)
    assert first is not None
    scrape(store, "n2", 1030.0, 19.0)  # c doubled its rate (d too, not a member)
    second = await answer(backend)
    assert second is not None
    assert second.value != first.value
    assert await answer(backend) is second
    state.apply(PODS, pod("c", phase="Succeeded"))  # a completed pod is not summed
    third = await answer(backend)
    assert third is not None
    assert third.value != second.value
    state.apply(PODS, pod("c"))  # and back: a new record, the value of `second`
    fourth = await answer(backend)
    assert fourth is not second
    assert fourth == second


async def test_a_member_s_requests_change_the_workload_s_request_sum() -> None:
    state, store = cluster(), warm_store()
    backend = ResourceMetricsBackend(state, store, clock=lambda: 5000.0)
    first = await answer(backend, REQUEST)
    assert first is not None
    assert first.value == 3
    unrelated_changes(state, store, 0)
    assert await answer(backend, REQUEST) is first
    state.apply(PODS, pod("a", cpu="2"))
    second = await answer(backend, REQUEST)
    assert second is not None
    assert second.value == 4


async def test_a_new_member_or_a_deleted_workload_shows_at_once() -> None:
    state, store = cluster(), warm_store()
    backend = ResourceMetricsBackend(state, store, clock=lambda: 5000.0)
    first = await answer(backend, REQUEST)
    assert first is not None
    assert first.value == 3
    # d moves to web's ReplicaSet (its controller changes): web holds four pods.
    moved = pod("d")
    moved["metadata"]["ownerReferences"] = owner("ReplicaSet", "web-1")
    state.apply(PODS, moved)
    second = await answer(backend, REQUEST)
    assert second is not None
    assert second.value == 4
    state.remove(DEPLOYMENTS, ("ns", "web"))
    assert await answer(backend, REQUEST) is None


async def test_namespace_and_node_answers_follow_their_own_pods_only() -> None:
    state, store = cluster(), warm_store()
    backend = ResourceMetricsBackend(state, store, clock=lambda: 5000.0)
    namespace = await answer(backend, USAGE, NAMESPACES, ("", "ns"))
    available = await answer(backend, AVAILABLE, NODES, ("", "n1"), "")
    assert namespace is not None
    assert available is not None
    # x's namespace and node (n3) are neither.
    scrape(store, "n3", 1030.0, 20.0)
    state.apply(PODS, pod("x", turn="1"))
    assert await answer(backend, USAGE, NAMESPACES, ("", "ns")) is namespace
    assert await answer(backend, AVAILABLE, NODES, ("", "n1"), "") is available
    # a (in ns, on n1) asks for more: both change.
    state.apply(PODS, pod("a", cpu="2"))
    after = await answer(backend, AVAILABLE, NODES, ("", "n1"), "")
    assert after is not None
    assert after.value == available.value - 1
    scrape(store, "n1", 1030.0, 19.0)
    moved = await answer(backend, USAGE, NAMESPACES, ("", "ns"))
    assert moved is not None
    assert moved.value != namespace.value
