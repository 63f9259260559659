"""The real HPA controller (kube-controller-manager v1.36, sync every 5 s, HPAScaleToZero on)
scaling real Deployments on metrics our registered server answers through the aggregator.

Each expected replica count is what the controller's replica calculator
(`pkg/controller/podautoscaler/replica_calculator.go`) gives for the values served:

* Resource cpu, `averageUtilization` 50 over pods requesting 10m and burning up to 100m: the
  utilization our `metrics.k8s.io` reports is far above the target, so
  `min(maxReplicas, ceil(replicas x utilization / 50))` is `maxReplicas` (3) at every step;
  the status the controller writes must carry the utilization that justifies it.
* Pods metric, `averageValue` 100, two pods with 300 each: `ceil(3 x 2) = 6`; at 6 the four
  new pods have no value, which the calculator counts as 0 when scaling up, so the ratio is
  600 / (6 x 100) = 1 and it stays at 6 (the sum over the target, the formula's fixed point).
* Object metric, `averageValue` 2 on the Deployment: `ceil(value / 2)` whatever the current
  count: 8 gives 4, 0 gives 0 (minReplicas 0: scale to zero), 6 gives 3 (back from zero,
  where the ratio is value / (2 x 0) and the calculator takes `ceil(value / 2)`).
* External metric, `averageValue` 1 with a label selector: `ceil(value / 1)`: 3, then 1.

The HPAs scale without stabilization and with policies that allow any step each second, so
each count is reached at the next sync or two; the deadlines are failure limits for a busy
machine, not speed targets.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest

from custom_metrics_server.machinery.quantity import Quantity
from tests.realnode.conftest import MetricsServer
from tests.realnode.node import (
    NS_PREFIX,
    SLEEP,
    SPIN,
    RealNode,
    busybox_container,
    deployment,
    namespace,
    running_pods,
    wait_for,
    wait_ready,
)

# The waits inside are bounded (generous deadlines for a busy machine): above the default
# per-test timeout of 120 s, so it is raised for this tier.
pytestmark = [pytest.mark.realnode, pytest.mark.timeout(900)]

#: A replica count may take a few syncs (5 s) plus pod starts on a busy machine.
SCALE_DEADLINE = 180.0


@pytest.fixture(scope="module")
def ns(realnode: RealNode) -> Iterator[str]:
    with namespace(realnode, f"{NS_PREFIX}hpa") as name:
        yield name


def hpa(
    ns: str, name: str, metrics: list[dict[str, Any]], *, minimum: int, maximum: int
) -> dict[str, Any]:
    """An autoscaling/v2 HPA on Deployment `name` that scales at once both ways."""
    fast = {
        "stabilizationWindowSeconds": 0,
        "policies": [{"type": "Pods", "value": 10, "periodSeconds": 1}],
    }
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": minimum,
            "maxReplicas": maximum,
            "metrics": metrics,
            "behavior": {"scaleUp": fast, "scaleDown": fast},
        },
    }


def sleeper(ns: str, name: str, replicas: int) -> dict[str, Any]:
    return deployment(
        ns,
        name,
        [busybox_container("main", SLEEP, requests={"cpu": "5m"}, limits={"cpu": "50m"})],
        replicas=replicas,
    )


def status(realnode: RealNode, ns: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = realnode.get("hpa", name, "-n", ns).get("status", {})
    return found


def scaled_to(realnode: RealNode, ns: str, name: str, replicas: int) -> dict[str, Any]:
    """Wait until the HPA wants `replicas`, the Deployment has them and they run; returns the
    HPA's status then. The failure message carries the HPA's last status and conditions."""

    def probe() -> dict[str, Any]:
        state = status(realnode, ns, name)
        spec = realnode.get("deployment", name, "-n", ns)["spec"]["replicas"]
        pods = len(running_pods(realnode, ns, f"app={name}"))
        if state.get("desiredReplicas") == replicas and spec == replicas and pods == replicas:
            return state
        conditions = [
            (c["type"], c["status"], c.get("message", "")) for c in state.get("conditions", ())
        ]
        raise AssertionError(
            f"want {replicas}: HPA desired {state.get('desiredReplicas')}, Deployment "
            f"{spec}, running {pods}, metrics {json.dumps(state.get('currentMetrics'))}, "
            f"conditions {conditions}"
        )

    return wait_for(f"HPA {ns}/{name} to scale to {replicas}", probe, timeout=SCALE_DEADLINE)


def custom(realnode: RealNode, path: str) -> Any:
    """A custom/external metrics answer through the aggregator."""
    return json.loads(realnode.raw(path))


@pytest.fixture
def cleanup(realnode: RealNode, ns: str) -> Iterator[list[str]]:
    """Names of Deployments (and their HPAs) a test created, deleted after it."""
    names: list[str] = []
    yield names
    for name in names:
        realnode.kubectl(
            "delete", "hpa,deployment", name, "-n", ns, "--ignore-not-found", "--wait=false"
        )


def test_resource_cpu_scales_a_cpu_burner_to_what_the_formula_gives(
    realnode: RealNode, metrics_server: MetricsServer, ns: str, cleanup: list[str]
) -> None:
    name, target, maximum = "burn", 50, 3
    cleanup.append(name)
    realnode.apply(
        deployment(
            ns,
            name,
            [busybox_container("spin", SPIN, requests={"cpu": "10m"}, limits={"cpu": "100m"})],
        )
    )
    wait_ready(realnode, ns, f"app={name}", 1)
    realnode.apply(
        hpa(
            ns,
            name,
            [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": target},
                    },
                }
            ],
            minimum=1,
            maximum=maximum,
        )
    )
    final = scaled_to(realnode, ns, name, maximum)
    [metric] = final["currentMetrics"]
    utilization = metric["resource"]["current"]["averageUtilization"]
    # The formula at the count it settled on: at least maxReplicas, clamped to it.
    assert math.ceil(maximum * utilization / target) >= maximum, final
    # What the controller read is what our metrics.k8s.io serves: the burners' usage over
    # their 10m requests (a loop capped at 100m is far above 50% of 10m).
    pods = custom(
        realnode, f"/apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods?labelSelector=app%3D{name}"
    )
    used = sum(
        Quantity.parse(c["usage"]["cpu"]).value for p in pods["items"] for c in p["containers"]
    )
    request = Quantity.parse("10m").value
    assert pods["items"], pods
    assert 100 * used / (request * len(pods["items"])) > target, pods


def test_pods_metric_scales_to_the_sum_over_the_target(
    realnode: RealNode, metrics_server: MetricsServer, ns: str, cleanup: list[str]
) -> None:
    name, metric = "web", "rn_requests_per_second"
    cleanup.append(name)
    realnode.apply(sleeper(ns, name, 2))
    pods = [p["metadata"]["name"] for p in wait_ready(realnode, ns, f"app={name}", 2)]
    metrics_server.serve_values(
        name,
        values=[
            {"resource": "pods", "namespace": ns, "name": pod, "metric": metric, "value": 300}
            for pod in pods
        ],
    )
    path = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{ns}/pods/*/{metric}?labelSelector=app%3D{name}"
    wait_for(
        "our server to serve the two pods' values",
        lambda: (
            {(i["describedObject"]["name"], i["value"]) for i in custom(realnode, path)["items"]}
            == {(pod, "300") for pod in pods}
        ),
        timeout=60,
    )
    realnode.apply(
        hpa(
            ns,
            name,
            [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": metric},
                        "target": {"type": "AverageValue", "averageValue": "100"},
                    },
                }
            ],
            minimum=1,
            maximum=10,
        )
    )
    final = scaled_to(realnode, ns, name, 6)
    # The controller saw the two values (average 300) through the aggregator.
    [current] = final["currentMetrics"]
    assert Quantity.parse(current["pods"]["current"]["averageValue"]).value == 300, final
    metrics_server.serve_values(name)


def apply_scaling_to_zero(realnode: RealNode, autoscaler: dict[str, Any]) -> None:
    """Apply an HPA with minReplicas 0, which the API server takes only with HPAScaleToZero
    on; without it, a failure that says how to bring the realnode up."""
    try:
        realnode.apply(autoscaler)
    except AssertionError as error:
        if "minReplicas" in str(error):
            raise AssertionError(
                "the realnode's API server refuses minReplicas 0: bring it up with "
                "REALKUBE_APISERVER_ARGS=--feature-gates=HPAScaleToZero=true and "
                f"REALKUBE_KCM_ARGS=--feature-gates=HPAScaleToZero=true (node.UP_ENV): {error}"
            ) from error
        raise


def test_object_metric_scales_to_zero_and_back(
    realnode: RealNode, metrics_server: MetricsServer, ns: str, cleanup: list[str]
) -> None:
    name, metric = "queue", "rn_backlog"
    cleanup.append(name)
    realnode.apply(sleeper(ns, name, 1))
    wait_ready(realnode, ns, f"app={name}", 1)
    path = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{ns}/deployments.apps/{name}/{metric}"

    def serve(value: int) -> None:
        metrics_server.serve_values(
            name,
            values=[
                {
                    "resource": "deployments.apps",
                    "namespace": ns,
                    "name": name,
                    "metric": metric,
                    "value": value,
                }
            ],
        )
        wait_for(
            f"our server to answer {value}",
            lambda: [i["value"] for i in custom(realnode, path)["items"]] == [str(value)],
            timeout=60,
        )

    serve(8)
    apply_scaling_to_zero(
        realnode,
        hpa(
            ns,
            name,
            [
                {
                    "type": "Object",
                    "object": {
                        "describedObject": {
                            "apiVersion": "apps/v1",
                            "kind": "Deployment",
                            "name": name,
                        },
                        "metric": {"name": metric},
                        "target": {"type": "AverageValue", "averageValue": "2"},
                    },
                }
            ],
            minimum=0,
            maximum=6,
        ),
    )
    scaled_to(realnode, ns, name, 4)
    serve(0)
    scaled_to(realnode, ns, name, 0)

    # At zero the controller keeps reading the metric (HPAScaleToZero): a later sync
    # records the zero it scaled to, still wanting zero.
    def synced_at_zero() -> bool:
        state = status(realnode, ns, name)
        return state.get("currentReplicas", 0) == 0 and state.get("desiredReplicas") == 0

    wait_for("the HPA to sync at zero replicas", synced_at_zero, timeout=SCALE_DEADLINE)
    serve(6)
    scaled_to(realnode, ns, name, 3)
    metrics_server.serve_values(name)


def test_external_metric_scales_to_the_value_over_the_target(
    realnode: RealNode, metrics_server: MetricsServer, ns: str, cleanup: list[str]
) -> None:
    name, metric = "worker", "rn_jobs_waiting"
    cleanup.append(name)
    realnode.apply(sleeper(ns, name, 1))
    wait_ready(realnode, ns, f"app={name}", 1)
    path = (
        f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/{metric}?labelSelector=queue%3Djobs"
    )

    def serve(value: int) -> None:
        # A second series with another label: the selector must leave it out.
        metrics_server.serve_values(
            name,
            external=[
                {"metric": metric, "value": value, "labels": {"queue": "jobs"}, "namespace": ns},
                {"metric": metric, "value": 40, "labels": {"queue": "other"}, "namespace": ns},
            ],
        )
        wait_for(
            f"our server to answer {value}",
            lambda: [i["value"] for i in custom(realnode, path)["items"]] == [str(value)],
            timeout=60,
        )

    serve(3)
    realnode.apply(
        hpa(
            ns,
            name,
            [
                {
                    "type": "External",
                    "external": {
                        "metric": {"name": metric, "selector": {"matchLabels": {"queue": "jobs"}}},
                        "target": {"type": "AverageValue", "averageValue": "1"},
                    },
                }
            ],
            minimum=1,
            maximum=5,
        )
    )
    scaled_to(realnode, ns, name, 3)
    serve(1)
    scaled_to(realnode, ns, name, 1)
    metrics_server.serve_values(name)
