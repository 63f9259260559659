"""Every memo of the KEP-1748 answers against a server that never memoised: through random
sequences of watch events (requests changed, pods relabelled, completed, deleted, created
again), kubelet scrapes and forgotten nodes, and requests of every metric, resource and metric
selector, each answer of one long-lived backend equals the answer of a backend built on a
cluster state and a usage store made afresh from the same objects and the same scrapes.

What is compared covers the per-object answer tables and the markers of pods asked once
(`backends.kubernetes.metrics`, `backends.kubernetes.pod_usage_answers`), the answers of objects that hold pods
(`backends.kubernetes.object_answers`), the resource model per pod shape (`cluster_state.resource_shapes`) and
the usage store's per-pod memo (`usage.store`). The whole-list memo and the journals have
their own (tests/backends/kubernetes/test_pod_usage_lists.py), as the selection memo (tests/test_inventory.py)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from custom_metrics_server.backends.kubernetes.metrics import (
    ALLOCATABLE,
    AVAILABLE,
    HPA_REQUEST,
    HPA_UTILIZATION,
    LIMIT,
    REQUEST,
    USAGE,
    UTILIZATION,
    ResourceMetricsBackend,
)
from custom_metrics_server.cluster_state.records import NAMESPACES, NODES, PODS, ClusterState
from custom_metrics_server.domain import BackendRequest, GroupResource, MetricInfo, Sample
from custom_metrics_server.errors import StatusError
from custom_metrics_server.machinery.label_parser import parse_selector
from custom_metrics_server.usage.store import UsageStore
from tests.backends.kubernetes.test_object_answers import (
    DEPLOYMENTS,
    PODS_AT,
    REPLICASETS,
    owner,
    pod,
    scrape,
)

NODE_NAMES = ("n1", "n2", "n3", "n4")
POD_METRICS = (REQUEST, LIMIT, HPA_REQUEST, USAGE, UTILIZATION, HPA_UTILIZATION)
SELECTORS = ("", "resource=cpu", "resource=memory", "resource in (cpu,memory)")
#: (resource, object) pairs asked about: pods, workloads, namespaces, nodes (known or not).
OBJECTS: tuple[tuple[GroupResource, tuple[str, str]], ...] = (
    *((PODS, (ns, name)) for name, (ns, _, _) in PODS_AT.items()),
    (DEPLOYMENTS, ("ns", "web")),
    (DEPLOYMENTS, ("ns", "other")),
    (REPLICASETS, ("ns", "web-1")),
    (NAMESPACES, ("", "ns")),
    (NAMESPACES, ("", "elsewhere")),
    *((NODES, ("", node)) for node in NODE_NAMES),
)


def state_of(pods: dict[str, dict[str, Any]]) -> ClusterState:
    state = ClusterState()
    state.load(
        {
            NAMESPACES: [{"metadata": {"name": n}} for n in ("ns", "elsewhere")],
            NODES: [
                {"metadata": {"name": n}, "status": {"allocatable": {"cpu": "8", "memory": "8Gi"}}}
                for n in NODE_NAMES
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
            PODS: list(pods.values()),
        }
    )
    return state


def store_of(history: list[tuple[str, float, float] | str]) -> UsageStore:
    store = UsageStore()
    for entry in history:
        if isinstance(entry, str):
            store.forget_node(entry)
        else:
            scrape(store, *entry)
    return store


async def fetch(
    backend: ResourceMetricsBackend,
    gr: GroupResource,
    keys: tuple[tuple[str, str], ...],
    metric: str,
    selector: str,
) -> list[Sample] | str:
    mapping = next(m for m in backend.state.mapper.mappings if m.group_resource == gr)
    request = BackendRequest(
        metric=MetricInfo(gr, mapping.namespaced, metric),
        mapping=mapping,
        objects=keys,
        metric_selector=parse_selector(selector),
    )
    try:
        return list(await backend.fetch(request))
    except StatusError as err:  # a 400 for mixed units must be the same 400
        return f"{err.code} {err.message}"


async def run(seed: int) -> None:
    rng = random.Random(seed)
    pods = {name: pod(name) for name in PODS_AT}
    history: list[tuple[str, float, float] | str] = [
        (node, now, used) for now, used in ((1000.0, 10.0), (1015.0, 13.0)) for node in NODE_NAMES
    ]
    state, store = state_of(pods), store_of(history)
    clock = [5000.0]
    backend = ResourceMetricsBackend(state, store, clock=lambda: clock[0])
    scrapes = 2
    for _ in range(25):
        roll = rng.random()
        name = rng.choice(sorted(PODS_AT))
        if roll < 0.15:
            pods[name] = pod(name, cpu=rng.choice(["1", "250m", "2"]))
            state.apply(PODS, pods[name])
        elif roll < 0.25:
            pods[name] = pod(name, tier=rng.choice(["a", "b"]))
            state.apply(PODS, pods[name])
        elif roll < 0.3:
            pods[name] = pod(name, phase="Succeeded")
            state.apply(PODS, pods[name])
        elif roll < 0.4 and name in pods:
            del pods[name]
            state.remove(PODS, (PODS_AT[name][0], name))
        elif roll < 0.45:
            pods[name] = pod(name)
            state.apply(PODS, pods[name])
        elif roll < 0.75:
            scrapes += 1
            entry = (rng.choice(NODE_NAMES), 1000.0 + 15 * scrapes, 10.0 + 3 * scrapes)
            history.append(entry)
            scrape(store, *entry)
        elif roll < 0.8:
            node = rng.choice(NODE_NAMES)
            history.append(node)
            store.forget_node(node)
        elif roll < 0.85:
            clock[0] += 11  # past the answers' freshness: their timestamps move
        fresh_state, fresh_store = state_of(pods), store_of(history)
        fresh = ResourceMetricsBackend(fresh_state, fresh_store, clock=lambda: clock[0])
        for _ in range(4):
            gr, key = rng.choice(OBJECTS)
            metric = rng.choice(
                (*POD_METRICS, ALLOCATABLE, AVAILABLE) if gr == NODES else POD_METRICS
            )
            keys = (key,) if rng.random() < 0.7 else tuple(k for g, k in OBJECTS if g == gr)
            selector = rng.choice(SELECTORS)
            for _ in range(rng.choice([1, 2])):  # a second ask finds a marker or a memo
                got = await fetch(backend, gr, keys, metric, selector)
                want = await fetch(fresh, gr, keys, metric, selector)
                assert got == want, (gr, keys, metric, selector)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_memoised_answers_equal_a_state_and_store_made_afresh(seed: int) -> None:
    asyncio.run(run(seed))
