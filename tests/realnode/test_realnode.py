"""The `realnode` fixture itself: what it yields is the running cluster the tier relies on."""

from __future__ import annotations

import httpx
import pytest

from tests.realnode.node import RealNode

# The waits inside are bounded (generous deadlines for a busy machine): above the default
# per-test timeout of 120 s, so it is raised for this tier.
pytestmark = [pytest.mark.realnode, pytest.mark.timeout(900)]


def test_the_fixture_names_a_running_cluster_with_one_ready_node(realnode: RealNode) -> None:
    [node] = realnode.get("nodes")["items"]
    assert node["metadata"]["name"] == realnode.node
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
    assert ready == "True"
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == realnode.node_ip
    for path in (
        realnode.kubeconfig,
        realnode.ca,
        realnode.metrics_server_kubeconfig,
        realnode.containerd_sock,
        realnode.k8s_bin / "kubectl",
    ):
        assert path.exists(), path


def test_the_kubelet_serves_a_certificate_of_the_cluster_ca(realnode: RealNode) -> None:
    """The kubelet's serving certificate verifies against the cluster CA at its InternalIP
    (what `--kubelet-source=direct` without an insecure flag relies on)."""
    with httpx.Client(verify=realnode.ssl_context(), timeout=30) as client:
        answer = client.get(f"{realnode.kubelet_url}/metrics/resource")
    assert answer.status_code == 200
    assert (
        "container_cpu_usage_seconds_total" in answer.text
        or "node_cpu_usage_seconds_total" in answer.text
    )
