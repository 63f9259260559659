"""The real kubectl at two versions against the real demo server over TLS: kubectl 1.37
(`make tools`, .tools/bin) discovers everything in one request to `/apis` (plus `/api`) and
reads `metrics.k8s.io/v1`; an older kubectl (the machine's, 1.32 here) keeps working and reads
v1beta1 in `kubectl top`. Requests are counted from `-v=6` with a fresh discovery cache.

Both binaries are needed: a missing one skips the test, and fails it under CI=true (see
tests/tools.py).

kubectl 1.36 and 1.37 through the real aggregator: tests/controlplane/test_aggregation.py.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from custom_metrics_server.testing.server_process import ServerProcess
from tests import tools

pytestmark = pytest.mark.integration

V2 = "g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
_URL = re.compile(r'https://127\.0\.0\.1:\d+(/[^\s"?]*)')
_GV_DISCOVERY = re.compile(r"^/apis/[^/]+/[^/]+$|^/api/v1$")


@functools.cache
def client_minor(binary: str) -> int:
    """The minor version `kubectl version --client` reports."""
    out = subprocess.run(
        [binary, "version", "--client", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return int(re.sub(r"\D", "", json.loads(out)["clientVersion"]["minor"]))


def kubectl_137() -> str:
    found = tools.find("kubectl", prefer_tools_dir=True)
    if found is None or client_minor(found) < 37:
        tools.missing("kubectl", "kubectl 1.37 (`make tools` installs it in .tools/bin)")
    assert found is not None
    return found


def kubectl_old() -> str:
    for candidate in (shutil.which("kubectl"), "/usr/bin/kubectl", "/usr/local/bin/kubectl"):
        if candidate and Path(candidate).is_file() and client_minor(candidate) < 37:
            return candidate
    tools.missing("kubectl", "a kubectl older than 1.37 (the base image has 1.32)")
    raise AssertionError("unreachable")


def run(
    binary: str, server: ServerProcess, cache: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary, "--kubeconfig", str(server.kubeconfig), "--cache-dir", str(cache), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def requested(stderr: str) -> list[str]:
    """The paths kubectl requested, in order, from its `-v=6` log (one line per request in
    both the 1.32 and the 1.37 log formats)."""
    return [
        match.group(1)
        for line in stderr.splitlines()
        if "GET" in line and (match := _URL.search(line))
    ]


def table(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.strip().splitlines()]


def raw(binary: str, server: ServerProcess, cache: Path, path: str) -> Any:
    result = run(binary, server, cache, "get", "--raw", path)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_kubectl_137_discovers_in_one_request_and_reads_v1(
    demo_server: ServerProcess, tmp_path: Path
) -> None:
    kubectl = kubectl_137()
    top = run(kubectl, demo_server, tmp_path / "top", "top", "pods", "-A", "-v=6")
    assert top.returncode == 0, top.stderr
    assert requested(top.stderr) == ["/api", "/apis", "/apis/metrics.k8s.io/v1/pods"]
    assert table(top.stdout)[0] == ["NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)"]
    listed = raw(kubectl, demo_server, tmp_path / "raw", "/apis/metrics.k8s.io/v1/pods")
    assert listed["apiVersion"] == "metrics.k8s.io/v1"
    names = {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in listed["items"]}
    assert {(row[0], row[1]) for row in table(top.stdout)[1:]} == names

    # A full discovery (every resource of every group version) is still those two requests:
    # before aggregated discovery it took one more request per group version (seven here).
    resources = run(kubectl, demo_server, tmp_path / "ar", "api-resources", "-v=6")
    assert resources.returncode == 0, resources.stderr
    assert requested(resources.stderr) == ["/api", "/apis"]
    rows = {(row[0], row[-3]) for row in table(resources.stdout)[1:] if len(row) >= 4}
    assert {("nodes", "metrics.k8s.io/v1"), ("pods", "metrics.k8s.io/v1")} <= rows
    assert ("queue_depth", "external.metrics.k8s.io/v1beta1") in rows

    get = run(kubectl, demo_server, tmp_path / "get", "get", "podmetrics", "-A", "-v=6")
    assert get.returncode == 0, get.stderr
    paths = requested(get.stderr)
    assert [p for p in paths if _GV_DISCOVERY.match(p)] == []
    assert paths[:2] == ["/api", "/apis"]
    assert paths[2] == "/apis/metrics.k8s.io/v1/pods"


def test_kubectl_137_receives_the_aggregated_document(
    demo_server: ServerProcess, tmp_path: Path
) -> None:
    kubectl = kubectl_137()
    result = run(kubectl, demo_server, tmp_path, "top", "nodes", "-v=8")
    assert result.returncode == 0, result.stderr
    log = result.stderr
    assert f"Accept: application/json;{V2},application/json" in log
    assert f"Content-Type: application/json;{V2}" in log
    rows = table(result.stdout)
    assert rows[0] == ["NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"]
    assert len(rows) > 1
    paths = requested(result.stderr)
    assert "/apis/metrics.k8s.io/v1/nodes" in paths
    assert "/apis/metrics.k8s.io/v1beta1/nodes" not in paths


def test_an_older_kubectl_keeps_working(demo_server: ServerProcess, tmp_path: Path) -> None:
    kubectl = kubectl_old()
    top = run(kubectl, demo_server, tmp_path / "top", "top", "pods", "-A", "-v=6")
    assert top.returncode == 0, top.stderr
    # kubectl before 1.37 reads v1beta1 in `top` whatever discovery prefers.
    assert requested(top.stderr) == ["/api", "/apis", "/apis/metrics.k8s.io/v1beta1/pods"]
    new = run(kubectl_137(), demo_server, tmp_path / "new", "top", "pods", "-A")
    assert new.returncode == 0, new.stderr
    assert {tuple(r[:2]) for r in table(top.stdout)} == {tuple(r[:2]) for r in table(new.stdout)}
    nodes = run(kubectl, demo_server, tmp_path / "nodes", "top", "nodes")
    assert nodes.returncode == 0, nodes.stderr
    assert all(row[2].endswith("%") for row in table(nodes.stdout)[1:])
    # Generic reads follow discovery's preferred version, v1 (client-go 1.30+ reads v2 too).
    get = run(kubectl, demo_server, tmp_path / "get", "get", "nodemetrics", "-v=6")
    assert get.returncode == 0, get.stderr
    paths = requested(get.stderr)
    assert [p for p in paths if _GV_DISCOVERY.match(p)] == []
    assert paths[-1] == "/apis/metrics.k8s.io/v1/nodes"
    assert table(get.stdout)[0] == ["NAME", "CPU", "MEMORY", "WINDOW"]


def test_get_raw_reads_both_versions_with_both_kubectls(
    demo_server: ServerProcess, tmp_path: Path
) -> None:
    for kubectl in (kubectl_137(), kubectl_old()):
        v1 = raw(kubectl, demo_server, tmp_path, "/apis/metrics.k8s.io/v1/nodes")
        v1beta1 = raw(kubectl, demo_server, tmp_path, "/apis/metrics.k8s.io/v1beta1/nodes")
        assert (v1["kind"], v1["apiVersion"]) == ("NodeMetricsList", "metrics.k8s.io/v1")
        assert v1beta1["apiVersion"] == "metrics.k8s.io/v1beta1"
        assert [i["metadata"]["name"] for i in v1["items"]] == [
            i["metadata"]["name"] for i in v1beta1["items"]
        ]
        group = raw(kubectl, demo_server, tmp_path, "/apis/metrics.k8s.io")
        assert group["preferredVersion"]["version"] == "v1"
        # A version nobody serves: 404, as upstream.
        missing = run(
            kubectl, demo_server, tmp_path, "get", "--raw", "/apis/metrics.k8s.io/v2/nodes"
        )
        assert missing.returncode != 0
        assert "NotFound" in missing.stderr or "404" in missing.stderr, missing.stderr


def test_the_real_server_answers_the_aggregator(demo_server: ServerProcess) -> None:
    """What kube-aggregator sends an aggregated server every minute, over real TLS: v2 only,
    then `If-None-Match` with the `ETag` it kept; 304 has neither a body nor a length."""
    with demo_server.client() as client:
        first = client.get("/apis", headers={"Accept": f"application/json;{V2}"})
        assert first.status_code == 200
        assert first.headers["content-type"] == f"application/json;{V2}"
        etag = first.headers["etag"]
        again = client.get(
            "/apis", headers={"Accept": f"application/json;{V2}", "If-None-Match": etag}
        )
        assert again.status_code == 304
        assert again.content == b""
        assert "content-length" not in again.headers
        assert again.headers["etag"] == etag
        proto = client.get("/apis", headers={"Accept": f"application/vnd.kubernetes.protobuf;{V2}"})
        assert proto.content[:4] == b"k8s\x00"
        assert proto.headers["etag"] == etag
        refused = client.get("/apis", headers={"Accept": "text/html"})
        assert refused.status_code == 406
        assert refused.json()["reason"] == "NotAcceptable"
