"""HPA scale to zero through the real server: an Object metric on a Deployment, N -> 0 -> N.

HPA scale to zero (beta, on by default in Kubernetes 1.37) reads Object and External metrics
while the target has no pods, and scales back up from what they say. This drives the real
`serve` process (uvicorn, TLS, delegated authentication and authorization) against the fake
kube-apiserver the way a Deployment scaled to zero and back looks to it: the Deployment and its
ReplicaSet stay with `replicas: 0`, the pods are deleted, then new pods arrive. At every step it
reads, as the HPA controller would, the Object metric
`deployments.apps/web/kube_pod_resource_request?metricLabelSelector=resource=cpu`, and expects
N x 250m, then 0, then N x 250m again. The namespace, node and workload sums and the ratio that
has no value over no pods are read at zero too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from custom_metrics_server.testing.server_process import ServerProcess as RunningServer
from custom_metrics_server.testing.server_process import start_server, stop_server
from tests.fakes.auth_webhooks import FakeAuthApiServer
from tests.fakes.cluster_process import TOKEN, serve_flags, write_kubeconfig
from tests.fakes.kube_apiserver import FakeKubeApiServer

pytestmark = pytest.mark.integration

NS = "shop"
REPLICAS = 3
P = "/apis/custom.metrics.k8s.io/v1beta2"
OBJECT_METRIC = (
    f"{P}/namespaces/{NS}/deployments.apps/web/kube_pod_resource_request"
    "?metricLabelSelector=resource%3Dcpu"
)
DEADLINE = 20.0  # seconds a watch event may take to show in an answer


def deployment(replicas: int) -> dict[str, Any]:
    return {
        "kind": "Deployment",
        "apiVersion": "apps/v1",
        "metadata": {"name": "web", "namespace": NS, "labels": {"app": "web"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}},
        "status": {"replicas": replicas},
    }


def replicaset(replicas: int) -> dict[str, Any]:
    return {
        "kind": "ReplicaSet",
        "apiVersion": "apps/v1",
        "metadata": {
            "name": "web-5d9c",
            "namespace": NS,
            "labels": {"app": "web"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "controller": True}
            ],
        },
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}},
        "status": {"replicas": replicas},
    }


def web_pod(name: str) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"app": "web"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web-5d9c",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": "node-a",
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}},
                }
            ],
        },
        "status": {"phase": "Running"},
    }


@pytest.fixture(scope="module")
def api() -> Iterator[FakeKubeApiServer]:
    fake = FakeKubeApiServer()
    fake.apply("namespaces", {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": NS}})
    fake.apply(
        "nodes",
        {
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": {"name": "node-a", "labels": {}},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}},
        },
    )
    fake.apply("deployments.apps", deployment(REPLICAS))
    fake.apply("replicasets.apps", replicaset(REPLICAS))
    for index in range(REPLICAS):
        fake.apply("pods", web_pod(f"web-5d9c-{index}"))
    fake.start()
    yield fake
    fake.close()


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, api: FakeKubeApiServer
) -> Iterator[RunningServer]:
    workdir = tmp_path_factory.mktemp("zero-replicas")
    kubeconfig, auth_kubeconfig = workdir / "kubeconfig", workdir / "auth-kubeconfig"
    write_kubeconfig(kubeconfig, api.url)
    auth = FakeAuthApiServer()
    auth.tokens[TOKEN] = {"username": "hpa-controller", "groups": ["system:authenticated"]}
    auth.allow_all = True
    auth.up()
    auth.write_kubeconfig(auth_kubeconfig)
    (workdir / "server").mkdir()
    running = start_server(
        workdir / "server", *serve_flags(kubeconfig, auth_kubeconfig), demo=False, timeout=60
    )
    yield running
    stop_server(running)
    auth.down()


def until(read: Callable[[], object], expected: object) -> object:
    """Read until the answer is `expected` (watch events take a moment) or the deadline."""
    deadline = time.monotonic() + DEADLINE
    while True:
        found = read()
        if found == expected or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def object_value(client: httpx.Client, path: str = OBJECT_METRIC) -> str | int:
    """The value of a one-object answer, or the HTTP status when there is none."""
    response = client.get(path)
    if response.status_code != 200:
        return response.status_code
    [item] = response.json()["items"]
    return str(item["value"])


def test_object_metric_follows_a_deployment_to_zero_and_back(
    server: RunningServer, api: FakeKubeApiServer
) -> None:
    with server.client(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        # N replicas: N x 250m.
        assert until(lambda: object_value(client), "750m") == "750m"

        # Scale to zero: the controllers set replicas 0 and the pods go.
        api.update("deployments.apps", deployment(0))
        api.update("replicasets.apps", replicaset(0))
        for index in range(REPLICAS):
            api.delete("pods", f"web-5d9c-{index}", namespace=NS)
        assert until(lambda: object_value(client), "0") == "0"

        # What the other aggregates answer while nothing runs.
        cpu = "?metricLabelSelector=resource%3Dcpu"
        at_zero = {
            f"/namespaces/{NS}/metrics/kube_pod_resource_request{cpu}": "0",
            f"/namespaces/{NS}/deployments.apps/web/kube_pod_resource_limit{cpu}": "0",
            f"/namespaces/{NS}/deployments.apps/web/kube_pod_resource_request_hpa{cpu}": "0",
            f"/namespaces/{NS}/deployments.apps/web/kube_running_pod_resource_usage{cpu}": "0",
            f"/namespaces/{NS}/replicasets.apps/web-5d9c/kube_pod_resource_request{cpu}": "0",
            f"/nodes/node-a/kube_pod_resource_request{cpu}": "0",
            f"/nodes/node-a/kube_node_resource_available{cpu}": "4",
            f"/nodes/node-a/kube_node_resource_allocatable{cpu}": "4",
            f"/namespaces/{NS}/deployments.apps/web/kube_pod_resource_utilization{cpu}": 404,
        }
        assert {path: object_value(client, P + path) for path in at_zero} == at_zero

        # A list over the namespace's Deployments carries the zero too.
        listed = client.get(
            f"{P}/namespaces/{NS}/deployments.apps/*/kube_pod_resource_request{cpu}"
        )
        assert listed.status_code == 200
        assert [(i["describedObject"]["name"], i["value"]) for i in listed.json()["items"]] == [
            ("web", "0")
        ]

        # Back up: replicas N again, new pods from the ReplicaSet.
        api.update("deployments.apps", deployment(REPLICAS))
        api.update("replicasets.apps", replicaset(REPLICAS))
        for index in range(REPLICAS):
            api.apply("pods", web_pod(f"web-5d9c-new{index}"))
        assert until(lambda: object_value(client), "750m") == "750m"
        assert object_value(client, f"{P}/nodes/node-a/kube_node_resource_available{cpu}") == (
            "3250m"
        )
