"""The Kubernetes backend passes the conformance kit against the fake API server (the real
list/watch protocol and kubelet expositions through the node proxy)."""

from __future__ import annotations

import time

import pytest

from custom_metrics_server.backends import demo_kubelets, demo_world
from custom_metrics_server.backends.kubernetes.backend import KubernetesBackend, KubernetesSettings
from custom_metrics_server.domain import GroupResource
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.testing.kit import check_backend
from tests.fakes.kube_apiserver import FakeKubeApiServer

KEYS = {
    GroupResource("", "pods"): "pods",
    GroupResource("", "nodes"): "nodes",
    GroupResource("", "namespaces"): "namespaces",
    GroupResource("apps", "deployments"): "deployments.apps",
    GroupResource("apps", "replicasets"): "replicasets.apps",
    GroupResource("apps", "statefulsets"): "statefulsets.apps",
    GroupResource("batch", "jobs"): "jobs.batch",
}


@pytest.mark.integration
async def test_the_kubernetes_backend_passes_the_kit() -> None:
    with FakeKubeApiServer() as api:
        world = demo_world.generate(seed=3, pods=12, web_pods=4)
        for resource, objects in world.objects.items():
            for obj in objects:
                api.add(KEYS[resource], obj)
        now = time.time()
        for _, node in api.objects("nodes"):
            body = demo_kubelets.kubelet_exposition(
                [], node_cpu_seconds=10.0, node_memory=2**30, now=now
            )
            api.set_node_proxy(node, body.decode())
        backend = KubernetesBackend(
            KubeClient(api.connection()),
            KubernetesSettings(scrape_interval=0.2, discovery_interval=60, discovery_min_refresh=0),
        )
        pods = GroupResource("", "pods")
        keys = sorted(api.objects("pods"))[:5]
        report = await check_backend(
            backend,
            cluster=backend.state,
            objects={pods: keys, GroupResource("", "nodes"): sorted(api.objects("nodes"))},
            expect_not_ready_before_start=True,
            max_metrics=200,
        )
        assert report.custom_metrics > 50
        assert report.ready_after > 0
