"""The fake API server kept honest: the same cluster state (a namespace, a node, pods with
requests, limits, labels and running status) loaded into the real kube-apiserver and into
`tests.fakes.kube_apiserver.FakeKubeApiServer`, one server process beside each (same flags,
the same kubelet stub dialled directly), and their answers compared: custom.metrics.k8s.io
(Pods metrics by name, wildcard and label selector, in both versions), metrics.k8s.io (pods
and the node) and the errors for what does not exist. A difference means the fake serves
something kube-apiserver does not (or the other way round), so the fake-based tests would
be testing a cluster that does not exist.

Both API servers see other things too (the real one the session's other tests), so every
query is scoped to this test's namespace and node.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_metrics_server.machinery.quantity import Quantity
from custom_metrics_server.testing.server_process import ServerProcess, start_server, stop_server
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.kubelet_stub import Container, KubeletStub, kubelet_stub
from tests.fakes.auth_webhooks import FakeAuthApiServer
from tests.fakes.cluster_process import write_kubeconfig
from tests.fakes.kube_apiserver import FakeKubeApiServer

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
CM = "/apis/custom.metrics.k8s.io"
MA = "/apis/metrics.k8s.io/v1beta1"


def state(namespace: str, node: str) -> tuple[Obj, Obj, list[Obj]]:
    """The namespace, the node and the pods (each with the status a kubelet would report)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 600))
    namespace_obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    node_obj = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}},
        "status": {
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": "3800m", "memory": "15Gi", "pods": "110"},
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        },
    }
    pods = []
    for name, app, cpu, memory in [
        ("web-1", "web", "250m", "64Mi"),
        ("web-2", "web", "500m", "128Mi"),
        ("db-0", "db", "1", "1Gi"),
    ]:
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
                "spec": {
                    "nodeName": node,
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "main",
                            "image": "example.invalid/app",
                            "resources": {
                                "requests": {"cpu": cpu, "memory": memory},
                                "limits": {"cpu": "2", "memory": memory},
                            },
                        }
                    ],
                },
                "status": {
                    "phase": "Running",
                    "podIP": "10.1.0.1",
                    "hostIP": "127.0.0.1",
                    "startTime": now,
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
                    "containerStatuses": [
                        {
                            "name": "main",
                            "ready": True,
                            "restartCount": 0,
                            "started": True,
                            "image": "example.invalid/app",
                            "imageID": "",
                            "containerID": "containerd://1",
                            "state": {"running": {"startedAt": now}},
                        }
                    ],
                },
            }
        )
    return namespace_obj, node_obj, pods


def load_real(plane: ControlPlane, namespace: Obj, node: Obj, pods: list[Obj]) -> None:
    """Create the objects, then set their status as a kubelet would (create drops it)."""
    name = namespace["metadata"]["name"]
    plane.apply([namespace])
    plane.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": name},
            }
        ]
    )
    plane.apply([{k: v for k, v in o.items() if k != "status"} for o in [node, *pods]])
    for obj in [node, *pods]:
        plane.kubectl(
            "apply",
            "--server-side",
            "--subresource=status",
            "--force-conflicts",
            "--field-manager=cms-tests-kubelet",
            "-f",
            "-",
            input=yaml.safe_dump(obj),
        )


def load_fake(api: FakeKubeApiServer, namespace: Obj, node: Obj, pods: list[Obj]) -> None:
    api.apply("namespaces", namespace)
    api.apply("nodes", node)
    for pod in pods:
        api.apply("pods", pod)


def start(
    workdir: Path, kubeconfig: Path, auth: Path, kubelet: KubeletStub, *extra: str
) -> ServerProcess:
    return start_server(
        workdir,
        "--kubeconfig",
        str(kubeconfig),
        "--authentication-kubeconfig",
        str(auth),
        "--authorization-kubeconfig",
        str(auth),
        *extra,
        "--kubelet-source",
        "direct",
        "--kubelet-port",
        str(kubelet.port),
        "--kubelet-certificate-authority",
        str(kubelet.ca_file),
        "--enable-metrics-api",
        "--metric-resolution",
        "1s",
        demo=False,
        timeout=60,
    )


@dataclass
class Pair:
    real: ServerProcess  # beside the real API server
    fake: ServerProcess  # beside the fake
    token: str  # a reader's token, accepted by both
    namespace: str
    node: str


@pytest.fixture(scope="module")
def servers(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pair]:
    """The two servers. Delegated authentication and authorization go to each side's own:
    the real API server's TokenReview and RBAC (a ServiceAccount bound to the metrics
    readers' roles), the fake's auth webhooks (that same token, everything allowed)."""
    suffix = uuid.uuid4().hex[:6]
    namespace, node = f"wip-real-diff-{suffix}", f"wip-real-diff-node-{suffix}"
    ns_obj, node_obj, pods = state(namespace, node)
    workdir = tmp_path_factory.mktemp("differential")
    containers = [
        Container(namespace, "web-1", "main", 0.25, 50 * 2**20),
        Container(namespace, "web-2", "main", 0.5, 100 * 2**20),
        Container(namespace, "db-0", "main", 0.125, 700 * 2**20),
    ]
    load_real(control_plane, ns_obj, node_obj, pods)
    token = reader_token(control_plane, namespace)
    with (
        FakeKubeApiServer() as api,
        FakeAuthApiServer() as auth,
        kubelet_stub(workdir, containers) as kubelet,
    ):
        load_fake(api, ns_obj, node_obj, pods)
        auth.tokens[token] = {
            "username": f"system:serviceaccount:{namespace}:reader",
            "groups": ["system:serviceaccounts", "system:authenticated"],
        }
        auth.allow_all = True
        fake_kubeconfig = workdir / "fake.kubeconfig"
        write_kubeconfig(fake_kubeconfig, api.url)
        admin = control_plane.admin_kubeconfig
        real = start(workdir / "real", admin, admin, kubelet)
        try:
            fake = start(
                workdir / "fake",
                fake_kubeconfig,
                auth.write_kubeconfig(workdir / "auth.kubeconfig"),
                kubelet,
                "--authentication-skip-lookup",  # the fake has no extension-apiserver-auth...
            )
            try:
                yield Pair(real, fake, token, namespace, node)
            finally:
                stop_server(fake)
        finally:
            stop_server(real)
    control_plane.kubectl("delete", "clusterrolebinding", f"{namespace}-reader")
    control_plane.kubectl("delete", "node", node, "--wait=false")
    control_plane.kubectl("delete", "namespace", namespace, "--wait=false")


def strip_times(document: Any) -> Any:
    """The answer without what depends on when it was made: timestamps, creation times, the
    usage window (the time between the two scrapes the rate came from), and CPU usage below a
    millionth of a core (the rate is worked out on float epoch seconds, whose rounding moves it
    by a few nanocores from one pair of scrape times to another)."""
    if isinstance(document, dict):
        stripped = {
            k: strip_times(v)
            for k, v in document.items()
            if k not in ("timestamp", "creationTimestamp", "window")
        }
        if isinstance(stripped.get("usage"), dict) and "cpu" in stripped["usage"]:
            cores = Quantity.parse(stripped["usage"]["cpu"]).value
            stripped["usage"]["cpu"] = f"{round(cores * 1_000_000)}u"
        return stripped
    if isinstance(document, list):
        return [strip_times(v) for v in document]
    return document


def reader_token(plane: ControlPlane, namespace: str) -> str:
    """A ServiceAccount allowed to read both metrics APIs (the bootstrap roles the HPA and
    `kubectl top` users get are wider; these are the two the queries need)."""
    plane.kubectl("-n", namespace, "create", "serviceaccount", "reader")
    plane.apply(
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"{namespace}-reader"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "custom-metrics-server-resources",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "custom-metrics-server-resources"},
                "rules": [
                    {
                        "apiGroups": [
                            "custom.metrics.k8s.io",
                            "external.metrics.k8s.io",
                            "metrics.k8s.io",
                        ],
                        "resources": ["*"],
                        "verbs": ["get", "list", "watch"],
                    }
                ],
            },
        ]
    )
    return plane.service_account_token(namespace, "reader")


def ask(server: ServerProcess, token: str, path: str) -> tuple[int, Any]:
    with server.client(headers={"Authorization": f"Bearer {token}"}) as client:
        response = client.get(path)
    body = (
        response.json()
        if response.headers.get("content-type", "").startswith("application/json")
        else response.text
    )
    return response.status_code, strip_times(body)


def queries(namespace: str, node: str) -> list[str]:
    pods = f"{CM}/v1beta2/namespaces/{namespace}/pods"
    cpu = "metricLabelSelector=resource%3Dcpu"
    return [
        f"{pods}/*/kube_pod_resource_request?{cpu}",
        f"{pods}/*/kube_pod_resource_limit?metricLabelSelector=resource%3Dmemory",
        f"{pods}/*/kube_pod_resource_request?labelSelector=app%3Dweb&{cpu}",
        f"{pods}/web-2/kube_pod_resource_request?{cpu}",
        f"{CM}/v1beta1/namespaces/{namespace}/pods/*/kube_pod_resource_request?{cpu}",
        f"{pods}/no-such-pod/kube_pod_resource_request?{cpu}",
        f"{CM}/v1beta2/namespaces/no-such-namespace/pods/*/kube_pod_resource_request?{cpu}",
        f"{MA}/namespaces/{namespace}/pods",
        f"{MA}/namespaces/{namespace}/pods?labelSelector=app%3Dweb",
        f"{MA}/namespaces/{namespace}/pods/db-0",
        f"{MA}/namespaces/{namespace}/pods/no-such-pod",
        f"{MA}/nodes/{node}",
    ]


def test_the_fake_and_the_real_api_server_give_the_same_answers(servers: Pair) -> None:
    real, fake, namespace, node = servers.real, servers.fake, servers.namespace, servers.node

    def answer(server: ServerProcess, path: str) -> tuple[int, Any]:
        return ask(server, servers.token, path)

    # Both have scraped the kubelet twice (a CPU rate needs two samples) once every pod has usage.
    usage = f"{MA}/namespaces/{namespace}/pods"
    for server in (real, fake):
        deadline = time.monotonic() + 60
        while len(answer(server, usage)[1].get("items", [])) < 3:
            assert time.monotonic() < deadline, f"no usage for 3 pods: {answer(server, usage)}"
            time.sleep(0.2)
    differences = []
    for path in queries(namespace, node):
        real_answer, fake_answer = answer(real, path), answer(fake, path)
        if real_answer != fake_answer:
            differences.append(
                f"{path}\n  real: {json.dumps(real_answer)}\n  fake: {json.dumps(fake_answer)}"
            )
    assert not differences, "\n".join(differences)
    # And the answers are the state's, not two equal mistakes.
    status, web = answer(real, queries(namespace, node)[2])
    assert status == 200
    assert sorted((i["describedObject"]["name"], i["value"]) for i in web["items"]) == [
        ("web-1", "250m"),
        ("web-2", "500m"),
    ]
    status, db = answer(real, f"{MA}/namespaces/{namespace}/pods/db-0")
    assert status == 200
    assert db["containers"][0]["usage"]["cpu"] == "125000u"  # 0.125 cores, as the stub's rate
