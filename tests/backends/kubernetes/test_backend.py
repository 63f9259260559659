"""The Kubernetes backend end to end against a local API server that speaks the real
list/watch protocol and serves kubelet expositions through the node proxy."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from types import SimpleNamespace
from typing import Any, cast

import httpx
import pytest

from custom_metrics_server.backends import demo_kubelets, demo_workloads, demo_world
from custom_metrics_server.backends.kubernetes.backend import KubernetesBackend, KubernetesSettings
from custom_metrics_server.cluster_state.records import NAMESPACES, NODES, PODS, WATCHED
from custom_metrics_server.domain import GroupResource
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kube.lease import LeaderElector
from custom_metrics_server.machinery.quantity import Quantity
from custom_metrics_server.server.app import AppSettings, create_app
from tests.fakes.kube_apiserver import FakeKubeApiServer, ResourceType

P = "/apis/custom.metrics.k8s.io/v1beta2"
CPU = "?metricLabelSelector=resource%3Dcpu"
KEYS = {
    PODS: "pods",
    NODES: "nodes",
    NAMESPACES: "namespaces",
    GroupResource("apps", "deployments"): "deployments.apps",
    GroupResource("apps", "replicasets"): "replicasets.apps",
    GroupResource("apps", "statefulsets"): "statefulsets.apps",
    GroupResource("batch", "jobs"): "jobs.batch",
}


@pytest.fixture
def api() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as server:
        world = demo_world.generate(seed=3, pods=12, web_pods=4)
        for resource, objects in world.objects.items():
            for obj in objects:
                server.add(KEYS[resource], obj)
        yield server


def kubelet_text(api: FakeKubeApiServer, now: float, cpu_seconds: float) -> None:
    """Every running pod's containers with cpu counters at `cpu_seconds` and 100 MiB."""
    per_node: dict[str, list[demo_kubelets.ContainerUsage]] = {}
    for (namespace, name), obj in api.objects("pods").items():
        node = obj["spec"].get("nodeName")
        if node and obj["status"]["phase"] == "Running":
            per_node.setdefault(node, []).append(
                demo_kubelets.ContainerUsage(
                    namespace,
                    name,
                    obj["spec"]["containers"][0]["name"],
                    cpu_seconds,
                    100 * 2**20,
                    now - 3600,
                )
            )
    for _, node in api.objects("nodes"):
        body = demo_kubelets.kubelet_exposition(
            per_node.get(node, []), node_cpu_seconds=cpu_seconds, node_memory=2**30, now=now
        )
        api.set_node_proxy(node, body.decode())


@pytest.fixture
async def backend(api: FakeKubeApiServer) -> AsyncIterator[KubernetesBackend]:
    settings = KubernetesSettings(
        scrape_interval=0.2, scrape_timeout=2.0, discovery_interval=60, discovery_min_refresh=0
    )
    kubelet_text(api, time.time() - 30, 10.0)
    backend = KubernetesBackend(KubeClient(api.connection()), settings)
    async with backend:
        await until(lambda: backend.ready().ready)
        nodes = len(api.objects("nodes"))
        await until(lambda: backend.usage_store.stats().nodes == nodes)  # first samples taken
        yield backend


@pytest.fixture
async def client(backend: KubernetesBackend) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(cluster=backend.state, backends=[backend])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://t"
    ) as http:
        yield http


async def until(condition: Callable[[], Any], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def get(client: httpx.AsyncClient, path: str) -> tuple[int, dict[str, str]]:
    response = await client.get(P + path)
    if response.status_code != 200:
        return response.status_code, {}
    return 200, {i["describedObject"]["name"]: i["value"] for i in response.json()["items"]}


async def test_requests_follow_adds_updates_and_deletes(
    api: FakeKubeApiServer, backend: KubernetesBackend, client: httpx.AsyncClient
) -> None:
    _, pods = await get(
        client,
        "/namespaces/default/pods/*/kube_pod_resource_request" + CPU + "&labelSelector=app%3Dweb",
    )
    assert len(pods) == 4
    assert set(pods.values()) == {"350m"}  # 250m app + 100m restartable sidecar
    api.add(
        "pods",
        demo_world._pod(
            "extra",
            "default",
            {"app": "web"},
            demo_workloads.workloads(1, 1)[0],
            node="node-a-0",
            owner=("apps/v1", "ReplicaSet", "x"),
        ),
    )
    await until(lambda: ("default", "extra") in backend.state.pods)
    _, pods = await get(
        client,
        "/namespaces/default/pods/*/kube_pod_resource_request" + CPU + "&labelSelector=app%3Dweb",
    )
    assert len(pods) == 5
    changed = api.get("pods", "extra", namespace="default")
    assert changed is not None
    changed["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "900m"
    api.update("pods", changed)
    await until(lambda: backend.state.pods[("default", "extra")].requests["cpu"] == 1)
    assert (await get(client, "/namespaces/default/pods/extra/kube_pod_resource_request" + CPU))[
        1
    ] == {"extra": "1"}
    api.delete("pods", "extra", namespace="default")
    await until(lambda: ("default", "extra") not in backend.state.pods)
    assert (await get(client, "/namespaces/default/pods/extra/kube_pod_resource_request" + CPU))[
        0
    ] == 404


async def test_relist_after_compaction_and_server_restart_misses_nothing(
    api: FakeKubeApiServer, backend: KubernetesBackend
) -> None:
    before = set(backend.state.pods)
    api.compact()
    api.delete("pods", sorted(before)[0][1], namespace=sorted(before)[0][0])
    api.drop_watches()
    await until(lambda: set(backend.state.pods) == before - {sorted(before)[0]})
    api.restart(keep_state=True)
    added = api.add(
        "pods",
        {
            "metadata": {"name": "late", "namespace": "shop", "labels": {}},
            "spec": {
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                "nodeName": "node-a-0",
            },
            "status": {"phase": "Running"},
        },
    )
    assert added
    await until(lambda: ("shop", "late") in backend.state.pods)
    assert set(backend.state.pods) == set(api.objects("pods"))


async def test_usage_comes_from_the_kubelet_through_the_node_proxy(
    api: FakeKubeApiServer, backend: KubernetesBackend, client: httpx.AsyncClient
) -> None:
    kubelet_text(api, time.time(), 13.0)  # +3 core-seconds over 30 s = 100m per container
    some_pod = next(
        key
        for key, pod in backend.state.pods.items()
        if pod.lifecycle == "Runnable" and key[0] == "default"
    )
    await until(lambda: backend.usage_store.pod_usage(*some_pod) is not None)
    response = await client.get(
        P + f"/namespaces/{some_pod[0]}/pods/{some_pod[1]}/kube_running_pod_resource_usage" + CPU
    )
    item = response.json()["items"][0]
    window = item["windowSeconds"]
    assert 29 <= window <= 40  # the two samples' own timestamps, 30 s plus the test's set-up
    cores = float(Quantity.parse(item["value"]).value)
    assert abs(cores - 3 / window) < 0.004  # 3 core-seconds more over the window
    memory = await client.get(
        P
        + f"/namespaces/{some_pod[0]}/pods/{some_pod[1]}/kube_running_pod_resource_usage?metricLabelSelector=resource%3Dmemory"
    )
    assert memory.json()["items"][0]["value"] == "104857600"


async def test_node_capacity_and_exposition(
    backend: KubernetesBackend, client: httpx.AsyncClient
) -> None:
    status, allocatable = await get(client, "/nodes/*/kube_node_resource_allocatable" + CPU)
    assert status == 200
    assert allocatable["node-a-0"] == "7910m"
    text = backend.resource_exposition().decode()
    assert text.startswith("# HELP kube_pod_resource_limit")
    assert 'resource="cpu",scheduler="default-scheduler",unit="cores"} 0.35' in text
    assert "reindex" in text  # pending pods count (Schedulable) with an empty node label
    assert "nightly" not in text  # completed pods do not
    # What the server sends: the same bytes, streamed, while this replica serves the series.
    assert b"".join(backend.resource_exposition_chunks()) == text.encode()


async def test_a_standby_replica_serves_no_resource_series(backend: KubernetesBackend) -> None:
    backend.elector = cast("LeaderElector", SimpleNamespace(is_leader=False))
    try:
        assert not backend.serves_resource_series()
        assert list(backend.resource_exposition_chunks()) == []
        assert backend.resource_exposition() == b""
        app = create_app(
            cluster=backend.state,
            backends=[backend],
            settings=AppSettings(resource_exposition=backend.resource_exposition_chunks),
        )
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="https://t"
        ) as http:
            standby = await http.get("/metrics/resources")
            backend.elector = cast("LeaderElector", SimpleNamespace(is_leader=True))
            leader = await http.get("/metrics/resources")
    finally:
        backend.elector = None
    assert (standby.status_code, standby.content) == (200, b"")
    assert leader.status_code == 200
    assert leader.content == backend.resource_exposition()
    assert leader.content.startswith(b"# HELP kube_pod_resource_limit")


async def test_unknown_crd_resolves_after_discovery_refresh(
    api: FakeKubeApiServer, backend: KubernetesBackend
) -> None:
    # The CRD appears after the first discovery (one still in flight would be joined, and
    # would not know it).
    await until(lambda: backend.discovery.discovered)
    assert backend.state.mapping("widgets.example.com") is None
    api.register(ResourceType("example.com", "v1", "widgets", "Widget"))
    found = await backend.state.resolve("widgets.example.com")
    assert found is not None
    assert found.kind == "Widget"


async def test_no_kubelet_answering_is_a_readiness_note_not_a_failure(
    api: FakeKubeApiServer,
) -> None:
    """Nodes whose kubelets never answer (no node proxy body here): the backend stays ready
    once its watches listed, and says why under /readyz?verbose."""
    settings = KubernetesSettings(
        scrape_interval=0.2, scrape_timeout=2.0, discovery_interval=60, discovery_min_refresh=0
    )
    backend = KubernetesBackend(KubeClient(api.connection()), settings)
    async with backend:
        await until(lambda: backend.ready().ready and "answered" in backend.ready().reason)
        nodes = len(api.objects("nodes"))
        assert backend.ready().reason == (
            f"usage not available: no kubelet answered the first scrape round (0 of {nodes})"
        )
        app = create_app(cluster=backend.state, backends=[backend])
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="https://t"
        ) as http:
            verbose = await http.get("/readyz", params={"verbose": "1"})
    assert verbose.status_code == 200
    assert (
        "[+]backend-kubernetes ok (usage not available: no kubelet answered the first scrape "
        "round" in verbose.text
    )


async def test_the_first_scrape_round_waits_for_every_watched_list(
    api: FakeKubeApiServer,
) -> None:
    """The node list syncs while the pods are still being listed: no kubelet is scraped until
    every list is in (the first round would compete with the pods' initial list), then at
    once, with no interval in between."""
    settings = KubernetesSettings(
        scrape_interval=30.0, scrape_timeout=2.0, discovery_interval=60, discovery_min_refresh=0
    )
    kubelet_text(api, time.time() - 30, 10.0)
    # The start-up probe (limit=1) and then the reflector's first page of pods come late.
    api.delay_next(kind="list", path="/api/v1/pods", seconds=1.0, count=2)
    backend = KubernetesBackend(KubeClient(api.connection()), settings)
    async with backend:
        pods, nodes = (backend.reflectors[WATCHED.index(gr)] for gr in (PODS, NODES))
        await until(lambda: nodes.synced)
        assert not pods.synced
        await asyncio.sleep(0.3)
        assert api.count("proxy") == 0
        assert not backend.ready().ready
        await until(lambda: backend.ready().ready)
        # Not a whole interval (30 s) later: as soon as the pods have listed.
        await until(lambda: api.count("proxy") == len(api.objects("nodes")), within=5.0)
