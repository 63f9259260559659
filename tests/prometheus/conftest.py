"""Fixtures of the Prometheus backend tests: one real Prometheus per session, known data."""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import yaml

from custom_metrics_server.backends.memory import load_fixture
from custom_metrics_server.cluster.in_memory import InMemoryCluster
from custom_metrics_server.prometheus.backend import PrometheusBackend, PrometheusSettings
from custom_metrics_server.prometheus.rules import DEFAULT_SERVER, ServerConfig
from tests.http_client.connect_proxy import clean_environment, proxy  # noqa: F401 - fixtures
from tests.prometheus.real_prometheus import CounterLine, Gauge, RealPrometheus
from tests.prometheus.scripted import serve  # noqa: F401 - the scripted-server fixture
from tests.tools import require

FIXTURES = Path(__file__).parent.parent / "fixtures" / "prometheus"
RULES = FIXTURES / "rules.yaml"
CLUSTER = FIXTURES / "cluster.yaml"

#: Requests per second of each pod's `http_requests_total` (a straight line, so any rate()).
RATES = {
    ("default", "web-0"): 2.0,
    ("default", "web-1"): 4.0,
    ("default", "web-2"): 0.5,
    ("default", "api-0"): 1.0,
    ("default", "sample-app-1"): 0.25,
    ("shop", "cart-0"): 3.0,
}
MEMORY = {("default", "web-0"): 1048576.0, ("default", "web-1"): 2097152.0}
NODE_LOAD = {"node-a": 1.5, "node-b": 0.25}
QUEUES = {("default", "emails"): 42.0, ("default", "jobs"): 7.0, ("shop", "orders"): 13.0}
INGRESS_RATE = 7.0
#: Container usage for resourceRules (metrics.k8s.io): cores (a counter's slope) and bytes.
CONTAINERS = {
    ("default", "web-0", "app"): (0.25, 64 * 2**20),
    ("default", "web-0", "sidecar"): (0.01, 16 * 2**20),
    ("default", "web-1", "app"): (1.5, 256 * 2**20),
    ("default", "api-0", "app"): (0.5, None),  # no memory series: left out, as metrics-server
}
NODE_USAGE = {"node-a": (1.75, 3 * 2**30), "node-b": (0.5, 2**30)}


def series() -> list[Gauge | CounterLine]:
    """Every series the test Prometheus holds."""
    out: list[Gauge | CounterLine] = []
    for (namespace, pod), rate in RATES.items():
        job = pod.rsplit("-", 1)[0]
        labels = {"namespace": namespace, "pod": pod, "job": job}
        out.append(CounterLine("http_requests_total", labels, rate))
    for (namespace, pod), value in MEMORY.items():
        out.append(Gauge("memory_bytes", {"namespace": namespace, "pod": pod}, value))
    for pod, value in (("web-0", math.nan), ("web-1", math.inf), ("web-2", 5.0)):
        out.append(Gauge("odd_value", {"namespace": "default", "pod": pod}, value))
    out.extend(Gauge("node_load", {"node": node}, load) for node, load in NODE_LOAD.items())
    out.append(
        CounterLine(
            "nginx_ingress_controller_requests",
            {"namespace": "default", "ingress": "web", "status": "200"},
            INGRESS_RATE,
        )
    )
    for (namespace, pod, container), (cores, memory) in CONTAINERS.items():
        labels = {"namespace": namespace, "pod": pod, "container": container, "node": "node-a"}
        out.append(CounterLine("container_cpu_usage_seconds_total", labels, cores))
        if memory is not None:
            out.append(Gauge("container_memory_working_set_bytes", labels, float(memory)))
    for node, (cores, memory) in NODE_USAGE.items():
        out.append(CounterLine("node_cpu_usage_seconds_total", {"node": node}, cores))
        out.append(Gauge("node_memory_working_set_bytes", {"node": node}, float(memory)))
    for (namespace, queue), depth in QUEUES.items():
        out.append(Gauge("queue_depth", {"namespace": namespace, "queue": queue}, depth))
    return out


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealPrometheus]:
    """A real Prometheus holding `series()`; skipped only where it cannot be installed."""
    require("prometheus")
    require("promtool")
    server = RealPrometheus(tmp_path_factory.mktemp("prometheus"), series())
    server.backfill()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def running_prometheus(prometheus: RealPrometheus) -> RealPrometheus:
    """The session's Prometheus, restarted first if a test stopped it."""
    if prometheus.process is None:
        prometheus.start()
    return prometheus


def fixture_cluster() -> InMemoryCluster:
    """The objects of `cluster.yaml`."""
    cluster, _ = load_fixture(yaml.safe_load(CLUSTER.read_text()), now=time.time())
    return cluster


def settings_for(url: str, config: Path | str = RULES, **overrides: object) -> PrometheusSettings:
    """Backend settings against `url` with a config file (Path) or document (str)."""
    kwargs: dict[str, object] = {
        "default_server": ServerConfig(name=DEFAULT_SERVER, url=url),
        "relist_interval": 3600.0,
        "max_age": 3600.0,
        "query_timeout": 5.0,
        "reload_interval": 0.0,
    }
    if isinstance(config, Path):
        kwargs["config_path"] = config
    else:
        kwargs["config_text"] = config
    kwargs.update(overrides)
    return PrometheusSettings(**kwargs)  # type: ignore[arg-type]


@pytest.fixture
async def backend(running_prometheus: RealPrometheus) -> AsyncIterator[PrometheusBackend]:
    """The backend over the fixture cluster, listed once."""
    backend = PrometheusBackend(fixture_cluster(), settings_for(running_prometheus.url))
    async with backend:
        await backend.relist()
        yield backend
