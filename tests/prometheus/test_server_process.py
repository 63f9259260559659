"""The real server process (uvicorn, TLS) with the Prometheus backend against a real
Prometheus: kubectl, outages and recovery, configuration reload, self-metrics."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from custom_metrics_server.backends.simulated import DemoSettings, SimulatedCluster
from custom_metrics_server.domain import GroupResource
from custom_metrics_server.prometheus.client import MAX_GET_QUERY, PrometheusClient
from custom_metrics_server.prometheus.rules import ServerConfig
from custom_metrics_server.testing.server_process import ServerProcess as RunningServer
from custom_metrics_server.testing.server_process import server_command, start_server, stop_server
from tests.prometheus.conftest import CLUSTER, FIXTURES, RULES
from tests.prometheus.real_prometheus import CounterLine, Gauge, RealPrometheus
from tests.tools import require

pytestmark = pytest.mark.integration

PODS = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods"


def serve(workdir: Path, prometheus: RealPrometheus, config: Path, *extra: str) -> RunningServer:
    return start_server(
        workdir,
        "--demo-file",
        str(CLUSTER),
        "--prometheus-url",
        prometheus.url,
        "--config",
        str(config),
        "--metrics-relist-interval",
        "1s",
        "--metrics-max-age",
        "1h",
        *extra,
    )


def eventually(check: Callable[[], bool], *, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.2)


@pytest.fixture
def server(tmp_path: Path, running_prometheus: RealPrometheus) -> Iterator[RunningServer]:
    running = serve(tmp_path, running_prometheus, RULES)
    yield running
    stop_server(running)


def test_kubectl_reads_prometheus_metrics(server: RunningServer) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    result = subprocess.run(
        [
            kubectl,
            "--kubeconfig",
            str(server.kubeconfig),
            "get",
            "--raw",
            f"{PODS}/*/http_requests_per_second?labelSelector=app%3Dweb",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert '"name":"web-0"' in result.stdout.replace(" ", "")
    assert '"value":"2"' in result.stdout.replace(" ", "")
    assert '"windowSeconds":120' in result.stdout.replace(" ", "")


def test_outage_gives_503_and_recovers_without_restart(
    tmp_path: Path, running_prometheus: RealPrometheus
) -> None:
    running = serve(tmp_path, running_prometheus, RULES)
    try:
        with running.client() as client:
            path = f"{PODS}/web-0/http_requests_per_second"
            assert client.get(path).status_code == 200
            running_prometheus.stop()
            try:
                down = client.get(path)
                assert down.status_code == 503
                assert down.json()["reason"] == "ServiceUnavailable"
                assert "Prometheus server 'default'" in down.json()["message"]
                # Other backends' answers and discovery keep working; /readyz stays up.
                assert (
                    "pods/http_requests_per_second"
                    in client.get("/apis/custom.metrics.k8s.io/v1beta2").text
                )
                assert client.get("/readyz").status_code == 200

                def degraded() -> bool:
                    verbose = client.get("/readyz", params={"verbose": "1"})
                    return verbose.status_code == 200 and (
                        "[+]backend-prometheus ok (listing of 'default' failing, serving the "
                        "last good one: Prometheus server 'default'" in verbose.text
                    )

                eventually(degraded)  # the 1 s relist fails: said, not failed
                other = client.get(f"{PODS}/web-0/fixture_metric")
                assert other.status_code == 200
                assert other.json()["items"][0]["value"] == "5"
                external = client.get(
                    "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/queue_depth"
                )
                assert external.status_code == 503
            finally:
                running_prometheus.start()
            eventually(lambda: client.get(path).status_code == 200)
            assert client.get(path).json()["items"][0]["value"] == "2"
            eventually(lambda: "failing" not in client.get("/readyz?verbose").text)
    finally:
        stop_server(running)


def test_configuration_reloads_and_keeps_the_last_good_one(
    tmp_path: Path, running_prometheus: RealPrometheus
) -> None:
    config = tmp_path / "config.yaml"
    original = RULES.read_text()
    config.write_text(original)
    running = serve(tmp_path, running_prometheus, config, "--config-reload-interval", "200ms")
    try:
        with running.client() as client:

            def discovered() -> str:
                return client.get("/apis/custom.metrics.k8s.io/v1beta2").text

            assert "pods/renamed_memory" not in discovered()
            # a new custom rule: inserted before `externalRules:`
            config.write_text(
                original.replace(
                    "externalRules:",
                    """- seriesQuery: 'memory_bytes{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  name: {as: renamed_memory}
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
externalRules:""",
                )
            )
            eventually(lambda: "pods/renamed_memory" in discovered())
            value = client.get(f"{PODS}/web-0/renamed_memory")
            assert value.status_code == 200
            assert value.json()["items"][0]["value"] == "1048576"

            config.write_text("rules: [{seriesQuery: broken}]\n")  # no resources: invalid

            def failed_reload() -> bool:
                metrics = client.get("/metrics").text
                return (
                    "custom_metrics_server_prometheus_config_last_reload_successful 0.0" in metrics
                )

            eventually(failed_reload)
            # the last good configuration is still in force
            assert client.get(f"{PODS}/web-0/renamed_memory").status_code == 200
            log = (tmp_path / "server.log").read_text()
            assert "keeping the last good one" in log
            assert "rules[0] (seriesQuery 'broken'): resources" in log
    finally:
        stop_server(running)


def test_self_metrics_show_prometheus_calls(server: RunningServer) -> None:
    with server.client() as client:
        assert client.get(f"{PODS}/web-0/http_requests_per_second").status_code == 200
        metrics = client.get("/metrics").text
    assert (
        'custom_metrics_server_prometheus_request_duration_seconds_count{api="query",'
        'outcome="ok",server="default"}' in metrics
    )
    assert 'custom_metrics_server_prometheus_listing_age_seconds{server="default"}' in metrics
    assert 'custom_metrics_server_prometheus_discovered_metrics{kind="external"} 2.0' in metrics


def test_a_bad_configuration_stops_startup_with_the_reason(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(
        "rules:\n- seriesQuery: x\n  resources: {template: y}\n  name: {matches: '('}\n"
    )
    result = subprocess.run(
        [
            *_server_command(tmp_path),
            "--prometheus-url",
            "http://127.0.0.1:9",
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "rules[0] (seriesQuery 'x'): name.matches: invalid regular expression" in result.stderr


def test_prometheus_adapter_deployment_arguments_are_accepted(tmp_path: Path) -> None:
    """prometheus-adapter's shipped Deployment args (deploy/manifests/deployment.yaml) parse;
    the server then fails only on the unreachable file, proving the flags were understood."""
    result = subprocess.run(
        [
            *_server_command(tmp_path),
            "--cert-dir=/tmp/does-not-matter",
            "--config=/etc/adapter/config.yaml",
            "--metrics-relist-interval=1m",
            "--prometheus-url=https://prometheus.monitoring.svc:9090/",
            "--secure-port=6443",
            "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305,TLS_RSA_WITH_AES_256_CBC_SHA",
            "--logtostderr=true",
            "--v=4",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "unrecognized arguments" not in result.stderr
    assert "cannot read /etc/adapter/config.yaml" in result.stderr


def _server_command(tmp_path: Path) -> list[str]:
    return server_command(tmp_path, "--demo-file", str(CLUSTER))


def test_upstream_default_config_answers_the_documented_query_with_kubectl(
    tmp_path: Path, running_prometheus: RealPrometheus
) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    running = serve(tmp_path, running_prometheus, FIXTURES / "adapter-default-rules.yaml")
    try:
        # The walkthrough's command, verbatim (its `selector=` is ignored like any unknown
        # parameter), then the form the HPA sends.
        for query in ("selector=app%3Dsample-app", "labelSelector=app%3Dsample-app"):
            path = (
                "/apis/custom.metrics.k8s.io/v1beta1/namespaces/default/pods/*/http_requests"
                f"?{query}"
            )
            result = subprocess.run(
                [kubectl, "--kubeconfig", str(running.kubeconfig), "get", "--raw", path],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            assert result.returncode == 0, result.stderr
            assert '"name":"sample-app-1"' in result.stdout.replace(" ", "")
            assert '"value":"250m"' in result.stdout.replace(" ", "")
    finally:
        stop_server(running)


def test_long_queries_are_posted(running_prometheus: RealPrometheus) -> None:
    """A query longer than the GET limit still answers (sent as a POST form)."""

    async def run() -> object:
        client = PrometheusClient(ServerConfig(name="default", url=running_prometheus.url))
        try:
            padding = " " * (MAX_GET_QUERY + 10)
            return await client.query(f"sum(queue_depth){padding}")
        finally:
            await client.aclose()

    data = asyncio.run(run())
    assert isinstance(data, dict)
    assert data["result"][0]["value"][1] == "62"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            [
                "--demo-file",
                str(CLUSTER),
                "--config",
                str(FIXTURES / "adapter-resource-rules.yaml"),
            ],
            "it needs --enable-metrics-api with the Kubernetes backend, or --demo",
        ),
        (["--config", str(RULES)], "--resource-metrics-source=prometheus needs resourceRules"),
    ],
)
def test_resource_metrics_from_prometheus_needs_rules_and_a_cluster(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    command = server_command(
        tmp_path,
        "--prometheus-url",
        "http://127.0.0.1:9",
        "--resource-metrics-source=prometheus",
        *extra,
    )
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert message in result.stderr


def test_kubectl_top_through_prometheus_resource_rules(tmp_path: Path) -> None:
    """prometheus-adapter v0.11's shipped configuration (resourceRules only) answers the
    queries it is documented for, `kubectl top`, from a real Prometheus: usage for the demo's
    pods and nodes is written into Prometheus, and kubectl shows exactly that."""
    kubectl = require("kubectl")
    require("prometheus")
    require("promtool")
    world = SimulatedCluster(DemoSettings(seed=42, pods=6)).world
    pods = [
        (p["metadata"]["namespace"], p["metadata"]["name"], c["name"])
        for p in world.objects[GroupResource("", "pods")]
        for c in p["spec"]["containers"]
    ]
    nodes = [n["metadata"]["name"] for n in world.objects[GroupResource("", "nodes")]]
    series: list[Gauge | CounterLine] = []
    for index, (namespace, pod, container) in enumerate(pods):
        labels = {"namespace": namespace, "pod": pod, "container": container}
        series.append(CounterLine("container_cpu_usage_seconds_total", labels, 0.125 * (index + 1)))
        series.append(
            Gauge("container_memory_working_set_bytes", labels, float((index + 1) * 2**25))
        )
    for index, node in enumerate(nodes):
        series.append(CounterLine("node_cpu_usage_seconds_total", {"node": node}, 1.0 + index))
        series.append(Gauge("node_memory_working_set_bytes", {"node": node}, float(2**30)))
    prometheus = RealPrometheus(tmp_path / "prometheus", series, before=900, after=1800)
    prometheus.workdir.mkdir()
    prometheus.backfill()
    prometheus.start()
    running = start_server(
        tmp_path,
        "--demo-pods",
        "6",
        "--prometheus-url",
        prometheus.url,
        "--config",
        str(FIXTURES / "adapter-resource-rules.yaml"),
        "--resource-metrics-source=prometheus",
    )
    try:

        def top(*args: str) -> str:
            result = subprocess.run(
                [kubectl, "--kubeconfig", str(running.kubeconfig), "top", *args],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            return result.stdout if result.returncode == 0 else ""

        namespace, pod, container = pods[0]
        eventually(lambda: pod in top("pods", "-A"))
        rows = {
            tuple(line.split()[:2]): line.split()[2:] for line in top("pods", "-A").splitlines()[1:]
        }
        assert rows[(namespace, pod)] == ["125m", "32Mi"]
        containers = top("pod", pod, "-n", namespace, "--containers").splitlines()[1:]
        assert containers[0].split() == [pod, container, "125m", "32Mi"]
        node_rows = {line.split()[0]: line.split()[1] for line in top("nodes").splitlines()[1:]}
        assert node_rows[nodes[0]] == "1000m"
        assert node_rows[nodes[1]] == "2000m"
    finally:
        stop_server(running)
        prometheus.stop()
