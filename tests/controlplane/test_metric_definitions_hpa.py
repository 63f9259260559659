"""The real HPA controller (kube-controller-manager, every 2 s) scaling a Deployment on a
MetricDefinition's External metric, read through the real aggregator from our server: an
unmodified `autoscaling/v2` HPA, a schedule definition as its metric.

The expected counts are the controller's External `AverageValue` formula
(`pkg/controller/podautoscaler/replica_calculator.go`, `GetExternalPerPodMetricReplicas`):
`ceil(value / averageValue)` whatever the current count, so value 3 with `averageValue: 1`
is 3 replicas, and value 1 brings it back to 1. The pods stay Pending (no kubelet here): the
External form does not read them.

The Pods form: a `pods` definition over the Deployment's pods, `averageValue: 100` and a value
of 300 from the one Running pod: `ceil(1 x 300 / 100) = 3`. No kubelet runs here, so the test
sets that pod Running at 127.0.0.1 as a kubelet would (as
tests/controlplane/test_metric_definitions_serving.py does), its container port a local
exporter's; the pods the scale-up adds stay Pending, which the controller leaves out of a Pods
metric (`groupPods`), so 3 is the formula's fixed point.

The server is ours with only the `metric-definitions` backend, started with the production
overlay's serving certificate; the overlay's APIServices are pointed at it for this module and
back at the overlay's server after (`deployment.route`, the same helper the `deployed` fixture
uses), so the aggregator checks the certificate against the overlay's caBundle as usual.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from custom_metrics_server.testing.server_process import ServerProcess, start_server, stop_server
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.conftest import Deployed
from tests.controlplane.deployment import direct_client, route
from tests.controlplane.test_metric_definitions_serving import (
    Exporter,
    constant,
    definition,
    set_running,
)
from tests.controlplane.test_metric_definitions_status import install

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

Obj = dict[str, Any]
#: A failure limit for a busy machine (syncs every 2 s), not a speed target.
SCALE_DEADLINE = 180.0


@pytest.fixture(scope="module")
def aggregated(
    control_plane_with_controllers: ControlPlane,
    deployed: Deployed,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServerProcess]:
    """Our server with the `metric-definitions` backend, behind the overlay's APIServices."""
    plane = control_plane_with_controllers
    install(plane)
    workdir: Path = tmp_path_factory.mktemp("hpa")
    backends = workdir / "backends.yaml"
    settings = {"kubeconfig": str(plane.admin_kubeconfig), "limits": {"minInterval": "5s"}}
    backends.write_text(
        yaml.safe_dump(
            {
                "backends": [
                    # The cluster view (pods) the Pods form's `pods/*` requests need.
                    {
                        "name": "kubernetes",
                        "type": "kubernetes",
                        "settings": {"kubeconfig": str(plane.admin_kubeconfig)},
                    },
                    {
                        "name": "metric-definitions",
                        "type": "metric-definitions",
                        "settings": settings,
                    },
                ]
            }
        )
    )
    certs = deployed.build.certs
    admin = str(plane.admin_kubeconfig)
    server = start_server(
        workdir,
        "--backends-config",
        str(backends),
        "--secure-port",
        "0",
        "--tls-cert-file",
        str(certs / "tls.crt"),
        "--tls-private-key-file",
        str(certs / "tls.key"),
        "--authentication-kubeconfig",
        admin,
        "--authorization-kubeconfig",
        admin,
        demo=False,
        ready=False,
        timeout=60,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError), direct_client(server, deployed.build) as c:
                if c.get("/readyz").status_code == 200:
                    break
            assert time.monotonic() < deadline, f"never ready:\n{server.logs()}"
            time.sleep(0.2)
        names = route(plane, deployed.build, int(server.url.rsplit(":", 1)[1]))
        plane.wait_available(names)
        yield server
    finally:
        route(plane, deployed.build, deployed.port)
        plane.wait_available(deployed.apiservices)
        stop_server(server)


def external_metric(metric: str) -> Obj:
    """External `metric` at averageValue 1."""
    return {
        "type": "External",
        "external": {
            "metric": {"name": metric},
            "target": {"type": "AverageValue", "averageValue": "1"},
        },
    }


def hpa(namespace: str, name: str, metric: Obj) -> Obj:
    """An autoscaling/v2 HPA on Deployment `name` on `metric`, that scales at once both ways
    (as tests/realnode/test_hpa.py's)."""
    fast = {
        "stabilizationWindowSeconds": 0,
        "policies": [{"type": "Pods", "value": 10, "periodSeconds": 1}],
    }
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": 1,
            "maxReplicas": 10,
            "metrics": [metric],
            "behavior": {"scaleUp": fast, "scaleDown": fast},
        },
    }


def scaled_to(plane: ControlPlane, namespace: str, name: str, replicas: int) -> Obj:
    """Wait until the HPA wants `replicas` and the Deployment has them; the HPA's status then.
    The failure names the HPA's last status and conditions."""
    last: dict[str, Any] = {}

    def probe() -> Obj:  # {} (falsy) until scaled
        status: Obj = plane.get_json(
            f"/apis/autoscaling/v2/namespaces/{namespace}/horizontalpodautoscalers/{name}"
        ).get("status", {})
        spec = plane.get_json(f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}")["spec"]
        last.update(status=status, replicas=spec["replicas"])
        if status.get("desiredReplicas") == replicas and spec["replicas"] == replicas:
            return status
        return {}

    return plane.wait_until(
        probe,
        f"HPA {namespace}/{name} to scale to {replicas}",
        timeout=SCALE_DEADLINE,
        process="kube-controller-manager",
        detail=lambda: json.dumps(last),
    )


def test_an_unmodified_hpa_scales_a_deployment_on_a_definitions_external_metric(
    control_plane_with_controllers: ControlPlane, aggregated: ServerProcess
) -> None:
    plane = control_plane_with_controllers
    shop = plane.create_namespace("mdef-hpa")
    plane.apply([definition(shop, "expected", "hpa_expected_load", constant(3))])
    plane.kubectl(
        "-n", shop, "create", "deployment", "web", "--image=example.invalid/web", "--replicas=1"
    )
    plane.apply([hpa(shop, "web", external_metric("hpa_expected_load"))])
    status = scaled_to(plane, shop, "web", 3)  # ceil(3 / 1)
    (current,) = status["currentMetrics"]
    assert current["external"]["metric"]["name"] == "hpa_expected_load"
    # 3 over the replicas it had when it read it (1, then 3)
    assert current["external"]["current"]["averageValue"] in {"3", "1"}
    # The team changes its definition: the HPA follows, down to ceil(1 / 1).
    plane.apply([definition(shop, "expected", "hpa_expected_load", constant(1))])
    scaled_to(plane, shop, "web", 1)
    plane.kubectl("delete", "namespace", shop, "--wait=false")


def test_an_unmodified_hpa_scales_a_deployment_on_a_definitions_pods_metric(
    control_plane_with_controllers: ControlPlane, aggregated: ServerProcess
) -> None:
    plane = control_plane_with_controllers
    shop = plane.create_namespace("mdef-hpa-pods")
    exporter = Exporter(300)
    try:
        container = {
            "name": "main",
            "image": "example.invalid/web",
            "ports": [{"name": "metrics", "containerPort": exporter.port}],
        }
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": shop},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [container]},
                },
            },
        }
        plane.apply([deployment])
        (pod,) = plane.wait_until(
            lambda: list(plane.get_json(f"/api/v1/namespaces/{shop}/pods")["items"]),
            "the Deployment's pod",
            process="kube-controller-manager",
        )
        set_running(plane, pod)
        source = {
            "type": "Pods",
            "pods": {
                "selector": {"matchLabels": {"app": "web"}},
                "port": "metrics",
                "metric": "inflight",
            },
        }
        per_pod = definition(shop, "inflight", "hpa_inflight_per_pod", source, interval="5s")
        per_pod["spec"]["servedAs"] = {"type": "Pods"}
        plane.apply([per_pod])
        # What the HPA controller will ask, through the aggregator: the pod's value.
        url = (
            f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{shop}/pods/*/hpa_inflight_per_pod"
            "?labelSelector=app%3Dweb"
        )
        answers: list[str] = []

        def pod_values() -> list[str]:
            answer = plane.kubectl("get", "--raw", url, check=False)
            answers.append(answer.stdout + answer.stderr)
            if answer.returncode != 0:
                return []
            return [item["value"] for item in json.loads(answer.stdout)["items"]]

        found = plane.wait_until(pod_values, "the pod's value", detail=lambda: answers[-1])
        assert found == ["300"]
        metric = {
            "type": "Pods",
            "pods": {
                "metric": {"name": "hpa_inflight_per_pod"},
                "target": {"type": "AverageValue", "averageValue": "100"},
            },
        }
        plane.apply([hpa(shop, "web", metric)])
        status = scaled_to(plane, shop, "web", 3)  # ceil(1 x 300 / 100)
        (current,) = status["currentMetrics"]
        assert current["pods"]["metric"]["name"] == "hpa_inflight_per_pod"
        assert current["pods"]["current"]["averageValue"] == "300"
        assert exporter.scrapes > 0
    finally:
        exporter.close()
        plane.kubectl("delete", "namespace", shop, "--wait=false")
