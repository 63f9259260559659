"""The `pod-metrics` type end to end: the real server process (TLS, the backends file, routing,
the wire encoders) beside a `kubernetes` entry that provides the cluster view, both against the
fake API server; the pods' `/metrics` are real HTTP endpoints whose counters move between
scrapes. Asked as `kubectl get --raw` asks: Pods metrics (named, wildcard with labelSelector,
metricLabelSelector), Object metrics of the Deployment and the StatefulSet that own the pods,
discovery, and every URL form of the conformance kit; the rates are exact (the bodies stamp
their samples 10 s apart, so the scrape times do not matter).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from custom_metrics_server.testing.server_process import ServerProcess
from custom_metrics_server.testing.serving import CustomQuery, query_every_form, serve_backends
from tests.fakes.cluster_process import write_kubeconfig
from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.pod_endpoints import PodEndpoints

pytestmark = pytest.mark.integration

NS = "shop"
T0_MS = 1_700_000_000_000
V1BETA2 = "/apis/custom.metrics.k8s.io/v1beta2"
V1BETA1 = "/apis/custom.metrics.k8s.io/v1beta1"
#: requests per second of code 200 per pod (code 500 adds 1/s to each); `solo-0` (no owner)
#: is the one whose counter a test speeds up
RATES = {"web-7d4b9-a": 5, "web-7d4b9-b": 7, "db-0": 2, "solo-0": 5}
APPS = {"web-7d4b9-a": "web", "web-7d4b9-b": "web", "db-0": "db", "solo-0": "solo"}


def body(rate: int) -> Callable[[int], bytes]:
    def render(scrape: int) -> bytes:
        stamp = T0_MS + scrape * 10_000
        return (
            "# TYPE http_requests_total counter\n"
            f'http_requests_total{{code="200"}} {scrape * 10 * rate} {stamp}\n'
            f'http_requests_total{{code="500"}} {scrape * 10} {stamp}\n'
            "# TYPE queue_depth gauge\n"
            f"queue_depth {rate * 2}\n"
            "# TYPE go_goroutines gauge\ngo_goroutines 12\n"
        ).encode()

    return render


def owned(kind: str, name: str) -> list[dict[str, Any]]:
    group = "batch/v1" if kind == "Job" else "apps/v1"
    return [{"apiVersion": group, "kind": kind, "name": name, "controller": True}]


def pod(name: str, port: int, owner: list[dict[str, Any]], app: str) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"app": app},
            "ownerReferences": owner,
        },
        "spec": {
            "nodeName": "node-a",
            "containers": [{"name": "app", "ports": [{"name": "metrics", "containerPort": port}]}],
        },
        "status": {"phase": "Running", "podIP": "127.0.0.1"},
    }


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[FakeKubeApiServer, PodEndpoints]]:
    with FakeKubeApiServer() as api, PodEndpoints() as endpoints:
        api.apply("namespaces", {"metadata": {"name": NS}})
        api.apply(
            "deployments.apps",
            {"metadata": {"name": "web", "namespace": NS, "labels": {"app": "web"}}},
        )
        api.apply(
            "replicasets.apps",
            {
                "metadata": {
                    "name": "web-7d4b9",
                    "namespace": NS,
                    "ownerReferences": owned("Deployment", "web"),
                }
            },
        )
        api.apply(
            "statefulsets.apps",
            {"metadata": {"name": "db", "namespace": NS, "labels": {"app": "db"}}},
        )
        owners = {
            "web": owned("ReplicaSet", "web-7d4b9"),
            "db": owned("StatefulSet", "db"),
            "solo": [],
        }
        for name, rate in RATES.items():
            port = endpoints.add(f"{NS}/{name}", body(rate))
            api.apply("pods", pod(name, port, owners[APPS[name]], APPS[name]))
        yield api, endpoints


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory,
    cluster: tuple[FakeKubeApiServer, PodEndpoints],
) -> Iterator[ServerProcess]:
    api, _ = cluster
    workdir: Path = tmp_path_factory.mktemp("pod-metrics")
    write_kubeconfig(workdir / "kubeconfig", api.url)
    entries = [
        {"name": "kubernetes", "type": "kubernetes", "settings": {"kubeconfig": "kubeconfig"}},
        {
            "name": "app",
            "type": "pod-metrics",
            "settings": {
                "kubeconfig": "kubeconfig",
                "interval": "500ms",
                "metrics": ["http_requests_total", "queue_depth"],
                "scrape": [
                    {
                        "name": "web",
                        "namespaces": [NS],
                        "selector": "app in (web,db,solo)",
                        "port": "metrics",
                    }
                ],
            },
        },
    ]
    with serve_backends(workdir, entries, timeout=60) as running:
        yield running


def values(client: httpx.Client, path: str) -> dict[str, str] | int:
    response = client.get(path)
    if response.status_code != 200:
        return response.status_code
    return {i["describedObject"]["name"]: i["value"] for i in response.json()["items"]}


def until(read: Callable[[], object], expected: object, within: float = 20.0) -> object:
    deadline = time.monotonic() + within
    while True:
        found = read()
        if found == expected or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_pods_metrics_are_the_rates_of_the_pods_own_counters(server: ServerProcess) -> None:
    pods = f"{V1BETA2}/namespaces/{NS}/pods"
    with server.client() as client:
        expected = {"web-7d4b9-a": "6", "web-7d4b9-b": "8"}
        found = until(
            lambda: values(client, f"{pods}/*/http_requests_total?labelSelector=app%3Dweb"),
            expected,
        )
        assert found == expected
        # Named, in v1beta1 too; one series chosen by metricLabelSelector.
        assert values(client, f"{pods}/db-0/http_requests_total") == {"db-0": "3"}
        assert values(
            client,
            f"{V1BETA1}/namespaces/{NS}/pods/web-7d4b9-a/http_requests_total?metricLabelSelector=code%3D200",
        ) == {"web-7d4b9-a": "5"}
        response = client.get(f"{pods}/web-7d4b9-b/http_requests_total")
        (item,) = response.json()["items"]
        assert item["windowSeconds"] == 10
        assert item["timestamp"].startswith("2023-11-14T22:")  # the samples' own stamps
        # A gauge as it is.
        assert values(client, f"{pods}/*/queue_depth?labelSelector=app%21%3Dsolo") == {
            "db-0": "4",
            "web-7d4b9-a": "10",
            "web-7d4b9-b": "14",
        }
        # Absence: a metric the pods export but the settings do not keep, a pod not scraped.
        assert values(client, f"{pods}/web-7d4b9-a/go_goroutines") == 404
        assert values(client, f"{pods}/nope/http_requests_total") == 404


def test_object_metrics_sum_the_pods_of_their_workloads(server: ServerProcess) -> None:
    with server.client() as client:
        deployment = f"{V1BETA2}/namespaces/{NS}/deployments.apps/web/http_requests_total"
        assert until(lambda: values(client, deployment), {"web": "14"}) == {"web": "14"}
        assert values(client, f"{V1BETA2}/namespaces/{NS}/deployments.apps/*/queue_depth") == {
            "web": "24"
        }
        assert values(
            client, f"{V1BETA2}/namespaces/{NS}/statefulsets.apps/db/http_requests_total"
        ) == {"db": "3"}
        assert values(
            client,
            f"{V1BETA1}/namespaces/{NS}/replicasets.apps/web-7d4b9/http_requests_total"
            "?metricLabelSelector=code%3D500",
        ) == {"web-7d4b9": "2"}
        discovery = client.get(V1BETA2).json()
        names = {resource["name"] for resource in discovery["resources"]}
        assert {
            "pods/http_requests_total",
            "deployments.apps/http_requests_total",
            "statefulsets.apps/queue_depth",
            "pods/kube_pod_resource_request",  # the kubernetes entry's, beside ours
        } <= names
        assert "pods/go_goroutines" not in names


def test_counters_moving_faster_show_the_new_rate(
    server: ServerProcess, cluster: tuple[FakeKubeApiServer, PodEndpoints]
) -> None:
    _, endpoints = cluster
    path = (
        f"{V1BETA2}/namespaces/{NS}/pods/solo-0/http_requests_total?metricLabelSelector=code%3D200"
    )
    with server.client() as client:
        assert until(lambda: values(client, path), {"solo-0": "5"}) == {"solo-0": "5"}
        done = endpoints.scrapes(f"{NS}/solo-0")

        def faster(scrape: int) -> bytes:
            # From here the counter grows by 50/s (20 s between the stamps of two scrapes).
            stamp = T0_MS + scrape * 20_000
            base = done * 10 * 5
            return (
                "# TYPE http_requests_total counter\n"
                f'http_requests_total{{code="200"}} {base + (scrape - done) * 1000} {stamp}\n'
            ).encode()

        endpoints.set_body(f"{NS}/solo-0", faster)
        assert until(lambda: values(client, path), {"solo-0": "50"}) == {"solo-0": "50"}


def test_every_url_form_answers(server: ServerProcess) -> None:
    with server.client() as client:
        until(
            lambda: (
                values(
                    client, f"{V1BETA2}/namespaces/{NS}/deployments.apps/web/http_requests_total"
                )
                != 404
            ),
            True,
        )
    query_every_form(
        server,
        custom=[
            CustomQuery("pods", "http_requests_total", NS, "db-0", "app=db"),
            CustomQuery(
                "deployments.apps",
                "http_requests_total",
                NS,
                "web",
                "app=web",
                metric_selector="code=200",
            ),
            CustomQuery("statefulsets.apps", "queue_depth", NS, "db"),
        ],
    )
