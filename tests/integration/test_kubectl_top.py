"""The real `kubectl top` against the demo server, through the kubeconfig it prints: kubectl
reads metrics.k8s.io (and, for nodes, the core API) from whatever server the kubeconfig names."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from custom_metrics_server.machinery.quantity import Quantity
from custom_metrics_server.testing.server_process import ServerProcess as RunningServer
from tests.integration.test_kubectl import kubectl, raw

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

V = "/apis/metrics.k8s.io/v1beta1"


def rows(output: str) -> list[list[str]]:
    return [line.split() for line in output.strip().splitlines()]


def millicores(text: str) -> int:
    return int(Quantity.parse(text).milli_value())


def pod_cpu_m(item: dict[str, Any]) -> int:
    """kubectl's pod total: the containers' quantities added, then MilliValue (rounded up)."""
    total = Quantity.parse("0")
    for container in item["containers"]:
        total = total + Quantity.parse(container["usage"]["cpu"])
    return millicores(str(total))


def test_kubectl_top_pods_all_namespaces(demo_server: RunningServer) -> None:
    result = kubectl(demo_server, "top", "pods", "-A")
    assert result.returncode == 0, result.stderr
    table = rows(result.stdout)
    assert table[0] == ["NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)"]
    listed = raw(demo_server, f"{V}/pods")["items"]
    assert len(table) - 1 == len(listed) > 0
    expected = {(i["metadata"]["namespace"], i["metadata"]["name"]): i for i in listed}
    for namespace, name, cpu, memory in table[1:]:
        item = expected[(namespace, name)]
        # The values may move between the two calls only at a tick: allow one tick's drift.
        assert cpu.endswith("m")
        assert memory.endswith("Mi")
        assert abs(int(cpu[:-1]) - pod_cpu_m(item)) <= max(5, pod_cpu_m(item) // 2)


def test_kubectl_top_one_pod_with_containers(demo_server: RunningServer) -> None:
    listed = raw(demo_server, f"{V}/namespaces/default/pods?labelSelector=app%3Dweb")["items"]
    assert listed
    name = listed[0]["metadata"]["name"]
    result = kubectl(demo_server, "top", "pod", name, "-n", "default", "--containers")
    assert result.returncode == 0, result.stderr
    table = rows(result.stdout)
    assert table[0] == ["POD", "NAME", "CPU(cores)", "MEMORY(bytes)"]
    want = sorted(container["name"] for container in listed[0]["containers"])
    assert sorted(row[1] for row in table[1:]) == want == ["proxy", "web"]
    assert all(row[0] == name for row in table[1:])


def test_kubectl_top_nodes(demo_server: RunningServer) -> None:
    result = kubectl(demo_server, "top", "nodes")
    assert result.returncode == 0, result.stderr
    table = rows(result.stdout)
    assert table[0] == ["NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"]
    names = [item["metadata"]["name"] for item in raw(demo_server, f"{V}/nodes")["items"]]
    assert [row[0] for row in table[1:]] == sorted(names)
    for row in table[1:]:
        # Percentages come from the nodes' allocatable (the demo's /api/v1/nodes).
        assert row[2].endswith("%"), row
        assert row[4].endswith("%"), row
        assert "<unknown>" not in row


def test_kubectl_top_errors_read_like_metrics_server(demo_server: RunningServer) -> None:
    missing = kubectl(demo_server, "top", "pod", "nope", "-n", "default")
    assert missing.returncode != 0
    assert 'pods "nope" not found' in missing.stderr
    node = kubectl(demo_server, "top", "node", "nope")
    assert node.returncode != 0
    assert 'node "nope" not found' in node.stderr


def test_kubectl_get_podmetrics_uses_the_table_form(demo_server: RunningServer) -> None:
    result = kubectl(demo_server, "get", "podmetrics", "-n", "default")
    assert result.returncode == 0, result.stderr
    table = rows(result.stdout)
    assert table[0] == ["NAME", "CPU", "MEMORY", "WINDOW"]
    assert len(table) > 1
    # Go durations from the scrape pair (15s at start, then the simulated scrapes' spacing).
    assert all(row[3].endswith("s") for row in table[1:])
    assert all(row[3][0].isdigit() for row in table[1:])
    nodes = kubectl(demo_server, "get", "nodemetrics", "-o", "name")
    assert nodes.returncode == 0, nodes.stderr
    assert nodes.stdout.startswith("nodemetrics.metrics.k8s.io/")
