"""Explanations, hints and the status page through the real server (TLS) and the real kubectl
(1.37 from `make tools` preferred), one test per explanation outcome; and the `explain` command
with its exit codes.

The server runs a switchable test backend (`tests.fakes.plugins:switchable`) from a backends
file: `switch_pod` of pods answers 5 for `web-*` pods, with a failure policy (absent: zero,
failure: last-good, maxAge 10m); the same metric of deployments.apps has none; `switch_total`
is external. A file says whether the backend is up or down.
"""

from __future__ import annotations

import json
import os
import select
import socket
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from custom_metrics_server.testing.server_process import ServerProcess
from custom_metrics_server.testing.serving import serve_backends
from tests.tools import require

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"
OBJECTS = [
    {"resource": "pods", "namespace": "shop", "name": "web-0", "labels": {"app": "web"}},
    {"resource": "pods", "namespace": "shop", "name": "web-1", "labels": {"app": "web"}},
    {"resource": "pods", "namespace": "shop", "name": "api-0", "labels": {"app": "api"}},
    {"resource": "deployments.apps", "namespace": "shop", "name": "web", "labels": {}},
    {"resource": "deployments.apps", "namespace": "shop", "name": "api", "labels": {}},
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    workdir = tmp_path_factory.mktemp("explain")
    state = workdir / "state"
    state.write_text("up")
    entry = {
        "name": "switch",
        "type": "tests.fakes.plugins:switchable",
        "settings": {"state": str(state)},
        "routes": [
            {
                "api": "custom",
                "resource": "pods",
                "metric": "switch_pod",
                "absent": "zero",
                "failure": "last-good",
                "maxAge": "10m",
            },
            {"api": "custom", "resource": "deployments.apps", "metric": "switch_pod"},
            {"api": "external", "metric": "switch_total"},
        ],
    }
    with serve_backends(workdir, [entry], objects=OBJECTS, pythonpath=[ROOT]) as server:
        yield server, state


def kubectl(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require("kubectl", prefer_tools_dir=True), "--kubeconfig", str(server.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def explained(server: ServerProcess, path: str, query: str = "") -> dict[str, Any]:
    """`kubectl get --raw PATH?QUERY&explain=1`: the explanation document."""
    separator = "&" if query else ""
    result = kubectl(server, "get", "--raw", f"{path}?{query}{separator}explain=1")
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    assert document["kind"] == "MetricExplanation"
    assert document["apiVersion"] == "custom-metrics-server/v1alpha1"
    return document


def test_values_found(served: tuple[ServerProcess, Path]) -> None:
    server, _ = served
    document = explained(
        server, f"{CUSTOM}/namespaces/shop/pods/*/switch_pod", "labelSelector=app%3Dweb"
    )
    assert document["outcome"]["code"] == 200
    assert document["outcome"]["items"] == 2
    assert document["objects"]["matched"] == 2
    assert document["objects"]["samples"]["withValues"] == 2
    assert document["route"]["backend"] == "switch"
    assert "routes[0]" in document["route"]["decidedBy"]
    plain = kubectl(
        server,
        "get",
        "--raw",
        f"{CUSTOM}/namespaces/shop/pods/*/switch_pod?labelSelector=app%3Dweb",
    )
    # the same list but for the timestamps (this backend stamps each answer "now")
    answers = [json.loads(plain.stdout), document["outcome"]["list"]]
    for body in answers:
        for item in body["items"]:
            item.pop("timestamp")
    assert answers[0] == answers[1]


def test_no_backend_serves_the_metric(served: tuple[ServerProcess, Path]) -> None:
    server, _ = served
    path = f"{CUSTOM}/namespaces/shop/pods/web-0/switch_pods"
    document = explained(server, path)
    assert document["outcome"]["code"] == 404
    assert document["route"]["backend"] is None
    assert document["causes"][0]["message"] == (
        "no backend serves metric switch_pods for pods; did you mean switch_pod"
    )
    plain = kubectl(server, "get", "--raw", path)
    assert plain.returncode == 1
    # kubectl shows the Status message, upstream's wording byte for byte
    assert "the server could not find the metric switch_pods for pods web-0" in plain.stderr
    with server.client() as client:
        status = client.get(path).json()
    assert status["message"] == "the server could not find the metric switch_pods for pods web-0"
    assert status["details"]["causes"] == document["causes"]


def test_the_selector_matched_nothing(served: tuple[ServerProcess, Path]) -> None:
    server, _ = served
    document = explained(
        server, f"{CUSTOM}/namespaces/shop/pods/*/switch_pod", "labelSelector=app%3Dnone"
    )
    assert document["outcome"] == {
        "code": 200,
        "items": 0,
        "list": {
            "kind": "MetricValueList",
            "apiVersion": "custom.metrics.k8s.io/v1beta2",
            "metadata": {},
            "items": [],
        },
        "answeredBy": "the backend",
    }
    assert (
        document["causes"][0]["message"]
        == "labelSelector app=none matched 0 pods in namespace shop"
    )


def test_a_named_object_without_a_value(served: tuple[ServerProcess, Path]) -> None:
    server, _ = served
    document = explained(server, f"{CUSTOM}/namespaces/shop/deployments.apps/api/switch_pod")
    assert document["outcome"]["code"] == 404
    assert document["outcome"]["status"]["message"] == (
        "the server could not find the metric switch_pod for deployments.apps api"
    )
    assert document["causes"][0] == {
        "reason": "NoValue",
        "message": "backend switch has no value of switch_pod for deployments.apps shop/api",
    }
    assert document["route"]["failurePolicy"] is None


def test_the_failure_policy_answers_zero_for_an_absent_value(
    served: tuple[ServerProcess, Path],
) -> None:
    server, _ = served
    document = explained(server, f"{CUSTOM}/namespaces/shop/pods/api-0/switch_pod")
    assert document["outcome"]["code"] == 200
    assert document["outcome"]["list"]["items"][0]["value"] == "0"
    assert document["outcome"]["answeredBy"] == "the failure policy (zero)"
    assert document["route"]["failurePolicy"] == {
        "absent": "zero",
        "failure": "last-good",
        "maxAgeSeconds": 600.0,
        "source": "backends[1] 'switch' (type tests.fakes.plugins:switchable): routes[0]",
    }


def test_a_failing_backend(served: tuple[ServerProcess, Path]) -> None:
    server, state = served
    web = f"{CUSTOM}/namespaces/shop/pods/web-1/switch_pod"
    assert explained(server, web)["outcome"]["code"] == 200  # a good value to keep
    state.write_text("down")
    try:
        failing = explained(server, f"{CUSTOM}/namespaces/shop/deployments.apps/web/switch_pod")
        assert failing["outcome"]["code"] == 503
        assert failing["outcome"]["status"]["message"] == "backend switch: switched off"
        assert failing["backend"]["lastError"]["message"] == "backend switch: switched off"
        kept = explained(server, web)
        assert kept["outcome"]["code"] == 200
        assert kept["outcome"]["answeredBy"] == "the failure policy (last good values)"
        assert kept["outcome"]["list"]["items"][0]["value"] == "5"
    finally:
        state.write_text("up")


def test_an_unknown_external_metric_is_an_empty_list_and_visible(
    served: tuple[ServerProcess, Path],
) -> None:
    server, _ = served
    path = f"{EXTERNAL}/namespaces/shop/switch_totl"
    plain = kubectl(server, "get", "--raw", path)
    assert plain.returncode == 0, plain.stderr
    assert json.loads(plain.stdout)["items"] == []
    document = explained(server, path)
    assert document["outcome"]["items"] == 0
    assert "did you mean switch_total" in document["causes"][0]["message"]
    page = kubectl(server, "get", "--raw", f"{CUSTOM}/metric-status")
    assert page.returncode == 0, page.stderr
    assert "external switch_totl:" in page.stdout
    assert "switch_pod" in page.stdout


def test_a_bad_selector_is_explained_as_its_400(served: tuple[ServerProcess, Path]) -> None:
    server, _ = served
    document = explained(server, f"{CUSTOM}/namespaces/shop/pods/*/switch_pod", "labelSelector=%28")
    assert document["outcome"]["code"] == 400
    assert document["outcome"]["status"]["reason"] == "BadRequest"


def test_the_status_page_as_json(served: tuple[ServerProcess, Path]) -> None:
    server, _ = served
    result = kubectl(server, "get", "--raw", f"{EXTERNAL}/metric-status?format=json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["kind"] == "MetricStatusList"
    rows = {(item["api"], item["resource"], item["metric"]): item for item in document["items"]}
    assert (
        rows[("custom", "pods", "switch_pod")]["policy"]
        == "absent: zero, failure: last-good, maxAge: 600s"
    )


def explain_command(
    server: ServerProcess, url: str, *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "custom_metrics_server",
            "explain",
            "--kubeconfig",
            str(server.kubeconfig),
            *args,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_the_explain_command_exit_codes(served: tuple[ServerProcess, Path]) -> None:
    server, _ = served
    found = explain_command(server, f"{CUSTOM}/namespaces/shop/pods/web-0/switch_pod")
    assert found.returncode == 0, found.stderr
    assert "Outcome:" in found.stdout
    assert "200 with 1 items" in found.stdout
    missing = explain_command(server, f"{CUSTOM}/namespaces/shop/pods/web-0/switch_pods")
    assert missing.returncode == 1
    assert "did you mean switch_pod" in missing.stdout
    bad = explain_command(server, f"{CUSTOM}/namespaces/shop/pods/*/switch_pod?labelSelector=%28")
    assert bad.returncode == 3
    as_json = explain_command(server, f"{EXTERNAL}/namespaces/shop/switch_total", "-o", "json")
    assert as_json.returncode == 0
    assert json.loads(as_json.stdout)["outcome"]["items"] == 1
    direct = explain_command(
        server,
        f"{EXTERNAL}/namespaces/shop/switch_total",
        "--server",
        server.url,
        "--certificate-authority",
        str(server.cert_dir / "apiserver.crt"),
    )
    assert direct.returncode == 0, direct.stderr
    unreachable = subprocess.run(
        [
            sys.executable,
            "-m",
            "custom_metrics_server",
            "explain",
            "--server",
            "https://127.0.0.1:1",
            "/apis",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"KUBECONFIG": "/nonexistent", "PATH": "/usr/bin:/bin"},
    )
    assert unreachable.returncode in (2, 4), unreachable.stderr


class _Tunnel(socketserver.BaseRequestHandler):
    """An HTTP CONNECT proxy's one connection: records the request line, then relays bytes."""

    seen: list[bytes]

    def handle(self) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            data = self.request.recv(4096)
            if not data:
                return
            head += data
        line = head.split(b"\r\n", 1)[0]
        self.seen.append(line)
        host, _, port = line.split(b" ")[1].rpartition(b":")
        with socket.create_connection((host.decode(), int(port))) as upstream:
            self.request.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            ends = [self.request, upstream]
            while True:
                readable, _, _ = select.select(ends, [], [], 30)
                if not readable:
                    return
                for end in readable:
                    data = end.recv(65536)
                    if not data:
                        return
                    (upstream if end is self.request else self.request).sendall(data)


def test_the_explain_command_goes_through_an_environment_proxy(
    served: tuple[ServerProcess, Path],
) -> None:
    """HTTPS_PROXY: the one call is tunnelled (CONNECT), the server's certificate verified for
    its own name, as kubectl does."""
    server, _ = served
    seen: list[bytes] = []
    handler = type("Tunnel", (_Tunnel,), {"seen": seen})
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler) as proxy:
        proxy.daemon_threads = True
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        try:
            environment = {
                **os.environ,
                "HTTPS_PROXY": f"http://127.0.0.1:{proxy.server_address[1]}",
                "NO_PROXY": "",
            }
            environment.pop("no_proxy", None)
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "custom_metrics_server",
                    "explain",
                    "--server",
                    server.url,
                    "--certificate-authority",
                    str(server.cert_dir / "apiserver.crt"),
                    f"{EXTERNAL}/namespaces/shop/switch_total",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
                env=environment,
                stdin=subprocess.DEVNULL,
            )
        finally:
            proxy.shutdown()
    assert done.returncode == 0, done.stderr
    host_port = server.url.removeprefix("https://").encode()
    assert [line.rsplit(b" ", 1)[0] for line in seen] == [b"CONNECT " + host_port]
