"""`kubectl top` through Prometheus: prometheus-adapter's shipped `resourceRules` (v0.11's
config) feed metrics.k8s.io, from a real Prometheus holding known usage."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from custom_metrics_server.cluster_state.records import NAMESPACES, NODES, PODS, ClusterState
from custom_metrics_server.metrics_api.responses import ResourceMetricsApi
from custom_metrics_server.prometheus.backend import PrometheusBackend
from custom_metrics_server.server.app import AppSettings, create_app
from tests.prometheus.conftest import FIXTURES, settings_for
from tests.prometheus.real_prometheus import RealPrometheus

API = "/apis/metrics.k8s.io/v1beta1"


def pod(name: str, *containers: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name[:3]}},
        "spec": {"nodeName": "node-a", "containers": [{"name": c} for c in containers]},
        "status": {"phase": "Running"},
    }


def cluster() -> ClusterState:
    state = ClusterState()
    objects = {
        NAMESPACES: [{"metadata": {"name": "default"}}],
        NODES: [{"metadata": {"name": "node-a"}}, {"metadata": {"name": "node-b"}}],
        PODS: [pod("web-0", "app", "sidecar"), pod("web-1", "app"), pod("api-0", "app")],
    }
    state.load(objects)
    return state


@pytest.fixture
async def client(running_prometheus: RealPrometheus) -> AsyncIterator[httpx.AsyncClient]:
    state = cluster()
    backend = PrometheusBackend(
        state,
        settings_for(running_prometheus.url, FIXTURES / "adapter-resource-rules.yaml"),
    )
    async with backend:
        await backend.resource_usage.refresh()
        app = create_app(
            cluster=state,
            backends=[backend],
            settings=AppSettings(metrics_api=ResourceMetricsApi(state, backend.resource_usage)),
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://t") as http:
            yield http


async def test_pod_metrics_come_from_the_resource_rules(client: httpx.AsyncClient) -> None:
    response = await client.get(f"{API}/namespaces/default/pods")
    assert response.status_code == 200, response.text
    items = {item["metadata"]["name"]: item for item in response.json()["items"]}
    # api-0 has no memory series: left out, as metrics-server leaves out incomplete pods.
    assert set(items) == {"web-0", "web-1"}
    web0 = items["web-0"]
    assert web0["window"] == "5m0s"  # resourceRules.window
    assert web0["containers"] == [
        {"name": "app", "usage": {"cpu": "250m", "memory": "64Mi"}},
        {"name": "sidecar", "usage": {"cpu": "10m", "memory": "16Mi"}},
    ]
    assert items["web-1"]["containers"] == [
        {"name": "app", "usage": {"cpu": "1500m", "memory": "256Mi"}}
    ]


async def test_node_metrics_come_from_the_resource_rules(client: httpx.AsyncClient) -> None:
    response = await client.get(f"{API}/nodes/node-a")
    assert response.status_code == 200, response.text
    assert response.json()["usage"] == {"cpu": "1750m", "memory": "3Gi"}
    nodes = await client.get(f"{API}/nodes")
    assert [n["metadata"]["name"] for n in nodes.json()["items"]] == ["node-a", "node-b"]
