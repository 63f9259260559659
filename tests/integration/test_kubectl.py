"""The real `kubectl get --raw` against the demo server, through the kubeconfig it prints."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from typing import Any

import pytest

from custom_metrics_server.testing.server_process import ServerProcess as RunningServer

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]


def kubectl(server: RunningServer, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(server.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def raw(server: RunningServer, path: str) -> Any:
    result = kubectl(server, "get", "--raw", path)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_printed_example_commands_work_verbatim(demo_server: RunningServer) -> None:
    commands = [
        line.strip()
        for line in demo_server.banner.splitlines()
        if line.strip().startswith("kubectl ")
    ]
    # Two reads, `kubectl top` and the last read explained (a shell comment after it).
    assert len(commands) == 4
    for command in commands:
        result = subprocess.run(
            shlex.split(command, comments=True),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        assert result.returncode == 0, result.stderr
        if " top " in command:
            assert result.stdout.startswith("NAMESPACE"), command
            continue
        document = json.loads(result.stdout)
        if "explain=1" in command:
            assert document["kind"] == "MetricExplanation", command
            assert document["outcome"]["code"] == 200, command
            continue
        assert document["items"], command


def test_pods_wildcard_query_returns_the_selected_pods(demo_server: RunningServer) -> None:
    body = raw(
        demo_server,
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/http_requests_per_second?labelSelector=app%3Dweb",
    )
    assert body["kind"] == "MetricValueList"
    names = [item["describedObject"]["name"] for item in body["items"]]
    assert len(names) == 16  # a fifth of --demo-pods 80
    assert all(name.startswith("web-") for name in names)
    assert all(item["metric"]["name"] == "http_requests_per_second" for item in body["items"])


def test_object_query_returns_exactly_one_item(demo_server: RunningServer) -> None:
    body = raw(
        demo_server,
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/deployments.apps/web/http_requests_per_second",
    )
    assert [item["describedObject"] for item in body["items"]] == [
        {"kind": "Deployment", "namespace": "default", "name": "web", "apiVersion": "apps/v1"}
    ]


def test_namespace_metric(demo_server: RunningServer) -> None:
    body = raw(
        demo_server, "/apis/custom.metrics.k8s.io/v1beta1/namespaces/shop/metrics/queue_length"
    )
    assert body["items"][0]["describedObject"] == {
        "kind": "Namespace",
        "name": "shop",
        "apiVersion": "v1",
    }
    assert body["items"][0]["metricName"] == "queue_length"


def test_discovery_through_kubectl(demo_server: RunningServer) -> None:
    body = raw(demo_server, "/apis/custom.metrics.k8s.io/v1beta2")
    names = {resource["name"] for resource in body["resources"]}
    assert {
        "pods/http_requests_per_second",
        "namespaces/queue_length",
        "ingresses.networking.k8s.io/requests_per_second",
    } <= names
    groups = raw(demo_server, "/apis")
    assert "external.metrics.k8s.io" in {group["name"] for group in groups["groups"]}
    result = kubectl(
        demo_server, "api-resources", "--api-group=external.metrics.k8s.io", "-o", "name"
    )
    assert result.returncode == 0, result.stderr
    assert "queue_depth.external.metrics.k8s.io" in result.stdout.split()


def test_kubectl_shows_status_errors_with_reason_and_message(demo_server: RunningServer) -> None:
    result = kubectl(
        demo_server,
        "get",
        "--raw",
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/nope/http_requests_per_second",
    )
    assert result.returncode != 0
    assert (
        "Error from server (NotFound): the server could not find the metric http_requests_per_second for pods nope"
        in result.stderr
    )
