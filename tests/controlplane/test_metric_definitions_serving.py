"""MetricDefinitions served by the real server process, watching a real kube-apiserver
(docs/metric-definitions.md, "What is served"): a schedule definition's External metric is
served with its value as soon as it is created and is gone (404) as soon as it is deleted; of
two definitions of one metric name the older serves; a `pods` definition in namespace `a`
never selects, scrapes or serves a pod of namespace `b`, whatever its selector says; five
`pods` definitions of one namespace cost one list and one watch of its pods (the audit log's
requests), also across an edit of one of them.

The pods are real API objects whose status a test sets as a kubelet would (no kubelet runs),
Running at 127.0.0.1 with a container port of a local exporter per namespace; each exporter
counts the scrapes it answered, so "never scraped" is a count of zero, not an absence.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import yaml

from custom_metrics_server.testing.server_process import ServerProcess, start_server, stop_server
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.test_metric_definitions import CRD_DIR, CRD_NAME, GROUP, VERSION

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1/namespaces"


class Exporter:
    """A pod's `/metrics` on loopback: one gauge, and how many scrapes it answered."""

    def __init__(self, value: float) -> None:
        self.scrapes = 0
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                exporter.scrapes += 1
                body = f"# TYPE inflight gauge\ninflight {value}\n".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return None

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.http.server_address[1]
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture(scope="module")
def server(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """The CRD installed, and the server running the `metric-definitions` backend against the
    control plane (demo serving: loopback, no delegated authentication)."""
    control_plane.kubectl("apply", "--server-side", "--field-manager=cms-tests", "-k", str(CRD_DIR))
    control_plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{CRD_NAME}")
    workdir = tmp_path_factory.mktemp("definitions")
    backends = workdir / "backends.yaml"
    backends.write_text(
        yaml.safe_dump(
            {
                "backends": [
                    {
                        # The cluster view (pods, workloads) the Pods and Object forms need.
                        "name": "kubernetes",
                        "type": "kubernetes",
                        "settings": {"kubeconfig": str(control_plane.admin_kubeconfig)},
                    },
                    {
                        "name": "metric-definitions",
                        "type": "metric-definitions",
                        "settings": {
                            "kubeconfig": str(control_plane.admin_kubeconfig),
                            "limits": {"minInterval": "5s"},
                        },
                    },
                ]
            }
        )
    )
    process = start_server(workdir, "--backends-config", str(backends), timeout=60)
    yield process
    stop_server(process)


def definition(namespace: str, name: str, metric: str, source: Obj, **extra: Any) -> Obj:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MetricDefinition",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"metricName": metric, "servedAs": {"type": "External"}, "source": source, **extra},
    }


def constant(value: float) -> Obj:
    """A schedule whose one window is the whole day, every day."""
    window = {"start": "00:00", "end": "24:00", "value": value}
    return {"type": "Schedule", "schedule": {"timeZone": "Asia/Tokyo", "windows": [window]}}


def external(server: ServerProcess, namespace: str, metric: str) -> httpx.Response:
    with server.client() as client:
        return client.get(f"{EXTERNAL}/{namespace}/{metric}")


def values(response: httpx.Response) -> list[str]:
    return [item["value"] for item in response.json()["items"]]


def served(server: ServerProcess, plane: ControlPlane, namespace: str, metric: str) -> list[str]:
    """The metric's values once it is served (the watch delivers the definition first)."""

    def found() -> list[str]:  # no items (falsy) until the definition is served
        response = external(server, namespace, metric)
        return values(response) if response.status_code == 200 else []

    return plane.wait_until(found, f"{namespace}/{metric} served", process=None)


def delete(plane: ControlPlane, namespace: str, name: str) -> None:
    plane.kubectl("delete", "-n", namespace, f"metricdefinitions.{GROUP}", name, "--wait=true")


def logged(plane: ControlPlane, server: ServerProcess, line: str) -> None:
    """Wait until the server has logged `line` (it logs each definition event it handles)."""
    plane.wait_until(lambda: line in server.logs(), f"the server logging {line!r}")


def test_a_schedule_is_served_on_creation_and_gone_at_once_on_deletion(
    control_plane: ControlPlane, server: ServerProcess
) -> None:
    shop = control_plane.create_namespace("mdef-shop")
    control_plane.apply([definition(shop, "office-hours", "serving_expected_load", constant(7))])
    assert served(server, control_plane, shop, "serving_expected_load") == ["7"]
    # The same metric name in another namespace is not this definition's: no series there
    # (an external metric without series is a 200 with no items, the reference adapter's
    # answer, which the HPA reads as "no metrics returned").
    other = control_plane.create_namespace("mdef-other")
    assert values(external(server, other, "serving_expected_load")) == []
    delete(control_plane, shop, "office-hours")
    # Once the server has handled the watch's DELETED event, the very next request has no
    # value: no interval or cache stands between the two.
    logged(control_plane, server, f"metric definition {shop}/office-hours deleted")
    assert values(external(server, shop, "serving_expected_load")) == []
    # And once the router has re-read the listings (every second), the name is unknown.
    control_plane.wait_until(
        lambda: "serving_expected_load" not in listed(server),
        "serving_expected_load out of discovery",
    )


def listed(server: ServerProcess) -> list[str]:
    """The external metric names the server's discovery lists."""
    with server.client() as client:
        document = client.get("/apis/external.metrics.k8s.io/v1beta1").json()
    return [resource["name"] for resource in document["resources"]]


def test_of_two_definitions_of_one_name_the_older_serves(
    control_plane: ControlPlane, server: ServerProcess
) -> None:
    team = control_plane.create_namespace("mdef-two")
    control_plane.apply([definition(team, "first", "queue_depth", constant(1))])
    assert served(server, control_plane, team, "queue_depth") == ["1"]
    control_plane.apply([definition(team, "second", "queue_depth", constant(2))])
    logged(control_plane, server, f"metric definition {team}/second shadowed")
    assert values(external(server, team, "queue_depth")) == ["1"]
    # `?explain=1` says which serves, and why the other does not.
    with server.client() as client:
        explained = client.get(f"{EXTERNAL}/{team}/queue_depth", params={"explain": "1"}).json()
    query = explained["backend"]["query"]
    assert query["servedBy"] == "first"
    assert [(d["name"], d["reason"], d["shadowedBy"]) for d in query["definitions"]] == [
        ("first", "Serving", None),
        ("second", "Shadowed", f"MetricDefinition {team}/first"),
    ]
    # The older one deleted, the newer serves, with no restart.
    delete(control_plane, team, "first")
    logged(control_plane, server, f"metric definition {team}/first deleted")
    assert values(external(server, team, "queue_depth")) == ["2"]


def running_pod(namespace: str, name: str, labels: dict[str, str], port: int) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "example.invalid/app",
                    "ports": [{"name": "metrics", "containerPort": port}],
                }
            ]
        },
    }


def set_running(plane: ControlPlane, pod: Obj) -> None:
    status = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"]},
        "status": {"phase": "Running", "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]},
    }
    plane.kubectl(
        "apply",
        "--server-side",
        "--subresource=status",
        "--force-conflicts",
        "--field-manager=cms-tests-kubelet",
        "-f",
        "-",
        input=yaml.safe_dump(status),
    )


@pytest.fixture
def exporters() -> Iterator[tuple[Exporter, Exporter]]:
    mine, theirs = Exporter(3), Exporter(1000)
    yield mine, theirs
    mine.close()
    theirs.close()


def test_a_pods_definition_never_reaches_another_namespaces_pods(
    control_plane: ControlPlane, server: ServerProcess, exporters: tuple[Exporter, Exporter]
) -> None:
    mine, theirs = exporters
    a = control_plane.create_namespace("mdef-a")
    b = control_plane.create_namespace("mdef-b")
    labels = {"app": "web"}
    pods = [
        running_pod(a, "web-a", labels, mine.port),
        running_pod(b, "web-b", labels, theirs.port),
    ]
    control_plane.apply(pods)
    for pod in pods:
        set_running(control_plane, pod)
    # Selectors that b's pod matches as well as a's: its labels, any value of them, no
    # selector at all, and a namespace label that a pod could carry.
    selectors: list[Obj] = [
        {"matchLabels": labels},
        {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
        {},
        {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [b]}
            ]
        },
    ]
    for index, selector in enumerate(selectors):
        source = {
            "type": "Pods",
            "pods": {"selector": selector, "port": "metrics", "metric": "inflight"},
        }
        control_plane.apply(
            [definition(a, f"crafted-{index}", f"inflight_{index}", source, interval="5s")]
        )
    # The first three select a's pod, which answers 3: b's (1000) would show in the sum.
    for index in range(3):
        assert served(server, control_plane, a, f"inflight_{index}") == ["3"]
    # The fourth selects no pod of a: served with no value, never b's.
    logged(control_plane, server, f"metric definition {a}/crafted-3 serves")
    assert values(external(server, a, "inflight_3")) == []
    assert mine.scrapes > 0
    assert theirs.scrapes == 0
    # Nothing of namespace a's definitions answers in namespace b.
    for index in range(4):
        assert values(external(server, b, f"inflight_{index}")) == []
    # The same pods as a Pods metric: a's pod has its value; b's pod, asked by name in b,
    # has none (404), and the listing of b's pods is empty.
    source = {"type": "Pods", "pods": {"selector": {}, "port": "metrics", "metric": "inflight"}}
    per_pod = definition(a, "per-pod", "inflight_per_pod", source, interval="5s")
    per_pod["spec"]["servedAs"] = {"type": "Pods"}
    control_plane.apply([per_pod])

    def pod_value() -> list[str] | None:
        response = custom(server, f"namespaces/{a}/pods/web-a/inflight_per_pod")
        return values(response) if response.status_code == 200 else None

    assert control_plane.wait_until(pod_value, "web-a's value") == ["3"]
    assert custom(server, f"namespaces/{b}/pods/web-b/inflight_per_pod").status_code == 404
    assert values(custom(server, f"namespaces/{b}/pods/*/inflight_per_pod")) == []
    assert theirs.scrapes == 0


def custom(server: ServerProcess, path: str) -> httpx.Response:
    with server.client() as client:
        return client.get(f"/apis/custom.metrics.k8s.io/v1beta2/{path}")


def test_an_object_metric_averages_its_workloads_pods_only(
    control_plane: ControlPlane, server: ServerProcess, exporters: tuple[Exporter, Exporter]
) -> None:
    three, outsider = exporters
    five = Exporter(5)
    try:
        team = control_plane.create_namespace("mdef-obj")
        owner = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "web-rs",
            "uid": "00000000-0000-0000-0000-000000000001",
            "controller": True,
        }
        labels = {"app": "web"}
        pods = [
            running_pod(team, "web-1", labels, three.port),
            running_pod(team, "web-2", labels, five.port),
            running_pod(team, "stray", labels, outsider.port),  # selected, but not web-rs's
        ]
        for pod in pods[:2]:
            pod["metadata"]["ownerReferences"] = [owner]
        control_plane.apply(pods)
        for pod in pods:
            set_running(control_plane, pod)
        source = {
            "type": "Pods",
            "pods": {"selector": {"matchLabels": labels}, "port": "metrics", "metric": "inflight"},
        }
        made = definition(team, "rs-average", "inflight_rs", source, interval="5s")
        made["spec"]["servedAs"] = {
            "type": "Object",
            "describedObject": {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs"},
            "podValues": "average",
        }
        control_plane.apply([made])

        def workload_value() -> list[str] | None:
            response = custom(server, f"namespaces/{team}/replicasets.apps/web-rs/inflight_rs")
            found = values(response) if response.status_code == 200 else None
            # Both pods scraped: until then the average is of the one answered so far.
            return found if found == ["4"] else None

        assert control_plane.wait_until(workload_value, "web-rs's average") == ["4"]
        assert outsider.scrapes > 0  # it was selected and scraped, and left out of web-rs's
    finally:
        five.close()


def requests_of(plane: ControlPlane, verb: str, resource: str, namespace: str) -> int:
    """Distinct requests of `verb` on `resource` in `namespace`, from the audit log (a watch
    is logged when it starts and when it ends: one audit ID)."""
    return len(
        {
            event["auditID"]
            for event in plane.audit_events()
            if event.get("verb") == verb
            and (event.get("objectRef") or {}).get("resource") == resource
            and (event.get("objectRef") or {}).get("namespace") == namespace
        }
    )


def test_five_pods_definitions_of_a_namespace_share_one_list_and_watch_of_its_pods(
    control_plane: ControlPlane, server: ServerProcess, exporters: tuple[Exporter, Exporter]
) -> None:
    mine, _ = exporters
    team = control_plane.create_namespace("mdef-shared")
    pod = running_pod(team, "web-1", {"app": "web", "tier": "front"}, mine.port)
    control_plane.apply([pod])
    set_running(control_plane, pod)
    selectors: list[Obj] = [
        {"matchLabels": {"app": "web"}},
        {"matchLabels": {"tier": "front"}},
        {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]},
        {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
        {},
    ]

    def made(index: int, interval: str = "5s") -> Obj:
        source = {
            "type": "Pods",
            "pods": {"selector": selectors[index], "port": "metrics", "metric": "inflight"},
        }
        return definition(team, f"d{index}", f"shared_{index}", source, interval=interval)

    control_plane.apply([made(index) for index in range(5)])
    for index in range(5):
        assert served(server, control_plane, team, f"shared_{index}") == ["3"]
    # Five definitions, five selectors: one list and one watch of the namespace's pods.
    assert requests_of(control_plane, "list", "pods", team) == 1
    assert requests_of(control_plane, "watch", "pods", team) == 1
    # An edit replaces d0's source; its successor takes the watch over within the grace
    # period: served again, with no second list or watch.
    line = f"metric definition {team}/d0 serves"
    control_plane.apply([made(0, interval="6s")])
    control_plane.wait_until(lambda: server.logs().count(line) >= 2, "d0's new source")
    assert served(server, control_plane, team, "shared_0") == ["3"]
    assert requests_of(control_plane, "list", "pods", team) == 1
    assert requests_of(control_plane, "watch", "pods", team) == 1
