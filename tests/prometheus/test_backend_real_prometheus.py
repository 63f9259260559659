"""The Prometheus backend against a real Prometheus holding known data, through the API."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import httpx
import pytest

from custom_metrics_server.domain import GroupResource, MetricInfo
from custom_metrics_server.machinery.quantity import Quantity
from custom_metrics_server.prometheus.backend import PrometheusBackend
from custom_metrics_server.server.app import create_app
from tests.prometheus.conftest import (
    FIXTURES,
    INGRESS_RATE,
    MEMORY,
    NODE_LOAD,
    QUEUES,
    RATES,
    fixture_cluster,
    settings_for,
)
from tests.prometheus.real_prometheus import RealPrometheus

BASE = "/apis/custom.metrics.k8s.io/v1beta2"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"
PODS = GroupResource("", "pods")


@pytest.fixture
async def client(backend: PrometheusBackend) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(cluster=backend.cluster, backends=[backend])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://test") as http:
        yield http


def value(item: dict[str, Any]) -> Decimal:
    return Quantity.parse(item["value"]).value


def close(actual: Decimal, expected: float) -> bool:
    return abs(float(actual) - expected) <= 1e-6 * max(1.0, abs(expected))


async def test_discovery_lists_what_the_rules_yield(backend: PrometheusBackend) -> None:
    metrics = set(backend.list_metrics())
    assert MetricInfo(PODS, True, "http_requests_per_second") in metrics
    # The namespace label maps to `namespaces`, so every pod metric is a namespace metric too.
    assert MetricInfo(GroupResource("", "namespaces"), False, "http_requests_per_second") in metrics
    assert MetricInfo(PODS, True, "memory_bytes") in metrics
    assert MetricInfo(GroupResource("", "nodes"), False, "node_load") in metrics
    ingress = GroupResource("networking.k8s.io", "ingresses")
    assert MetricInfo(ingress, True, "requests_per_second") in metrics
    assert set(backend.list_external_metrics()) == {"queue_depth", "queue_depth_all_namespaces"}


async def test_one_pod_is_its_rate(client: httpx.AsyncClient) -> None:
    response = await client.get(f"{BASE}/namespaces/default/pods/web-1/http_requests_per_second")
    assert response.status_code == 200, response.text
    (item,) = response.json()["items"]
    assert item["describedObject"] == {
        "kind": "Pod",
        "namespace": "default",
        "name": "web-1",
        "apiVersion": "v1",
    }
    assert close(value(item), RATES[("default", "web-1")])
    assert item["windowSeconds"] == 120  # the rule's rate(...[2m])
    # The sample's own timestamp (Prometheus' evaluation time), not a made-up one.
    stamp = item["timestamp"]
    assert stamp.endswith("Z")
    assert abs(time.time() - _parse_time(stamp)) < 60


def _parse_time(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


async def test_wildcard_with_label_selector_keeps_only_the_selected_pods(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get(
        f"{BASE}/namespaces/default/pods/*/http_requests_per_second",
        params={"labelSelector": "app=web"},
    )
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    assert [item["describedObject"]["name"] for item in items] == ["web-0", "web-1", "web-2"]
    for item in items:
        assert close(value(item), RATES[("default", item["describedObject"]["name"])])
    narrowed = await client.get(
        f"{BASE}/namespaces/default/pods/*/http_requests_per_second",
        params={"labelSelector": "app=web,canary=true"},
    )
    assert [i["describedObject"]["name"] for i in narrowed.json()["items"]] == ["web-2"]


async def test_the_namespace_bounds_the_answer(client: httpx.AsyncClient) -> None:
    response = await client.get(f"{BASE}/namespaces/shop/pods/*/http_requests_per_second")
    items = response.json()["items"]
    assert [(i["describedObject"]["namespace"], i["describedObject"]["name"]) for i in items] == [
        ("shop", "cart-0")
    ]


async def test_metric_label_selector_becomes_matchers(client: httpx.AsyncClient) -> None:
    path = f"{BASE}/namespaces/default/pods/web-0/http_requests_per_second"
    hit = await client.get(path, params={"metricLabelSelector": "job=web"})
    assert hit.status_code == 200
    assert close(value(hit.json()["items"][0]), 2.0)
    assert hit.json()["items"][0]["metric"]["selector"] == {"matchLabels": {"job": "web"}}
    miss = await client.get(path, params={"metricLabelSelector": "job in (api,cart)"})
    assert miss.status_code == 404
    assert "web-0" in miss.json()["message"]
    bad_key = await client.get(path, params={"metricLabelSelector": "app.kubernetes.io/name=x"})
    assert bad_key.status_code == 400
    assert "not a valid Prometheus label name" in bad_key.json()["message"]
    ordering = await client.get(path, params={"metricLabelSelector": "code>400"})
    assert ordering.status_code == 400
    assert "cannot be expressed" in ordering.json()["message"]


async def test_absent_series_policy(client: httpx.AsyncClient) -> None:
    # memory_bytes says `absent: zero`: idle pods get 0 instead of a 404.
    response = await client.get(f"{BASE}/namespaces/default/pods/*/memory_bytes")
    items = {i["describedObject"]["name"]: i for i in response.json()["items"]}
    assert set(items) == {"web-0", "web-1", "web-2", "api-0", "idle-0", "sample-app-1"}
    assert items["web-0"]["value"] == "1Mi" or value(items["web-0"]) == Decimal(
        int(MEMORY[("default", "web-0")])
    )
    assert items["idle-0"]["value"] == "0"
    assert "windowSeconds" not in items["idle-0"] or items["idle-0"]["windowSeconds"] is None
    # http_requests_per_second keeps upstream's policy: a pod without series is a 404.
    missing = await client.get(f"{BASE}/namespaces/default/pods/idle-0/http_requests_per_second")
    assert missing.status_code == 404
    assert missing.json()["reason"] == "NotFound"


async def test_nan_and_infinities_are_not_values(client: httpx.AsyncClient) -> None:
    response = await client.get(f"{BASE}/namespaces/default/pods/*/odd_value")
    items = response.json()["items"]
    assert [(i["describedObject"]["name"], i["value"]) for i in items] == [("web-2", "5")]
    nan = await client.get(f"{BASE}/namespaces/default/pods/web-0/odd_value")
    assert nan.status_code == 404


async def test_nodes_ingresses_and_namespaces(client: httpx.AsyncClient) -> None:
    nodes = await client.get(f"{BASE}/nodes/*/node_load")
    got = {i["describedObject"]["name"]: value(i) for i in nodes.json()["items"]}
    assert got == {name: Decimal(str(load)) for name, load in NODE_LOAD.items()}
    ingress = await client.get(
        f"{BASE}/namespaces/default/ingresses.networking.k8s.io/web/requests_per_second"
    )
    assert ingress.status_code == 200, ingress.text
    (item,) = ingress.json()["items"]
    assert item["describedObject"]["apiVersion"] == "networking.k8s.io/v1"
    assert close(value(item), INGRESS_RATE)
    namespace = await client.get(f"{BASE}/namespaces/default/metrics/http_requests_per_second")
    assert namespace.status_code == 200, namespace.text
    total = sum(rate for (ns, _), rate in RATES.items() if ns == "default")
    assert close(value(namespace.json()["items"][0]), total)


async def test_external_metrics_are_namespaced_unless_the_rule_says_not(
    client: httpx.AsyncClient,
) -> None:
    default = await client.get(f"{EXTERNAL}/namespaces/default/queue_depth")
    assert default.status_code == 200, default.text
    got = {i["metricLabels"]["queue"]: value(i) for i in default.json()["items"]}
    assert got == {q: Decimal(int(v)) for (ns, q), v in QUEUES.items() if ns == "default"}
    selected = await client.get(
        f"{EXTERNAL}/namespaces/default/queue_depth", params={"labelSelector": "queue=jobs"}
    )
    assert [i["metricLabels"] for i in selected.json()["items"]] == [{"queue": "jobs"}]
    everywhere = await client.get(f"{EXTERNAL}/namespaces/default/queue_depth_all_namespaces")
    labels = sorted(
        (i["metricLabels"]["namespace"], i["metricLabels"]["queue"])
        for i in everywhere.json()["items"]
    )
    assert labels == sorted(QUEUES)


async def test_unknown_metric_is_a_404(client: httpx.AsyncClient) -> None:
    response = await client.get(f"{BASE}/namespaces/default/pods/web-0/no_such_metric")
    assert response.status_code == 404


async def test_prometheus_down_gives_503_and_keeps_discovery(
    prometheus: RealPrometheus,
) -> None:
    backend = PrometheusBackend(fixture_cluster(), settings_for(prometheus.url, retries=1))
    app = create_app(cluster=backend.cluster, backends=[backend])
    transport = httpx.ASGITransport(app=app)
    async with backend, httpx.AsyncClient(transport=transport, base_url="https://t") as client:
        await backend.relist()
        path = f"{BASE}/namespaces/default/pods/web-0/http_requests_per_second"
        assert (await client.get(path)).status_code == 200
        prometheus.stop()
        try:
            down = await client.get(path)
            assert down.status_code == 503
            body = down.json()
            assert body["kind"] == "Status"
            assert body["reason"] == "ServiceUnavailable"
            assert "unreachable" in body["message"]
            assert "http_requests_per_second" in body["message"]
            await backend.relist()  # fails: the last good listing stays
            assert MetricInfo(PODS, True, "http_requests_per_second") in backend.list_metrics()
            assert backend.ready().ready
            discovery = await client.get(BASE)
            assert "pods/http_requests_per_second" in discovery.text
        finally:
            prometheus.start()
        up = await client.get(path)
        assert up.status_code == 200
        assert close(value(up.json()["items"][0]), 2.0)


async def test_upstream_default_configuration_answers_the_walkthrough(
    running_prometheus: RealPrometheus,
) -> None:
    """prometheus-adapter's default rules: `http_requests_total` is served as the rate
    `pods/http_requests`, and the walkthrough's query answers."""
    config = FIXTURES / "adapter-default-rules.yaml"
    backend = PrometheusBackend(fixture_cluster(), settings_for(running_prometheus.url, config))
    app = create_app(cluster=backend.cluster, backends=[backend])
    transport = httpx.ASGITransport(app=app)
    async with backend, httpx.AsyncClient(transport=transport, base_url="https://t") as client:
        await backend.relist()
        assert MetricInfo(PODS, True, "http_requests") in backend.list_metrics()
        # gauges keep their name (rule 4): memory_bytes for pods
        assert MetricInfo(PODS, True, "memory_bytes") in backend.list_metrics()
        response = await client.get(
            "/apis/custom.metrics.k8s.io/v1beta1/namespaces/default/pods/*/http_requests",
            params={"labelSelector": "app=sample-app"},
        )
        assert response.status_code == 200, response.text
        (item,) = response.json()["items"]
        assert item["describedObject"]["name"] == "sample-app-1"
        assert close(value(item), 0.25)
        assert item["window"] == 60  # rate(...[1m]) in the default rule


async def test_each_rule_chooses_its_server(running_prometheus: RealPrometheus) -> None:
    """Two named servers (here the same engine, one through a tenant header): each rule's
    discovery and queries go to the server it names."""
    config = f"""
servers:
- name: tenant-a
  url: {running_prometheus.url}
  headers: {{X-Scope-OrgID: team-a}}
rules:
- seriesQuery: 'node_load{{node!=""}}'
  resources: {{template: "<<.Resource>>"}}
  metricsQuery: 'max(<<.Series>>{{<<.LabelMatchers>>}}) by (<<.GroupBy>>)'
  server: tenant-a
- seriesQuery: 'memory_bytes{{namespace!="",pod!=""}}'
  resources: {{overrides: {{namespace: {{resource: namespace}}, pod: {{resource: pod}}}}}}
"""
    backend = PrometheusBackend(
        fixture_cluster(), settings_for("http://127.0.0.1:9", config, retries=0)
    )
    app = create_app(cluster=backend.cluster, backends=[backend])
    transport = httpx.ASGITransport(app=app)
    async with backend, httpx.AsyncClient(transport=transport, base_url="https://t") as client:
        await backend.relist()
        # the default server (port 9) is unreachable: only tenant-a's rule was discovered
        metrics = {info.metric for info in backend.list_metrics()}
        assert metrics == {"node_load"}
        response = await client.get(f"{BASE}/nodes/node-a/node_load")
        assert response.status_code == 200
        assert value(response.json()["items"][0]) == Decimal("1.5")
        assert backend.listing_age("tenant-a") is not None
        assert backend.listing_age("default") is None
