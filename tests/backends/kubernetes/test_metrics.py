"""KEP-1748 metrics over compact cluster records: ingestion, ownership, sums, units."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import httpx
import pytest

from custom_metrics_server.backends.kubernetes.metrics import ResourceMetricsBackend
from custom_metrics_server.backends.kubernetes.state_exposition import render_state_exposition
from custom_metrics_server.cluster_state.records import NAMESPACES, NODES, PODS, ClusterState
from custom_metrics_server.domain import GroupResource
from custom_metrics_server.server.app import create_app

P = "/apis/custom.metrics.k8s.io/v1beta2"


@dataclass(frozen=True, slots=True)
class Usage:
    """A plain `PodUsage` value."""

    cpu_cores: float
    memory_bytes: float
    timestamp: float
    window: float


def usage_of(cpu: float, memory: float, timestamp: float, window: float) -> Usage:
    return Usage(cpu, memory, timestamp, window)


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


def test_indexes_follow_updates_moves_owner_changes_and_deletes() -> None:
    """The node, namespace and owner indexes after a same-node update, a move, a new
    controller and a delete are what a fresh load of the final objects gives."""
    state = ClusterState()
    load(state, {PODS: [pod("a"), pod("b"), pod("c", ns="other")]})
    sink = state.sink(PODS)
    sink.event("MODIFIED", pod("a", cpu="500m"))  # same node: stays filed once
    sink.event("MODIFIED", pod("b", node="n2", owner=("ReplicaSet", "web-def")))
    sink.event("DELETED", {"metadata": {"name": "c", "namespace": "other"}})
    sink.event("ADDED", pod("d", ns="other", node="n2", labels={"app": "db"}))
    assert [p.name for p in state.pods_on_node("n1")] == ["a"]
    assert state.pods_on_node("n1")[0].requests["cpu"] == Decimal("0.5")
    assert sorted(p.name for p in state.pods_on_node("n2")) == ["b", "d"]
    assert sorted(p.name for p in state.pods_in_namespace("ns")) == ["a", "b"]
    assert [p.name for p in state.pods_in_namespace("other")] == ["d"]
    assert [p.name for p in state.pods_owned_by("ns", "ReplicaSet", "web-abc")] == ["a"]
    assert [p.name for p in state.pods_owned_by("ns", "ReplicaSet", "web-def")] == ["b"]
    for name, ns in (("a", "ns"), ("b", "ns"), ("d", "other")):
        sink.event("DELETED", {"metadata": {"name": name, "namespace": ns}})
    assert state.pods_on_node("n2") == []
    assert state.pods_in_namespace("other") == []
    assert state.pods_owned_by("ns", "ReplicaSet", "web-def") == []
    assert state._by_node == {}
    assert state._child_pods == {}


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
        "backend kubernetes: metric kube_pod_resource_request of pod ns/a has series in different units: cpu (cores), "
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


# --- Zero replicas: what every built-in metric answers over no pods ---------------------------

IDLE = {
    NAMESPACES: [{"metadata": {"name": "empty"}}],
    NODES: [
        {
            "metadata": {"name": "n3"},
            "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}},
        }
    ],
    DEPLOYMENTS: [{"metadata": {"name": "idle", "namespace": "empty"}}],
    REPLICASETS: [
        {
            "metadata": {
                "name": "idle-1",
                "namespace": "empty",
                "ownerReferences": [{"kind": "Deployment", "name": "idle", "controller": True}],
            }
        }
    ],
}
IDLE_OBJECTS = {
    "deployment": "/namespaces/empty/deployments.apps/idle/",
    "replicaset": "/namespaces/empty/replicasets.apps/idle-1/",
    "namespace": "/namespaces/empty/metrics/",
    "node": "/nodes/n3/",
}


@pytest.fixture
async def idle_client() -> AsyncIterator[httpx.AsyncClient]:
    state = ClusterState()
    load(state, IDLE)
    backend = ResourceMetricsBackend(
        state,
        type("U", (), {"pod_usage": staticmethod(lambda ns, p: None)})(),
        clock=lambda: 2000.0,
    )
    app = create_app(cluster=state, backends=[backend])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://t"
    ) as http:
        yield http


@pytest.mark.parametrize("where", list(IDLE_OBJECTS))
@pytest.mark.parametrize(
    ("metric", "selector"),
    [
        ("kube_pod_resource_request", "?metricLabelSelector=resource%3Dcpu"),
        ("kube_pod_resource_request", ""),
        ("kube_pod_resource_requests", "?metricLabelSelector=resource%3Dmemory"),
        ("kube_pod_resource_limit", "?metricLabelSelector=resource%3Dmemory"),
        ("kube_pod_resource_limits", ""),
        ("kube_pod_resource_request_hpa", "?metricLabelSelector=resource%3Dcpu"),
        ("kube_running_pod_resource_usage", "?metricLabelSelector=resource%3Dcpu"),
        ("kube_running_pod_resource_usage", ""),
    ],
)
async def test_sums_over_no_pods_are_zero(
    idle_client: httpx.AsyncClient, where: str, metric: str, selector: str
) -> None:
    response = await idle_client.get(P + IDLE_OBJECTS[where] + metric + selector)
    assert response.status_code == 200, response.text
    [item] = response.json()["items"]
    assert item["value"] == "0"
    assert item["timestamp"] == "1970-01-01T00:33:20Z"  # the answer's time
    assert "windowSeconds" not in item


@pytest.mark.parametrize("where", list(IDLE_OBJECTS))
@pytest.mark.parametrize(
    "metric", ["kube_pod_resource_utilization", "kube_pod_resource_utilization_hpa"]
)
async def test_ratios_over_no_pods_have_no_value(
    idle_client: httpx.AsyncClient, where: str, metric: str
) -> None:
    path = P + IDLE_OBJECTS[where] + metric + "?metricLabelSelector=resource%3Dcpu"
    response = await idle_client.get(path)
    assert response.status_code == 404, response.text


async def test_node_capacity_without_pods(idle_client: httpx.AsyncClient) -> None:
    cpu = "?metricLabelSelector=resource%3Dcpu"
    assert await values(idle_client, "/nodes/n3/kube_node_resource_allocatable" + cpu) == {
        "n3": "8"
    }
    assert await values(idle_client, "/nodes/n3/kube_node_resource_available" + cpu) == {"n3": "8"}


async def test_lists_of_idle_objects_carry_zero(idle_client: httpx.AsyncClient) -> None:
    cpu = "?metricLabelSelector=resource%3Dcpu"
    assert await values(
        idle_client, "/namespaces/empty/deployments.apps/*/kube_pod_resource_request" + cpu
    ) == {"idle": "0"}
    assert await values(idle_client, "/nodes/*/kube_running_pod_resource_usage" + cpu) == {
        "n3": "0"
    }
    response = await idle_client.get(
        P + "/namespaces/empty/deployments.apps/*/kube_pod_resource_utilization" + cpu
    )
    assert response.status_code == 200
    assert response.json()["items"] == []


async def test_unknown_objects_stay_404(idle_client: httpx.AsyncClient) -> None:
    for path in (
        "/namespaces/empty/deployments.apps/gone/kube_pod_resource_request",
        "/namespaces/nowhere/metrics/kube_pod_resource_request",
        "/nodes/n9/kube_running_pod_resource_usage",
    ):
        response = await idle_client.get(P + path + "?metricLabelSelector=resource%3Dcpu")
        assert response.status_code == 404, path


async def test_a_resource_no_pod_requests_sums_to_zero(client: httpx.AsyncClient) -> None:
    gpu = "?metricLabelSelector=resource%3Dnvidia.com_gpu"
    assert await values(
        client, "/namespaces/ns/deployments.apps/web/kube_pod_resource_request" + gpu
    ) == {"web": "0"}
    assert await values(client, "/namespaces/ns/metrics/kube_pod_resource_limit" + gpu) == {
        "ns": "0"
    }
    # A pod reports no series for what it does not request (KEP-1748), and an object whose pods
    # have no usage sample yet has an unknown usage, not 0.
    response = await client.get(P + "/namespaces/ns/pods/a/kube_pod_resource_request" + gpu)
    assert response.status_code == 404
    response = await client.get(
        P
        + "/namespaces/other/metrics/kube_running_pod_resource_usage?metricLabelSelector=resource%3Dcpu"
    )
    assert response.status_code == 404


async def test_scaled_to_zero_and_back_reads_n_x_then_zero_then_n_x() -> None:
    state = world()
    backend = ResourceMetricsBackend(state, None, clock=lambda: 2000.0)
    app = create_app(cluster=state, backends=[backend])
    path = P + "/namespaces/ns/deployments.apps/web/kube_pod_resource_request"
    cpu = {"metricLabelSelector": "resource=cpu"}
    replicas = [pod(f"r{i}", cpu="300m") for i in range(3)]
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://t"
    ) as http:

        async def value() -> str:
            response = await http.get(path, params=cpu)
            assert response.status_code == 200, response.text
            return str(response.json()["items"][0]["value"])

        sink = state.sink(PODS)
        for name in ("a", "b", "pending"):
            sink.event("DELETED", {"metadata": {"name": name, "namespace": "ns"}})
        for replica in replicas:
            sink.event("ADDED", replica)
        assert await value() == "900m"
        for replica in replicas:
            sink.event("DELETED", replica)
        assert await value() == "0"
        for replica in replicas:
            sink.event("ADDED", replica)
        assert await value() == "900m"


# --- The HPA's view of requests ------------------------------------------------------------------


def sandboxed(name: str, *, cpu: str, overhead: str, init_cpu: str | None = None) -> dict[str, Any]:
    """A pod of the `web` ReplicaSet with a runtime-class overhead and an optional init."""
    found = pod(name, cpu=cpu)
    found["spec"]["overhead"] = {"cpu": overhead}
    if init_cpu is not None:
        found["spec"]["initContainers"] = [
            {"name": "init", "resources": {"requests": {"cpu": init_cpu}}}
        ]
    return found


async def test_hpa_view_excludes_overhead_and_init_containers() -> None:
    state = world()
    sink = state.sink(PODS)
    for name in ("a", "b", "pending"):
        sink.event("DELETED", {"metadata": {"name": name, "namespace": "ns"}})
    sink.event("ADDED", sandboxed("k1", cpu="400m", overhead="100m"))
    sink.event("ADDED", sandboxed("k2", cpu="400m", overhead="100m", init_cpu="2"))
    usage = {
        ("ns", "k1"): usage_of(0.2, 2**29, 1000.0, 30),
        ("ns", "k2"): usage_of(0.4, 2**29, 1000.0, 30),
    }
    backend = ResourceMetricsBackend(
        state,
        type("U", (), {"pod_usage": staticmethod(lambda ns, p: usage.get((ns, p)))})(),
        clock=lambda: 2000.0,
    )
    app = create_app(cluster=state, backends=[backend])
    cpu = "?metricLabelSelector=resource%3Dcpu"
    web = "/namespaces/ns/deployments.apps/web/"
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://t"
    ) as http:
        # KEP-1748: (400m + 100m) + (max(2, 400m) + 100m); the HPA: 400m + 400m.
        assert await values(http, web + "kube_pod_resource_request" + cpu) == {"web": "2600m"}
        assert await values(http, web + "kube_pod_resource_request_hpa" + cpu) == {"web": "800m"}
        assert await values(http, web + "kube_pod_resource_utilization" + cpu) == {"web": "231m"}
        assert await values(http, web + "kube_pod_resource_utilization_hpa" + cpu) == {
            "web": "750m"
        }
        # The `requests` label names the denominator of each utilization series.
        hpa = web + "kube_pod_resource_utilization_hpa?metricLabelSelector=requests%3Dhpa"
        assert await values(http, hpa + ",resource%3Dcpu") == {"web": "750m"}
        kep = web + "kube_pod_resource_utilization?metricLabelSelector=requests%3Dhpa"
        response = await http.get(P + kep + ",resource%3Dcpu")
        assert response.status_code == 404
        per_pod = await values(http, "/namespaces/ns/pods/*/kube_pod_resource_request_hpa" + cpu)
        assert per_pod == {"k1": "400m", "k2": "400m", "lone": "1"}


async def test_hpa_view_is_absent_for_a_container_without_the_request() -> None:
    state = ClusterState()
    partial = pod("half", owner=None)
    partial["spec"]["containers"].append(
        {"name": "sidecar", "resources": {"requests": {"memory": "64Mi"}}}
    )
    load(state, {NAMESPACES: [{"metadata": {"name": "ns"}}], PODS: [partial]})
    record = state.pods[("ns", "half")]
    assert record.requests == {"cpu": Decimal("0.250"), "memory": Decimal(2**30 + 64 * 2**20)}
    # The HPA refuses cpu ("missing request for cpu in container sidecar"): no value.
    assert dict(record.hpa_requests) == {"memory": Decimal(2**30 + 64 * 2**20)}


def test_exposition_reports_the_spec_while_the_api_reports_what_the_scheduler_holds() -> None:
    state = ClusterState()
    resizing = pod("resizing", owner=None, cpu="1")
    resizing["status"]["containerStatuses"] = [
        {
            "name": "c",
            "allocatedResources": {"cpu": "2", "memory": "1Gi"},
            "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}},
        }
    ]
    load(state, {NAMESPACES: [{"metadata": {"name": "ns"}}], PODS: [resizing]})
    record = state.pods[("ns", "resizing")]
    assert record.requests["cpu"] == Decimal(2)  # max(spec, actual, allocated)
    assert record.metric_requests["cpu"] == Decimal(1)  # PodResourcesOptions{}: the spec
    text = render_state_exposition(state).decode()
    assert (
        'kube_pod_resource_request{namespace="ns",node="n1",pod="resizing",priority="",'
        'resource="cpu",scheduler="default-scheduler",unit="cores"} 1\n'
    ) in text
    # Without resize status the views are one shared mapping.
    plain = ClusterState()
    load(plain, {NAMESPACES: [{"metadata": {"name": "ns"}}], PODS: [pod("p", owner=None)]})
    only = plain.pods[("ns", "p")]
    assert only.metric_requests is only.requests
    assert only.metric_limits is only.limits
    assert only.hpa_requests is only.requests
