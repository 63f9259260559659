"""The `prometheus`, `formula` and `http` sources of MetricDefinitions, served by the real server
process watching a real kube-apiserver (docs/metric-definitions.md, "What is served"): a
prometheus definition of namespace `a` answers from a real Prometheus that also holds namespace
`b`'s series, and crafted PromQL never brings b's into the answer (refused or confined), also
as Pods (by the `pod` label) and Object (a ReplicaSet's pods averaged) metrics; a formula over
a schedule definition, and over the platform's External metric of its namespace (a fixture
backend's, read through the server's engine: only in the formula's own namespace, and refused
when the platform's `formulaPlatformInputs` does not list it); an http definition reading a local server (at this host's
address: the API server refuses loopback ones in EndpointSlices) that a real EndpointSlice of
its Service names ready, while the endpoint a slice names not ready is never called (each
server counts the requests it answered).
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import yaml

from custom_metrics_server.testing.server_process import ServerProcess, start_server, stop_server
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.test_metric_definitions import CRD_DIR, CRD_NAME
from tests.controlplane.test_metric_definitions_serving import (
    constant,
    custom,
    definition,
    external,
    logged,
    running_pod,
    served,
    set_running,
    values,
)
from tests.controlplane.test_metric_definitions_status import conditions, written
from tests.prometheus.real_prometheus import Gauge, RealPrometheus
from tests.tools import require

pytestmark = pytest.mark.integration

Obj = dict[str, Any]


@dataclass
class Setup:
    server: ServerProcess
    a: str
    b: str
    prometheus: RealPrometheus


@pytest.fixture(scope="module")
def setup(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """Namespaces a and b, a real Prometheus holding both's series, and the server with the
    `metric-definitions` backend naming that Prometheus."""
    require("prometheus")
    require("promtool")
    control_plane.kubectl("apply", "--server-side", "--field-manager=cms-tests", "-k", str(CRD_DIR))
    control_plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{CRD_NAME}")
    a = control_plane.create_namespace("mdef-src-a")
    b = control_plane.create_namespace("mdef-src-b")
    workdir = tmp_path_factory.mktemp("definition-sources")
    prometheus = RealPrometheus(
        workdir,
        [
            Gauge("queue_depth", {"namespace": a, "queue": "orders"}, 13),
            Gauge("queue_depth", {"namespace": a, "queue": "emails"}, 2),
            Gauge("queue_depth", {"namespace": b, "queue": "orders"}, 9000),
            Gauge("secret_gauge", {"namespace": b}, 7000),
            Gauge("inflight", {"namespace": a, "pod": "web-1"}, 3),
            Gauge("inflight", {"namespace": a, "pod": "web-2"}, 5),
            Gauge("inflight", {"namespace": a, "pod": "stray"}, 100),
            Gauge("inflight", {"namespace": b, "pod": "web-1"}, 1000),
        ],
    )
    prometheus.backfill()
    prometheus.start()
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
                        # The platform's External metrics (`platform_` ones a formula may read).
                        "name": "platform",
                        "type": "fixture",
                        "settings": {
                            "external": [
                                platform_series("platform_queue", 40, a, queue="orders"),
                                platform_series("platform_queue", 2, a, queue="mails"),
                                platform_series("platform_queue", 5000, b, queue="orders"),
                                platform_series("platform_only_in_b", 7000, b),
                                platform_series("cluster_secret_queue", 123, a),
                            ]
                        },
                    },
                    {
                        "name": "metric-definitions",
                        "type": "metric-definitions",
                        "settings": {
                            "kubeconfig": str(control_plane.admin_kubeconfig),
                            "limits": {"minInterval": "5s"},
                            "prometheus": {"servers": [{"name": "main", "url": prometheus.url}]},
                            "http": {"timeout": "5s"},
                            "formulaPlatformInputs": ["platform_.*"],
                        },
                    },
                ]
            }
        )
    )
    try:
        process = start_server(workdir, "--backends-config", str(backends), timeout=60)
    except BaseException:
        prometheus.stop()
        raise
    yield Setup(process, a, b, prometheus)
    stop_server(process)
    prometheus.stop()


def platform_series(metric: str, value: float, namespace: str, **labels: str) -> Obj:
    return {"metric": metric, "value": value, "namespace": namespace, "labels": labels}


def prometheus_source(query: str) -> Obj:
    return {"type": "Prometheus", "prometheus": {"query": query}}


def test_a_prometheus_definition_reads_its_own_namespaces_series_only(
    control_plane: ControlPlane, setup: Setup
) -> None:
    a, server = setup.a, setup.server
    queries = {
        "queue_sum": "sum(queue_depth)",
        # Crafted to reach b: by names (b has both), a join on b's series, a renamed label.
        "everything": 'sum({__name__=~"queue_depth|secret_gauge"})',
        "joined": "sum(queue_depth) + on() group_left sum(secret_gauge or vector(0))",
        "renamed": 'sum(label_replace(queue_depth, "namespace", "x", "", ""))',
        # Cannot be confined: refused, never sent.
        "named_b": f'sum(queue_depth{{namespace="{setup.b}"}})',
        "any_namespace": 'sum(queue_depth{namespace=~".+"})',
    }
    control_plane.apply(
        [
            definition(a, name.replace("_", "-"), name, prometheus_source(query), interval="5s")
            for name, query in queries.items()
        ]
    )
    for metric in ("queue_sum", "everything", "joined", "renamed"):
        assert served(server, control_plane, a, metric) == ["15"], metric
    # Unconfined, the crafted queries do reach b (so the answers above are the confinement's).
    for metric in ("everything", "joined"):
        (row,) = setup.prometheus.query(queries[metric])
        value = row["value"]
        assert isinstance(value, list)
        assert float(value[1]) > 15, metric
    # The refusal is logged with its reason (and kept in the definition's state).
    logged(control_plane, server, f"metric definition {a}/named-b refused (InvalidQuery)")
    logged(control_plane, server, f"metric definition {a}/any-namespace refused (InvalidQuery)")
    assert "a definition reads only its own namespace" in server.logs()
    for metric in ("named_b", "any_namespace"):
        assert values(external(server, a, metric)) == []
    # Nothing of a's definitions answers in b.
    assert values(external(server, setup.b, "queue_sum")) == []


def test_a_prometheus_definition_as_pods_and_object_metrics(
    control_plane: ControlPlane, setup: Setup
) -> None:
    """Per pod by the `pod` label (b's pod of the same name never counted), and over the pods a
    ReplicaSet owns (the stray pod's series left out of its average)."""
    a, server = setup.a, setup.server
    owner = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": "web-rs",
        "uid": "00000000-0000-0000-0000-000000000002",
        "controller": True,
    }
    pods = [running_pod(a, name, {"app": "web"}, 9) for name in ("web-1", "web-2", "stray")]
    for pod in pods[:2]:
        pod["metadata"]["ownerReferences"] = [owner]
    control_plane.apply(pods)
    for pod in pods:
        set_running(control_plane, pod)
    per_pod = definition(a, "inflight-pods", "inflight_pods", prometheus_source("inflight"))
    per_pod["spec"]["servedAs"] = {"type": "Pods"}
    per_pod["spec"]["interval"] = "5s"
    workload = definition(a, "inflight-rs", "inflight_rs", prometheus_source("inflight"))
    workload["spec"]["servedAs"] = {
        "type": "Object",
        "describedObject": {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs"},
        "podValues": "average",
    }
    workload["spec"]["interval"] = "5s"
    control_plane.apply([per_pod, workload])

    def answered(path: str) -> list[str] | None:
        response = custom(server, f"namespaces/{a}/{path}")
        return values(response) or None if response.status_code == 200 else None

    assert control_plane.wait_until(lambda: answered("pods/web-1/inflight_pods"), "web-1") == ["3"]
    every = control_plane.wait_until(lambda: answered("pods/*/inflight_pods"), "every pod's value")
    assert sorted(every) == ["100", "3", "5"]
    average = control_plane.wait_until(
        lambda: answered("replicasets.apps/web-rs/inflight_rs"), "web-rs's average"
    )
    assert average == ["4"]


def test_a_formula_over_a_schedule_definition(control_plane: ControlPlane, setup: Setup) -> None:
    a, server = setup.a, setup.server
    formula = {
        "type": "Formula",
        "formula": {
            "expression": "load * 2.0 + 1.0",
            "inputs": [{"name": "load", "metricName": "sources_expected_load"}],
        },
    }
    control_plane.apply(
        [
            definition(a, "office-hours", "sources_expected_load", constant(6)),
            definition(a, "doubled", "sources_doubled_load", formula, interval="5s"),
        ]
    )
    assert served(server, control_plane, a, "sources_doubled_load") == ["13"]


def formula_over(metric: str, expression: str = "q / 2.0") -> Obj:
    return {
        "type": "Formula",
        "formula": {"expression": expression, "inputs": [{"name": "q", "metricName": metric}]},
    }


def test_a_formula_over_the_platforms_external_metric(
    control_plane: ControlPlane, setup: Setup
) -> None:
    """The platform's series of the formula's namespace summed, as the server serves that
    External metric; the value in the definition's status."""
    a, server = setup.a, setup.server
    assert sorted(values(external(server, a, "platform_queue"))) == ["2", "40"]
    control_plane.apply(
        [
            definition(
                a,
                "per-worker",
                "sources_queue_per_worker",
                formula_over("platform_queue"),
                interval="5s",
            )
        ]
    )
    assert served(server, control_plane, a, "sources_queue_per_worker") == ["21"]
    obj = written(control_plane, a, "per-worker", "True")
    assert obj["status"]["lastValue"] == "21"
    assert conditions(obj)["Valid"]["reason"] == "Accepted"


def test_a_formula_never_reads_a_platform_metric_the_platform_did_not_allow(
    control_plane: ControlPlane, setup: Setup
) -> None:
    a, server = setup.a, setup.server
    assert values(external(server, a, "cluster_secret_queue")) == ["123"]  # served, not allowed
    control_plane.apply(
        [definition(a, "peek", "sources_peek", formula_over("cluster_secret_queue"), interval="5s")]
    )
    obj = written(control_plane, a, "peek", "False")
    valid = conditions(obj)["Valid"]
    assert (valid["status"], valid["reason"]) == ("False", "InputNotAllowed")
    assert "input q (cluster_secret_queue)" in valid["message"]
    assert "formulaPlatformInputs" in valid["message"]
    assert "lastValue" not in obj["status"]
    assert values(external(server, a, "sources_peek")) == []


def test_a_formula_reads_the_platform_metric_of_its_own_namespace_only(
    control_plane: ControlPlane, setup: Setup
) -> None:
    """`platform_only_in_b` has a series in b only: a formula of a has no value (its status
    and the 503 of its metric say which input), the same formula in b has b's."""
    a, b, server = setup.a, setup.b, setup.server
    source = formula_over("platform_only_in_b", "q * 1.0")
    control_plane.apply(
        [
            definition(a, "only-b", "sources_only_b", source, interval="5s"),
            definition(b, "only-b", "sources_only_b", source, interval="5s"),
        ]
    )
    assert served(server, control_plane, b, "sources_only_b") == ["7k"]
    obj = written(control_plane, a, "only-b", "False")
    status = obj["status"]
    assert conditions(obj)["Ready"]["reason"] == "SourceFailing"
    assert (
        f"no value for the input(s) q (platform_only_in_b) in namespace {a}" in status["lastError"]
    )
    assert "lastValue" not in status
    answer = external(server, a, "sources_only_b")  # the source's error, as for any source
    assert answer.status_code == 503
    assert "q (platform_only_in_b)" in answer.json()["message"]


def host_address() -> str | None:
    """This host's address that is not loopback (the API server refuses loopback addresses in
    EndpointSlices, as a cluster's endpoints never are): the one its default route leaves
    from, else one its name resolves to."""
    candidates = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: a UDP connect picks a route
            candidates.append(probe.getsockname()[0])
        except OSError:
            pass
    with contextlib.suppress(OSError):
        for *_, address in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            candidates.append(str(address[0]))
    for candidate in candidates:
        ip = ipaddress.ip_address(candidate)
        if not (ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast):
            return candidate
    return None


class Counting:
    """A JSON endpoint on this host's address that counts the requests it answered."""

    def __init__(self, pending: int, host: str) -> None:
        self.requests = 0
        counting = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                counting.requests += 1
                body = f'{{"queues": [{{"pending": {pending}}}]}}'.encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return None

        self.http = ThreadingHTTPServer((host, 0), Handler)
        self.port = self.http.server_address[1]
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def endpoint_slice(namespace: str, name: str, address: str, port: int, ready: bool) -> Obj:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kubernetes.io/service-name": "scheduler"},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        "endpoints": [{"addresses": [address], "conditions": {"ready": ready}}],
    }


def test_an_http_definition_calls_its_services_ready_endpoint_only(
    control_plane: ControlPlane, setup: Setup
) -> None:
    a, server = setup.a, setup.server
    host = host_address()
    if host is None:
        pytest.skip("this host has no address but loopback, which EndpointSlices refuse")
    ready, not_ready = Counting(42, host), Counting(666, host)
    try:
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "scheduler", "namespace": a},
            "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
        }
        control_plane.apply(
            [
                service,
                endpoint_slice(a, "scheduler-ready", host, ready.port, True),
                endpoint_slice(a, "scheduler-not-ready", host, not_ready.port, False),
            ]
        )
        source = {
            "type": "HTTP",
            "http": {
                "service": "scheduler",
                "port": "http",
                "path": "/stats",
                "valuePath": "queues.0.pending",
            },
        }
        control_plane.apply([definition(a, "jobs", "jobs_pending", source, interval="5s")])
        assert served(server, control_plane, a, "jobs_pending") == ["42"]
        assert ready.requests > 0
        assert not_ready.requests == 0
    finally:
        ready.close()
        not_ready.close()
