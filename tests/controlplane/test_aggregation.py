"""Our server behind the real aggregator: registered by the production overlay's APIServices
(caBundle from generate-certs.sh), reached through kube-apiserver by kubectl 1.36 and 1.37,
discovered the way the aggregator merges discovery, authenticated by the front-proxy headers
the aggregator sets (trust read from the real `extension-apiserver-authentication` ConfigMap)
and authorized by SubjectAccessReviews against real RBAC.

The fake-based twins (tests/security/test_delegated_integration.py, tests/kube/test_discovery.py,
tests/integration/test_kubectl*.py) keep what a real cluster cannot stage: forged or malformed
headers from a rogue proxy, review errors and timeouts, a 500 from the API server.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import tools
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.conftest import Deployed
from tests.controlplane.deployment import direct_client

pytestmark = pytest.mark.integration

V2 = "/apis/custom.metrics.k8s.io/v1beta2"
METRIC = "kube_pod_resource_request"
OTHER_METRIC = "kube_pod_resource_limit"
DISCOVERY_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


@pytest.fixture(scope="module")
def workload(deployed: Deployed) -> Iterator[str]:
    """A namespace with one pod requesting 250m CPU, seen by the server."""
    plane = deployed.plane
    namespace = plane.create_namespace("wip-real-agg")
    plane.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "web-1", "namespace": namespace, "labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "example.invalid/web",
                            "resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "1"}},
                        }
                    ]
                },
            }
        ]
    )

    def seen() -> bool:
        result = plane.kubectl("get", "--raw", request_path(namespace), check=False)
        return result.returncode == 0 and '"web-1"' in result.stdout

    plane.wait_until(seen, "the server to serve the new pod's request through the aggregator")
    yield namespace
    plane.kubectl("delete", "namespace", namespace, "--wait=false")


def request_path(namespace: str, metric: str = METRIC, version: str = "v1beta2") -> str:
    return (
        f"/apis/custom.metrics.k8s.io/{version}/namespaces/{namespace}/pods/*/{metric}"
        "?metricLabelSelector=resource%3Dcpu"
    )


def test_apiservices_with_the_overlays_ca_bundle_are_available(deployed: Deployed) -> None:
    plane = deployed.plane
    assert sorted(deployed.apiservices) == [
        "v1beta1.custom.metrics.k8s.io",
        "v1beta1.external.metrics.k8s.io",
        "v1beta2.custom.metrics.k8s.io",
    ]
    ca = (deployed.build.certs / "ca.crt").read_bytes()
    for name in deployed.apiservices:
        document = plane.get_json(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}")
        assert base64.b64decode(document["spec"]["caBundle"]) == ca
        assert "insecureSkipTLSVerify" not in document["spec"]
        assert plane.apiservice_conditions(name)["Available"]["status"] == "True"


def test_the_aggregator_refuses_a_server_whose_certificate_the_ca_bundle_does_not_sign(
    deployed: Deployed,
) -> None:
    """The caBundle is what makes Available true: the same server registered with another
    CA's bundle stays unavailable (a version of a group of our own, so nothing else moves)."""
    plane = deployed.plane
    other_ca = plane.pki.front_proxy_ca.cert_pem
    names = plane.register_apiservice(
        deployed.port,
        other_ca,
        namespace="custom-metrics",
        service="custom-metrics-server",
        versions=[("wrong-ca.example.com", "v1", 10)],
    )
    try:
        last: dict[str, Any] = {}

        def judged() -> bool:
            last.update(plane.apiservice_conditions(names[0]).get("Available", {}))
            return last.get("reason") == "FailedDiscoveryCheck"

        plane.wait_until(judged, "the aggregator's verdict", detail=lambda: json.dumps(last))
        assert last["status"] == "False"
        assert "certificate" in last["message"]
    finally:
        plane.kubectl("delete", "apiservice", *names)


def test_aggregated_discovery_lists_our_groups_as_the_aggregator_merges_them(
    deployed: Deployed, workload: str
) -> None:
    with deployed.plane.admin_client() as client:
        response = client.get("/apis", headers={"Accept": DISCOVERY_V2})
    assert response.status_code == 200
    assert "apidiscovery.k8s.io" in response.headers["content-type"]
    groups = {g["metadata"]["name"]: g for g in response.json()["items"]}
    custom = groups["custom.metrics.k8s.io"]
    assert [v["version"] for v in custom["versions"]] == ["v1beta2", "v1beta1"]
    resources = {r["resource"] for r in custom["versions"][0]["resources"]}
    assert "pods" in resources or any(r.startswith("pods") for r in resources), resources
    assert [v["version"] for v in groups["external.metrics.k8s.io"]["versions"]] == ["v1beta1"]
    # The legacy /apis/<group> answer agrees on the preferred version.
    legacy = deployed.plane.get_json("/apis/custom.metrics.k8s.io")
    assert legacy["preferredVersion"]["version"] == "v1beta2"


def kubectl_versions(plane: ControlPlane) -> list[tuple[str, Path]]:
    """kubectl 1.36 (../shared/k8s) and, when `make tools` ran, 1.37 (.tools/bin)."""
    found = [("1.36", plane.kubectl_binary)]
    newer = tools.find("kubectl", prefer_tools_dir=True)
    if newer is not None:
        out = subprocess.run(
            [newer, "version", "--client", "-o", "json"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        minor = int(re.sub(r"\D", "", json.loads(out)["clientVersion"]["minor"]))
        if minor >= 37:
            found.append(("1.37", Path(newer)))
    if len(found) == 1:
        tools.missing("kubectl", "kubectl 1.37 (`make tools` installs it in .tools/bin)")
    return found


def test_kubectl_reads_metrics_through_the_aggregator(deployed: Deployed, workload: str) -> None:
    plane = deployed.plane
    for label, binary in kubectl_versions(plane):
        for version in ("v1beta2", "v1beta1"):
            result = plane.kubectl(
                "get", "--raw", request_path(workload, version=version), binary=binary
            )
            document = json.loads(result.stdout)
            assert document["kind"] == "MetricValueList", (label, document)
            (item,) = document["items"]
            assert item["describedObject"]["name"] == "web-1"
            assert item["value"] == "250m", (label, version, item)
        # Discovery through the aggregator, with a fresh cache: kubectl lists our group.
        cache = plane.base / f"kubectl-cache-{label}"
        groups = plane.kubectl("api-versions", f"--cache-dir={cache}", binary=binary).stdout
        assert "custom.metrics.k8s.io/v1beta2" in groups.split()
        assert "external.metrics.k8s.io/v1beta1" in groups.split()


def read_one_metric_role(plane: ControlPlane, namespace: str, group: str) -> None:
    """manifests/examples' Role shape: get on one metric of pods, bound to `group`."""
    plane.apply(
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": f"read-{METRIC}", "namespace": namespace},
                "rules": [
                    {
                        "apiGroups": ["custom.metrics.k8s.io"],
                        "resources": [f"pods/{METRIC}"],
                        "verbs": ["get"],
                    }
                ],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": f"{group}-reads-{METRIC}", "namespace": namespace},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": f"read-{METRIC}",
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}
                ],
            },
        ]
    )


def reviews_about(plane: ControlPlane, user: str) -> list[dict[str, Any]]:
    """The SubjectAccessReviews our server created about `user` (audit log, with bodies)."""
    return [
        event["requestObject"]["spec"]
        for event in plane.audit_events()
        if (event.get("objectRef") or {}).get("resource") == "subjectaccessreviews"
        and event["user"]["username"]
        == "system:serviceaccount:custom-metrics:custom-metrics-server"
        and (event.get("requestObject") or {}).get("spec", {}).get("user") == user
    ]


def test_a_role_granting_one_metric_through_the_aggregator(
    deployed: Deployed, workload: str
) -> None:
    """A client certificate's user and group reach our server as the aggregator's front-proxy
    headers: its SubjectAccessReview names them, and real RBAC answers it."""
    plane = deployed.plane
    read_one_metric_role(plane, workload, "metric-readers")
    carol = plane.user_kubeconfig("wip-real-carol", ("metric-readers",))
    granted = plane.kubectl("get", "--raw", request_path(workload), kubeconfig=carol)
    assert json.loads(granted.stdout)["items"][0]["value"] == "250m"
    refused = plane.kubectl(
        "get", "--raw", request_path(workload, OTHER_METRIC), kubeconfig=carol, check=False
    )
    assert refused.returncode != 0
    assert "forbidden" in refused.stderr.lower()
    assert f"pods/{OTHER_METRIC}" in refused.stderr
    reviews = reviews_about(plane, "wip-real-carol")
    assert reviews, "our server asked no SubjectAccessReview about the forwarded user"
    spec = reviews[0]
    assert spec["groups"] == ["metric-readers", "system:authenticated"]
    assert spec["resourceAttributes"]["group"] == "custom.metrics.k8s.io"
    assert spec["resourceAttributes"]["resource"] == "pods"
    assert spec["resourceAttributes"]["subresource"] == METRIC
    assert spec["resourceAttributes"]["namespace"] == workload


def test_our_servers_own_review_refuses_a_token_without_the_role(
    deployed: Deployed, workload: str
) -> None:
    """Straight to our server with ServiceAccount tokens: TokenReview and SubjectAccessReview
    against the real API server decide, the aggregator out of the way."""
    plane = deployed.plane
    plane.kubectl("-n", workload, "create", "serviceaccount", "reader")
    plane.kubectl("-n", workload, "create", "serviceaccount", "stranger")
    read_one_metric_role(plane, workload, "metric-readers")
    plane.kubectl(
        "-n",
        workload,
        "create",
        "rolebinding",
        "reader-reads",
        f"--role=read-{METRIC}",
        f"--serviceaccount={workload}:reader",
    )
    reader = plane.service_account_token(workload, "reader")
    stranger = plane.service_account_token(workload, "stranger")
    path = request_path(workload)
    with direct_client(deployed.server, deployed.build, reader) as client:
        allowed = client.get(path)
        other = client.get(request_path(workload, OTHER_METRIC))
    with direct_client(deployed.server, deployed.build, stranger) as client:
        refused = client.get(path)
    with direct_client(deployed.server, deployed.build, "not-a-token") as client:
        unknown = client.get(path)
    assert allowed.status_code == 200, allowed.text
    assert allowed.json()["items"][0]["value"] == "250m"
    for response in (other, refused):
        assert response.status_code == 403, response.text
        assert response.json()["kind"] == "Status"
        assert response.json()["reason"] == "Forbidden"
    assert f"system:serviceaccount:{workload}:stranger" in refused.json()["message"]
    assert unknown.status_code == 401, unknown.text
    assert unknown.json()["kind"] == "Status"


def test_the_extension_apiserver_authentication_configmap_is_where_trust_came_from(
    deployed: Deployed,
) -> None:
    """The Deployment passes no --client-ca-file or --requestheader-* flag: the server read
    them from kube-apiserver's own ConfigMap, which holds this plane's CAs."""
    plane = deployed.plane
    args = " ".join(deployed.build.container()["args"])
    assert "--requestheader" not in args
    assert "--client-ca-file" not in args
    config = plane.get_json(
        "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
    )["data"]
    assert config["requestheader-client-ca-file"].strip() == (
        plane.pki.front_proxy_ca.cert_pem.decode().strip()
    )
    assert json.loads(config["requestheader-allowed-names"]) == ["front-proxy-client"]
    assert config["client-ca-file"].strip() == plane.pki.ca.cert_pem.decode().strip()
    deadline = time.monotonic() + 30
    line = "configmap kube-system/extension-apiserver-authentication read"
    while line not in deployed.server.logs():
        assert time.monotonic() < deadline, deployed.server.logs()
        time.sleep(0.2)
    logged = next(x for x in deployed.server.logs().splitlines() if line in x)
    assert "allowed names: front-proxy-client" in logged
