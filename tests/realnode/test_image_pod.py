"""The image `make image` builds, run as a pod on the realnode, installed with the Helm chart.

The archive (`build/image/custom-metrics-server.tar`, or `$IMAGE_ARCHIVE`; image
`localhost/custom-metrics-server:<version>`, or `$IMAGE_REF`) is imported into the realnode's
containerd (`ctr -n k8s.io images import`: the node pulls nothing), then `helm install`
(helm from `make tools`) with the values this cluster needs and nothing else:

* `image.repository`/`image.tag` the imported name, `image.pullPolicy: Never`;
* `replicas: 1` and no PodDisruptionBudget (one node; the chart wants minAvailable below
  replicas);
* `metricsApi.enabled` (kubectl top) and a 5 s `metricResolution` (usage sooner).

The cluster has no DNS and no kube-proxy, and the chart needs neither: the server reaches the
API server with in-cluster config, which names `kubernetes.default` by its ClusterIP
(10.244.0.1, the bridge address, forwarded to the API server); the kubelet is scraped through
the API server's node proxy (the chart's default); and kube-apiserver reaches the server at
its pod IP (aggregator routing), verifying it with the chart's generated CA as `caBundle`.

Then every APIService the chart registers must be Available, `kubectl top pods` and `kubectl
top nodes` must answer through the API server, and a custom metric of the server's own pod
(its CPU request, set by the chart) must come back through the aggregator: the answers come
from the pod, since the only registration is the chart's. Skipped with the reason when the
archive is absent (failed under CI=true, where `.ci/run` runs `make image` first).
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realnode.node import NS_PREFIX, ROOT, RealNode, namespace, wait_for, wait_ready
from tests.tools import require

# The waits inside are bounded (generous deadlines for a busy machine): above the default
# per-test timeout of 120 s, so it is raised for this tier.
pytestmark = [pytest.mark.realnode, pytest.mark.timeout(900)]

ARCHIVE = Path(os.environ.get("IMAGE_ARCHIVE", ROOT / "build/image/custom-metrics-server.tar"))
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE = os.environ.get("IMAGE_REF", f"localhost/custom-metrics-server:{VERSION}")
CHART = ROOT / "charts" / "custom-metrics-server"
RELEASE = "custom-metrics-server"
NS = f"{NS_PREFIX}image"
#: The chart's APIServices with metricsApi on (both metrics.k8s.io versions by default).
API_SERVICES = (
    "v1beta2.custom.metrics.k8s.io",
    "v1beta1.custom.metrics.k8s.io",
    "v1beta1.external.metrics.k8s.io",
    "v1.metrics.k8s.io",
    "v1beta1.metrics.k8s.io",
)


def imported(realnode: RealNode) -> None:
    """Import the archive into the node's containerd (namespace k8s.io, the kubelet's)."""
    if not ARCHIVE.is_file():
        reason = f"no image archive at {ARCHIVE}: run `make image` (or set $IMAGE_ARCHIVE)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run this test: {reason}")
        pytest.skip(reason)
    ctr = ["ctr", "--address", str(realnode.containerd_sock), "--namespace", "k8s.io", "images"]
    result = subprocess.run(  # the node's containerd, as root
        [*ctr, "import", str(ARCHIVE)], capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, result.stderr
    names = subprocess.run(
        [*ctr, "ls", "--quiet"], capture_output=True, text=True, timeout=60, check=True
    )
    assert IMAGE in names.stdout.split(), f"{IMAGE} not among {names.stdout.split()}"


def helm(realnode: RealNode, *args: str, timeout: float = 300) -> str:
    result = subprocess.run(  # helm from `make tools`
        [require("helm", prefer_tools_dir=True), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "KUBECONFIG": str(realnode.kubeconfig)},
    )
    assert result.returncode == 0, f"helm {' '.join(args)}: {result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def release(realnode: RealNode) -> Iterator[str]:
    """The chart installed from the imported image; uninstalled afterwards."""
    imported(realnode)
    repository, _, tag = IMAGE.rpartition(":")
    with namespace(realnode, NS) as ns:
        values = {
            "image.repository": repository,
            "image.tag": tag,
            "image.pullPolicy": "Never",
            "replicas": "1",
            "podDisruptionBudget.enabled": "false",
            "metricsApi.enabled": "true",
            "metricResolution": "5s",
        }
        sets = [item for key, value in values.items() for item in ("--set", f"{key}={value}")]
        helm(realnode, "install", RELEASE, str(CHART), "--namespace", ns, *sets)
        try:
            yield ns
        finally:
            helm(realnode, "uninstall", RELEASE, "--namespace", ns, "--wait", "--timeout", "120s")


def test_the_image_serves_the_metrics_apis_as_a_pod(realnode: RealNode, release: str) -> None:
    [pod] = wait_ready(realnode, release, "app.kubernetes.io/instance=" + RELEASE, 1, timeout=180)
    [container] = pod["spec"]["containers"]
    assert container["image"] == IMAGE
    assert container["imagePullPolicy"] == "Never"

    def unavailable() -> dict[str, str]:
        found = {}
        for name in API_SERVICES:
            item = realnode.get("apiservice", name)
            conditions = {c["type"]: c for c in item.get("status", {}).get("conditions", ())}
            available = conditions.get("Available", {})
            if available.get("status") != "True":
                found[name] = f"{available.get('reason')}: {available.get('message')}"
            assert item["spec"]["service"]["namespace"] == release, item["spec"]
        return found

    wait_for(
        "the chart's APIServices to be Available", lambda: not unavailable() or None, timeout=180
    )

    def top_pods() -> str | None:
        out = realnode.kubectl("top", "pods", "-n", release)
        return out if pod["metadata"]["name"] in out else None

    kubectl_top = wait_for("kubectl top pods to show the server's own pod", top_pods, timeout=120)
    [row] = [line.split() for line in kubectl_top.splitlines()[1:]]
    assert row[0] == pod["metadata"]["name"]
    assert row[1].endswith("m"), row
    assert row[2].endswith("Mi"), row
    assert int(row[2].removesuffix("Mi")) > 10, row  # a Python server's working set

    nodes = wait_for("kubectl top nodes", lambda: realnode.kubectl("top", "nodes"), timeout=60)
    assert nodes.splitlines()[1].split()[0] == realnode.node

    # A custom metric of the server's own pod: the chart's CPU request (100m).
    path = (
        f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{release}/pods/{pod['metadata']['name']}"
        "/kube_pod_resource_request?metricLabelSelector=resource%3Dcpu"
    )
    [item] = json.loads(realnode.raw(path))["items"]
    assert item["value"] == container["resources"]["requests"]["cpu"], item
