"""A team's MetricDefinition on a real node: real busybox pods serve Prometheus text on
`/metrics`, our server scrapes them at their pod IPs, and the real HPA controller
(kube-controller-manager v1.36, sync every 5 s) scales their Deployment on the definition's
metric, read through the aggregator. The control-plane tier's test of the same
(tests/controlplane/test_metric_definitions_hpa.py) has no kubelet, so it sets a pod Running
itself and serves its `/metrics` from the host; here the kubelet runs the pods.

Set up as in production, with the manifests' own objects:

* the CRD from manifests/crds; the server's ClusterRole and the two aggregated roles from
  manifests/base (renamed with this module's namespace, so that a chart installed on the same
  realnode keeps its own names), the server's backends reading the cluster as a ServiceAccount
  bound to that ClusterRole only (definitions, their status, Events, EndpointSlices, pods,
  workloads); the realnode's kube-controller-manager folds the aggregated roles into `admin`
  (its clusterrole-aggregation controller: `node.UP_ENV`);
* the team: ServiceAccount `alice`, bound to `admin` in its namespace and nothing else, creates
  each definition with the real kubectl and reads back the status the server wrote;
* the pods: `httpd -f -vv` serves `/www/metrics`, a gauge `queue_depth` rewritten every second
  from the pod's annotation `load` (a downward API volume: the kubelet updates it when the
  annotation changes). The template says `load: "0"`; the test annotates the pods it starts
  with 300, so the pods the HPA adds serve 0: work already handed out stays with the pods
  that have it. `-vv` logs each request's path, which counts the scrapes of a pod;
* a decoy: a Deployment of the same name and labels in another namespace, its pods at 5000.
  Its value would change every answer below; it is never scraped (its log has no
  `url:/metrics`) and never served.

The replica counts are what the controller's replica calculator
(`pkg/controller/podautoscaler/replica_calculator.go`) gives:

* **Pods**, `averageValue` 100, two pods at 300: `ceil(2 x 300 / 100) = 6`. At 6 the four new
  pods serve 0 (or, before their first scrape, have no value, which the calculator counts as
  0 when scaling up): 600 / (6 x 100) = 1, so it stays at 6, the fixed point, and the value the
  controller records is the average, 100. With the decoy's 5000 among the answers it would be
  `ceil((600 + 5000) / 100)`, clamped to 10.
* **Object**, the Deployment's pods summed (`podValues: sum`), `averageValue` 200: the
  calculator takes `ceil(value / 200)` whatever the current count: 600 gives 3; at 3 the new
  pod adds 0, so 600 again: 3. With the decoy it would be `ceil(5600 / 200)`, clamped to 10.

The HPAs scale without stabilization; each deadline is a failure limit for a busy machine
(minutes), never a speed target.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import re
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_metrics_server.machinery.quantity import Quantity
from tests.realnode.hostserver import (
    CUSTOM_AND_EXTERNAL,
    HostServer,
    kubernetes_backend,
    register,
    start_host_server,
    stop,
    write_backends,
)
from tests.realnode.node import (
    NS_PREFIX,
    ROOT,
    RealNode,
    busybox_container,
    deployment,
    namespace,
    running_pods,
    wait_for,
    wait_ready,
)
from tests.realnode.test_hpa import SCALE_DEADLINE, custom, hpa, scaled_to

# The waits inside are bounded (generous deadlines for a busy machine): above the default
# per-test timeout of 120 s, so it is raised for this tier.
pytestmark = [pytest.mark.realnode, pytest.mark.timeout(900)]

Obj = dict[str, Any]
GROUP = "metrics.custom-metrics-server.io"
VERSION = "v1alpha1"
CRD = f"metricdefinitions.{GROUP}"
BASE = ROOT / "manifests" / "base"
#: manifests/base's ClusterRoles this test installs: the server's and the aggregated two.
ROLE_FILES = (
    "cluster-role.yaml",
    "cluster-role-metric-definitions-editor.yaml",
    "cluster-role-metric-definitions-viewer.yaml",
)
SERVER_ROLE = "custom-metrics-server"
SERVER_SA = "custom-metrics-server"
TEAM_USER = "alice"
LOAD, DECOY_LOAD = 300, 5000

#: A consumer: its gauge is its pod's annotation `load`, rewritten every second (the downward
#: API volume changes when the annotation does); httpd serves it at `/metrics`, a copy written
#: after it at `/state` (what the test reads) and `/healthz` for the readiness probe, so
#: `url:/metrics` in its log is a scrape by our server and nothing else.
CONSUMER = [
    "sh",
    "-c",
    """mkdir -p /www && echo ok > /www/healthz
while :; do
  v=$(sed -n 's/^load="\\(.*\\)"$/\\1/p' /podinfo/annotations)
  printf '# TYPE queue_depth gauge\\nqueue_depth %s\\n' "${v:-0}" > /www/.metrics
  cp /www/.metrics /www/.state
  mv /www/.metrics /www/metrics
  mv /www/.state /www/state
  sleep 1
done &
exec httpd -f -vv -p 8080 -h /www""",
]


def consumers(ns: str, name: str, replicas: int, load: int) -> Obj:
    """A Deployment of consumers (`CONSUMER`), its template's `load` annotation `load`."""
    container = busybox_container("main", CONSUMER, requests={"cpu": "5m"}, limits={"cpu": "50m"})
    container["ports"] = [{"name": "metrics", "containerPort": 8080}]
    container["readinessProbe"] = {
        "httpGet": {"path": "/healthz", "port": 8080},
        "periodSeconds": 2,
    }
    container["volumeMounts"] = [{"name": "podinfo", "mountPath": "/podinfo"}]
    found = deployment(ns, name, [container], replicas=replicas)
    template = found["spec"]["template"]
    template["metadata"]["annotations"] = {"load": str(load)}
    template["spec"]["volumes"] = [
        {
            "name": "podinfo",
            "downwardAPI": {
                "items": [
                    {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}
                ]
            },
        }
    ]
    return found


def pod_ip_value(pod: Obj) -> str:
    """The gauge line a consumer pod serves (its `/state`, written after `/metrics`), read at
    its pod IP from the host."""
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:8080/state", timeout=10) as r:
        lines = r.read().decode().splitlines()
    return str(next(line for line in lines if line.startswith("queue_depth ")))


def loaded(realnode: RealNode, ns: str, name: str, replicas: int, load: int) -> list[str]:
    """Start `replicas` consumers of `name` (template load 0) and annotate each with `load`;
    their pod names once each serves it."""
    realnode.apply(consumers(ns, name, replicas, 0))
    pods = wait_ready(realnode, ns, f"app={name}", replicas, timeout=180)
    names = sorted(p["metadata"]["name"] for p in pods)
    realnode.kubectl("annotate", "pods", "-n", ns, *names, f"load={load}", "--overwrite")

    def serving() -> bool:
        current = running_pods(realnode, ns, f"app={name}")
        return len(current) == replicas and all(
            pod_ip_value(p) == f"queue_depth {load}" for p in current
        )

    wait_for(f"{ns}/{name}'s pods to serve queue_depth {load}", serving, timeout=180)
    return names


def scrapes(realnode: RealNode, ns: str, pod: str) -> int:
    """How many times `pod`'s httpd answered `/metrics` (its `-vv` log)."""
    return realnode.kubectl("logs", "-n", ns, pod).count("url:/metrics")


# --- the platform: CRD, roles, the server ----------------------------------------------------


def manifest_roles(prefix: str, label: str) -> list[Obj]:
    """manifests/base's ClusterRoles (`ROLE_FILES`), each renamed `<prefix>:<name>` and
    labelled `realnode-tests: <label>`; rules and aggregation labels as shipped."""
    roles = []
    for file in ROLE_FILES:
        role = yaml.safe_load((BASE / file).read_text())
        assert role["kind"] == "ClusterRole", file
        role["metadata"]["name"] = f"{prefix}:{role['metadata']['name']}"
        role["metadata"].setdefault("labels", {})["realnode-tests"] = label
        roles.append(role)
    return roles


def token_kubeconfig(realnode: RealNode, path: Path, ns: str, account: str) -> Path:
    """A kubeconfig holding a token of ServiceAccount `ns/account` (`kubectl create token`)."""
    token = realnode.kubectl("create", "token", "-n", ns, account, "--duration=2h").strip()
    ca = base64.b64encode(realnode.ca.read_bytes()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "realnode",
                "cluster": {"server": realnode.apiserver, "certificate-authority-data": ca},
            }
        ],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "realnode", "context": {"cluster": "realnode", "user": account}}],
        "current-context": "realnode",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def server(realnode: RealNode, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostServer]:
    """The CRD, the manifests' roles, and our server on the host with a `metric-definitions`
    entry beside the Kubernetes backend, both reading the cluster as ServiceAccount
    `custom-metrics-server` bound to the manifests' ClusterRole; registered with the
    aggregator for this module. The CRD stays installed (a chart installed later on the same
    realnode finds it and keeps it); everything else is removed."""
    realnode.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",  # the chart's crds/ (test_image_pod.py) holds the same file
        "--field-manager=realnode-tests",
        "-k",
        str(ROOT / "manifests" / "crds"),
    )
    realnode.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{CRD}")
    workdir = tmp_path_factory.mktemp("definitions")
    with namespace(realnode, f"{NS_PREFIX}mdef") as ns:
        realnode.apply(
            *manifest_roles(ns, ns),
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": SERVER_SA, "namespace": ns},
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"{ns}:{SERVER_ROLE}", "labels": {"realnode-tests": ns}},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": f"{ns}:{SERVER_ROLE}",
                },
                "subjects": [{"kind": "ServiceAccount", "name": SERVER_SA, "namespace": ns}],
            },
        )
        kubeconfig = token_kubeconfig(realnode, workdir / "server.kubeconfig", ns, SERVER_SA)
        backends = workdir / "backends.yaml"
        kubernetes = kubernetes_backend(realnode)
        kubernetes["settings"]["kubeconfig"] = str(kubeconfig)
        definitions = {
            "name": "metric-definitions",
            "type": "metric-definitions",
            "settings": {"kubeconfig": str(kubeconfig), "limits": {"minInterval": "5s"}},
        }
        write_backends(backends, [kubernetes, definitions])
        process = start_host_server(
            realnode, workdir, "--backends-config", str(backends), namespace=ns
        )
        try:
            with register(realnode, process, ns, CUSTOM_AND_EXTERNAL):
                yield process
        finally:
            stop(process)
            with contextlib.suppress(AssertionError):
                realnode.kubectl(
                    "delete", "clusterrolebinding,clusterrole", "-l", f"realnode-tests={ns}"
                )


# --- the team ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Team:
    """A namespace and its admin, who has nothing but the `admin` role there."""

    realnode: RealNode
    ns: str
    kubeconfig: Path

    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        """The real kubectl (the realnode's) as the team's admin."""
        return subprocess.run(
            [str(self.realnode.k8s_bin / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            input=input,
            timeout=120,
            check=False,
        )

    def create(self, obj: Obj) -> None:
        result = self.kubectl("create", "-f", "-", input=json.dumps(obj))
        assert result.returncode == 0, result.stderr

    def definition(self, name: str) -> Obj:
        result = self.kubectl(
            "get", CRD, name, "-n", self.ns, "-o", "json", "--show-managed-fields"
        )
        assert result.returncode == 0, result.stderr
        found: Obj = json.loads(result.stdout)
        return found


@pytest.fixture(scope="module")
def team(
    realnode: RealNode, server: HostServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Team]:
    """Namespace `wiprn-mdef-shop` and its admin `alice` (a ServiceAccount there, bound to
    the default `admin` ClusterRole by a RoleBinding of the namespace), once `admin` carries the
    aggregated MetricDefinition rules."""
    with namespace(realnode, f"{NS_PREFIX}mdef-shop") as ns:
        realnode.apply(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": TEAM_USER, "namespace": ns},
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": f"{TEAM_USER}-admin", "namespace": ns},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "admin",
                },
                "subjects": [{"kind": "ServiceAccount", "name": TEAM_USER, "namespace": ns}],
            },
        )
        path = tmp_path_factory.mktemp("team") / "alice.kubeconfig"
        shop = Team(realnode, ns, token_kubeconfig(realnode, path, ns, TEAM_USER))

        def may(verb: str, resource: str, *flags: str) -> bool:
            answer = shop.kubectl("auth", "can-i", verb, resource, *flags, "-n", ns)
            return answer.stdout.strip() == "yes"

        try:
            wait_for(
                "`admin` to carry the aggregated MetricDefinition rules (kube-controller-manager "
                "needs clusterrole-aggregation-controller: tests/realnode/node.py UP_ENV)",
                lambda: may("create", CRD),
                timeout=120,
            )
        except AssertionError:
            admin = realnode.get("clusterrole", "admin")
            raise AssertionError(f"admin's rules: {json.dumps(admin.get('rules'))}") from None
        # Only the aggregated role: the status is the server's to write, not the team's.
        assert not may("update", CRD, "--subresource=status")
        yield shop


@pytest.fixture(scope="module")
def decoys(realnode: RealNode, server: HostServer) -> Iterator[str]:
    """Another team's namespace, where each test starts pods like its own, at 5000."""
    with namespace(realnode, f"{NS_PREFIX}mdef-other") as ns:
        yield ns


def definition(ns: str, name: str, metric: str, app: str, served_as: Obj) -> Obj:
    """A `pods` definition of `queue_depth` at the consumers' port, every 5 s."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MetricDefinition",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "metricName": metric,
            "servedAs": served_as,
            "source": {
                "type": "Pods",
                "pods": {
                    "selector": {"matchLabels": {"app": app}},
                    "port": "metrics",
                    "path": "/metrics",
                    "metric": "queue_depth",
                },
            },
            "interval": "5s",
        },
    }


def conditions(obj: Obj) -> dict[str, Obj]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions", [])}


def status_written(team: Team, name: str, value: str, count: int) -> Obj:
    """The definition once the server wrote Ready True with `lastValue` `value` over `count`
    values, as the team reads it with kubectl."""

    def probe() -> Obj:
        obj = team.definition(name)
        found = conditions(obj)
        status = obj.get("status") or {}
        if (
            found.get("Ready", {}).get("status") == "True"
            and status.get("lastValue") == value
            and status.get("valueCount") == count
        ):
            return obj
        raise AssertionError(json.dumps(status))

    return wait_for(f"{team.ns}/{name}'s status Ready with {value}", probe, timeout=180)


def settled(
    realnode: RealNode, ns: str, name: str, kind: str, average: float, replicas: int
) -> Obj:
    """The HPA's status once a sync at `replicas` read `average` a replica (`kind`: `pods` or
    `object`, the metric status's member) and still wants `replicas`."""

    def probe() -> Obj:
        state: Obj = realnode.get("hpa", name, "-n", ns)["status"]
        [current] = state.get("currentMetrics") or [None]
        value = (
            float(Quantity.parse(current[kind]["current"]["averageValue"]).value)
            if current
            else None
        )
        if (value, state.get("currentReplicas"), state.get("desiredReplicas")) == (
            average,
            replicas,
            replicas,
        ):
            return state
        raise AssertionError(json.dumps(state))

    return wait_for(
        f"HPA {ns}/{name} to read {average} at {replicas}", probe, timeout=SCALE_DEADLINE
    )


def printed(team: Team, name: str) -> dict[str, str]:
    """`kubectl get metricdefinitions NAME -o wide` as the team sees it, by column."""
    result = team.kubectl("get", "metricdefinitions", name, "-n", team.ns, "-o", "wide")
    assert result.returncode == 0, result.stderr
    header, row = result.stdout.splitlines()
    # By the header's column starts (kubectl aligns every cell under its header): a column
    # with no value (SHADOWED-BY of a serving definition) prints nothing, not a placeholder.
    starts = [match.start() for match in re.finditer(r"\S+", header)]
    ends = [*starts[1:], None]
    return {
        header[start:end].strip(): row[start:end].strip()
        for start, end in zip(starts, ends, strict=True)
    }


@pytest.fixture
def cleanup(realnode: RealNode, team: Team) -> Iterator[list[str]]:
    """Names of the team's Deployments (and HPAs, definitions) a test made, deleted after."""
    names: list[str] = []
    yield names
    for name in names:
        realnode.kubectl(
            "delete",
            f"hpa,deployment,{CRD}",
            name,
            "-n",
            team.ns,
            "--ignore-not-found",
            "--wait=false",
        )


def test_pods_form_scales_real_pods_on_their_own_metrics(
    realnode: RealNode, team: Team, decoys: str, cleanup: list[str]
) -> None:
    name, metric = "web", "queue_depth_per_pod"
    cleanup.append(name)
    [decoy] = loaded(realnode, decoys, name, 1, DECOY_LOAD)
    mine = loaded(realnode, team.ns, name, 2, LOAD)
    team.create(definition(team.ns, name, metric, name, {"type": "Pods"}))

    path = f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{team.ns}/pods/*/{metric}?labelSelector=app%3D{name}"

    def answer() -> set[tuple[str, str]]:
        return {(i["describedObject"]["name"], i["value"]) for i in custom(realnode, path)["items"]}

    wait_for(
        "the two pods' values through the aggregator",
        lambda: answer() == {(pod, str(LOAD)) for pod in mine} or None,
        timeout=SCALE_DEADLINE,
    )
    # The status the server wrote, read by the team: Ready, the pods' average, two values.
    obj = status_written(team, name, str(LOAD), 2)
    found = conditions(obj)
    assert found["Valid"]["status"] == "True", obj["status"]
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
    assert obj["status"]["route"] == {"api": "custom", "resource": "pods"}
    # Written by the server, through the status subresource (its user agent is the manager).
    writers = {
        m["manager"] for m in obj["metadata"]["managedFields"] if m.get("subresource") == "status"
    }
    assert writers == {"custom-metrics-server"}, obj["metadata"]["managedFields"]
    columns = printed(team, name)
    assert (columns["READY"], columns["VALUE"], columns["SOURCE"]) == ("True", str(LOAD), "Pods")

    realnode.apply(
        hpa(
            team.ns,
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
    target = math.ceil(2 * LOAD / 100)  # 6
    scaled_to(realnode, team.ns, name, target)

    # At 6 the new pods serve 0: the controller reads the average 600 / 6 and stays.
    settled(realnode, team.ns, name, "pods", 2 * LOAD / target, target)
    pods = {p["metadata"]["name"] for p in running_pods(realnode, team.ns, f"app={name}")}
    served = answer()
    assert {pod for pod, _ in served} <= pods, served
    assert sorted(value for _, value in served if value != "0") == [str(LOAD)] * 2, served
    # The decoy's pod was never scraped; ours were.
    assert scrapes(realnode, decoys, decoy) == 0
    assert all(scrapes(realnode, team.ns, pod) > 0 for pod in mine)


def test_object_form_sums_the_deployments_pods(
    realnode: RealNode, team: Team, decoys: str, cleanup: list[str]
) -> None:
    name, metric = "worker", "queue_depth_sum"
    cleanup.append(name)
    [decoy] = loaded(realnode, decoys, name, 1, DECOY_LOAD)
    loaded(realnode, team.ns, name, 2, LOAD)
    described = {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
    served_as = {"type": "Object", "describedObject": described, "podValues": "sum"}
    team.create(definition(team.ns, name, metric, name, served_as))
    path = (
        f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{team.ns}/deployments.apps/{name}/{metric}"
    )
    total = str(2 * LOAD)
    wait_for(
        f"the Deployment's sum {total} through the aggregator",
        lambda: [i["value"] for i in custom(realnode, path)["items"]] == [total] or None,
        timeout=SCALE_DEADLINE,
    )
    obj = status_written(team, name, total, 2)
    assert obj["status"]["route"] == {"api": "custom", "resource": "deployments.apps"}

    realnode.apply(
        hpa(
            team.ns,
            name,
            [
                {
                    "type": "Object",
                    "object": {
                        "describedObject": described,
                        "metric": {"name": metric},
                        "target": {"type": "AverageValue", "averageValue": "200"},
                    },
                }
            ],
            minimum=1,
            maximum=10,
        )
    )
    target = math.ceil(2 * LOAD / 200)  # 3
    scaled_to(realnode, team.ns, name, target)
    # At 3 the new pod adds 0: the controller reads 600, 200 a replica, and stays.
    settled(realnode, team.ns, name, "object", 2 * LOAD / target, target)
    assert [i["value"] for i in custom(realnode, path)["items"]] == [total]
    assert scrapes(realnode, decoys, decoy) == 0
