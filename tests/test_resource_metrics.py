"""KEP-1748 metrics over compact cluster records: ingestion, ownership, sums, units."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import httpx
import pytest

from custom_metrics_server.compute.metrics import ResourceMetricsBackend, usage_of
from custom_metrics_server.compute.records import NAMESPACES, NODES, PODS, ClusterState
from custom_metrics_server.domain import GroupResource
from custom_metrics_server.server.app import create_app

P = "/apis/custom.metrics.k8s.io/v1beta2"
DEPLOYMENTS = GroupResource("apps", "deployments")
REPLICASETS = GroupResource("apps", "replicasets")


def pod(
    name: str,
    *,
    ns: str = "ns",
    node: str = "n1",
    cpu: str = "250m",
    memory: str = "1Gi",
    owner: tuple[str, str] | None = ("ReplicaSet", "web-abc"),
    phase: str = "Running",
    labels: dict[str, str] | None = None,
    priority: int | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels or {"app": "web"}}
    if owner:
        metadata["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "c",
                "resources": {
                    "requests": {"cpu": cpu, "memory": memory},
                    "limits": {"memory": memory},
                },
            }
        ]
    }
    if node:
        spec["nodeName"] = node
    if priority is not None:
        spec["priority"] = priority
    return {"metadata": metadata, "spec": spec, "status": {"phase": phase}}


def load(state: ClusterState, objects: dict[GroupResource, list[dict[str, Any]]]) -> None:
    state.load(objects)


def world() -> ClusterState:
    state = ClusterState()
    load(
        state,
        {
            NAMESPACES: [{"metadata": {"name": "ns"}}, {"metadata": {"name": "other"}}],
            NODES: [
                {
                    "metadata": {"name": "n1"},
                    "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
                },
                {
                    "metadata": {"name": "n2"},
                    "status": {"allocatable": {"cpu": "2", "memory": "4Gi"}},
                },
            ],
            DEPLOYMENTS: [
                {"metadata": {"name": "web", "namespace": "ns", "labels": {"app": "web"}}}
            ],
            REPLICASETS: [
                {
                    "metadata": {
                        "name": "web-abc",
                        "namespace": "ns",
                        "ownerReferences": [
                            {"kind": "Deployment", "name": "web", "controller": True}
                        ],
                    }
                }
            ],
            PODS: [
                pod("a", priority=1000),
                pod("b", node="n2", cpu="500m"),
                pod("pending", node="", phase="Pending"),
                pod("done", phase="Succeeded"),
                pod("lone", owner=None, cpu="1", labels={"app": "lone"}),
                pod("x", ns="other", owner=None),
            ],
        },
    )
    return state


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    state = world()
    usage = {
        ("ns", "a"): usage_of(0.125, 512 * 2**20, 1000.0, 30),
        ("ns", "b"): usage_of(0.5, 2**30, 1010.0, 25),
    }
    backend = ResourceMetricsBackend(
        state,
        type("U", (), {"pod_usage": staticmethod(lambda ns, p: usage.get((ns, p)))})(),
        clock=lambda: 2000.0,
    )
    app = create_app(cluster=state, backends=[backend])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://t"
    ) as http:
        yield http


async def values(client: httpx.AsyncClient, path: str) -> dict[str, str]:
    response = await client.get(P + path)
    assert response.status_code == 200, response.text
    return {i["describedObject"]["name"]: i["value"] for i in response.json()["items"]}


def test_relist_removes_objects_not_seen_again_and_reindexes() -> None:
    state = world()
    assert {p.name for p in state.pods_on_node("n1")} == {"a", "lone", "x"}  # Runnable only
    sink = state.sink(PODS)
    sink.list_started()
    sink.listed(pod("a", node="n2"))
    sink.list_finished()
    assert set(state.pods) == {("ns", "a")}
    assert state.pods_on_node("n1") == []
    assert [p.name for p in state.pods_on_node("n2")] == ["a"]
    sink.event("DELETED", {"metadata": {"name": "a", "namespace": "ns"}})
    assert state.pods == {}
    assert state.inventory.get(PODS, ("ns", "a")) is None


def test_readiness_waits_for_every_watched_resource() -> None:
    state = ClusterState()
    assert not state.ready().ready
    assert "pods" in state.ready().reason
    load(state, {})
    assert state.ready().ready


def test_owner_chain_reaches_pods_through_replicasets() -> None:
    state = world()
    assert sorted(p.name for p in state.pods_owned_by("ns", "Deployment", "web")) == [
        "a",
        "b",
        "pending",
    ]
    assert sorted(p.name for p in state.pods_in_namespace("ns")) == ["a", "b", "lone", "pending"]


async def test_pod_request_needs_a_unit_choice(client: httpx.AsyncClient) -> None:
    response = await client.get(P + "/namespaces/ns/pods/a/kube_pod_resource_request")
    assert response.status_code == 400
    assert response.json()["message"] == (
        "metric kube_pod_resource_request of pod ns/a has series in different units: cpu (cores), "
        "memory (bytes); choose one with metricLabelSelector, for example resource=cpu"
    )
    assert await values(
        client, "/namespaces/ns/pods/*/kube_pod_resource_request?metricLabelSelector=resource%3Dcpu"
    ) == {
        "a": "250m",
        "b": "500m",
        "lone": "1",
        "pending": "250m",
    }


async def test_pod_series_carry_the_scheduler_labels(client: httpx.AsyncClient) -> None:
    found = await values(
        client,
        "/namespaces/ns/pods/*/kube_pod_resource_request?metricLabelSelector=resource%3Dcpu,priority%3D1000",
    )
    assert found == {"a": "250m"}
    found = await values(
        client,
        "/namespaces/ns/pods/*/kube_pod_resource_requests?metricLabelSelector=resource%3Dmemory,node%3Dn2",
    )
    assert found == {"b": "1073741824"}
    found = await values(
        client,
        "/namespaces/ns/pods/*/kube_pod_resource_limit?metricLabelSelector=resource%3Dmemory,scheduler%3Ddefault-scheduler",
    )
    assert set(found) == {"a", "b", "lone", "pending"}


async def test_completed_pods_hold_nothing(client: httpx.AsyncClient) -> None:
    response = await client.get(
        P + "/namespaces/ns/pods/done/kube_pod_resource_request?metricLabelSelector=resource%3Dcpu"
    )
    assert response.status_code == 404


async def test_objects_sum_the_pods_they_hold(client: httpx.AsyncClient) -> None:
    cpu = "?metricLabelSelector=resource%3Dcpu"
    assert await values(client, "/namespaces/ns/metrics/kube_pod_resource_request" + cpu) == {
        "ns": "2"
    }
    assert await values(
        client, "/namespaces/ns/deployments.apps/web/kube_pod_resource_request" + cpu
    ) == {"web": "1"}
    assert await values(
        client, "/namespaces/ns/replicasets.apps/web-abc/kube_pod_resource_request" + cpu
    ) == {"web-abc": "1"}
    assert await values(client, "/nodes/n1/kube_pod_resource_request" + cpu) == {"n1": "1500m"}


async def test_node_capacity_and_availability(client: httpx.AsyncClient) -> None:
    cpu = "?metricLabelSelector=resource%3Dcpu"
    assert await values(client, "/nodes/*/kube_node_resource_allocatable" + cpu) == {
        "n1": "4",
        "n2": "2",
    }
    assert await values(client, "/nodes/*/kube_node_resource_available" + cpu) == {
        "n1": "2500m",
        "n2": "1500m",
    }
    pods = await values(
        client, "/nodes/n1/kube_node_resource_available?metricLabelSelector=resource%3Dpods"
    )
    assert pods == {"n1": "110"}


async def test_usage_and_utilization(client: httpx.AsyncClient) -> None:
    response = await client.get(
        P
        + "/namespaces/ns/pods/*/kube_running_pod_resource_usage?metricLabelSelector=resource%3Dcpu"
    )
    items = response.json()["items"]
    assert [(i["describedObject"]["name"], i["value"], i["windowSeconds"]) for i in items] == [
        ("a", "125m", 30),
        ("b", "500m", 25),
    ]
    assert items[0]["timestamp"] == "1970-01-01T00:16:40Z"  # the usage sample's own time
    util = await values(
        client,
        "/namespaces/ns/pods/*/kube_pod_resource_utilization?metricLabelSelector=resource%3Dcpu",
    )
    assert util == {"a": "500m", "b": "1"}
    total = await values(
        client,
        "/namespaces/ns/deployments.apps/web/kube_pod_resource_utilization?metricLabelSelector=resource%3Dcpu",
    )
    assert total == {"web": "833m"}  # (0.125 + 0.5) / (0.25 + 0.5), to three decimals
    response = await client.get(P + "/namespaces/ns/pods/a/kube_pod_resource_utilization")
    assert response.status_code == 400  # cpu and memory ratios cannot be added


async def test_discovery_lists_the_resource_metrics(client: httpx.AsyncClient) -> None:
    names = {r["name"] for r in (await client.get(P)).json()["resources"]}
    assert {
        "pods/kube_pod_resource_request",
        "namespaces/kube_pod_resource_limit",
        "nodes/kube_node_resource_available",
        "deployments.apps/kube_running_pod_resource_usage",
        "jobs.batch/kube_pod_resource_utilization",
        "pods/kube_pod_resource_requests",
    } <= names
    assert "pods/kube_node_resource_allocatable" not in names


def test_unparsable_resources_count_as_none() -> None:
    state = ClusterState()
    state.sink(PODS).listed(pod("bad", cpu="lots"))
    assert state.pods[("ns", "bad")].requests == {}
    assert state.pods[("ns", "bad")].lifecycle == "Runnable"
    assert Decimal(0) not in state.pods[("ns", "bad")].limits.values()
