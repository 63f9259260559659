"""The `prometheus` source plugged in (backends/definitions/prometheus_source.py), against a real
Prometheus holding namespaces `a` and `b`: the query confined before it is sent (a query that
cannot be is refused, never sent), External, Pods and Object values, the series cap, the
platform's servers by name, and failures as reasons. An Object definition's workload pods come
through a real `WatchGroup` from the fake API server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from custom_metrics_server.backends.definitions.policy import Limits
from custom_metrics_server.backends.definitions.prometheus_source import (
    PrometheusServers,
    PrometheusSource,
    make_prometheus,
)
from custom_metrics_server.backends.definitions.source import SourceError, SourceTools
from custom_metrics_server.backends.definitions.spec import Definition, Refused, parse_definition
from custom_metrics_server.domain import GroupResource
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kube.config import Connection
from custom_metrics_server.kube.shared_watches import WatchGroup
from custom_metrics_server.prometheus.rules import ServerConfig
from tests.backends.definitions.test_spec import definition
from tests.fakes.kube_apiserver import FakeKubeApiServer, pod
from tests.prometheus.real_prometheus import Gauge, RealPrometheus, free_port
from tests.tools import require

Obj = dict[str, Any]

SERIES = [
    Gauge("queue_depth", {"namespace": "a", "queue": "orders"}, 13),
    Gauge("queue_depth", {"namespace": "a", "queue": "emails"}, 2),
    Gauge("queue_depth", {"namespace": "b", "queue": "orders"}, 9999),
    Gauge("inflight", {"namespace": "a", "pod": "web-1"}, 3),
    Gauge("inflight", {"namespace": "a", "pod": "web-2"}, 5),
    Gauge("inflight", {"namespace": "a", "pod": "stray"}, 100),
    Gauge("inflight", {"namespace": "b", "pod": "web-1"}, 1000),
    *(Gauge("many", {"namespace": "a", "i": str(i)}, i) for i in range(5)),
]
B_VALUES = {9999.0, 1000.0}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealPrometheus]:
    require("prometheus")
    require("promtool")
    workdir = tmp_path_factory.mktemp("prometheus-source")
    server = RealPrometheus(workdir, list(SERIES))
    server.backfill()
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def servers(prometheus: RealPrometheus) -> AsyncIterator[PrometheusServers]:
    made = PrometheusServers(
        {
            "main": ServerConfig(name="main", url=prometheus.url),
            "down": ServerConfig(name="down", url=f"http://127.0.0.1:{free_port()}"),
        },
        "main",
        timeout=5.0,
    )
    yield made
    await made.aclose()


def spec(query: str, served: Obj | None = None, **source: Any) -> Obj:
    return {
        "metricName": "queue",
        "servedAs": served or {"type": "External"},
        "source": {"type": "Prometheus", "prometheus": {"query": query, **source}},
        "interval": "30s",
    }


def parsed(made: Obj, namespace: str = "a") -> Definition:
    return parse_definition(definition(made, namespace=namespace))


def tools(
    servers: PrometheusServers | None, *, series: int = 1000, group: WatchGroup | None = None
) -> SourceTools:
    client = KubeClient(Connection(host="https://127.0.0.1:1"))
    return SourceTools(
        client=client,
        external_value=lambda *_: None,
        settings={} if servers is None else {"prometheus": servers},
        namespace_limits=lambda _: Limits(series_per_query=series),
        watches=group or WatchGroup(client),
    )


async def read(source: PrometheusSource) -> list[tuple[float, dict[str, str]]]:
    await source.refresh()
    found = [(v.value, dict(v.labels)) for v in source.values(source.clock())]
    return sorted(found, key=lambda item: (item[0], sorted(item[1].items())))


async def test_external_values_are_the_confined_querys_series(servers: PrometheusServers) -> None:
    source = make_prometheus(parsed(spec("sum(queue_depth)")), tools(servers))
    assert source.confined.query == 'sum(queue_depth{namespace="a"})'
    assert await read(source) == [(15.0, {})]
    source = make_prometheus(parsed(spec('queue_depth{queue="orders"}')), tools(servers))
    assert await read(source) == [(13.0, {"namespace": "a", "queue": "orders"})]
    scalar = make_prometheus(parsed(spec("scalar(sum(queue_depth)) * 2")), tools(servers))
    assert await read(scalar) == [(30.0, {})]


@pytest.mark.parametrize(
    "query",
    [
        'queue_depth{namespace="b"}',
        'sum(queue_depth{namespace=~".*"})',
        'queue_depth{namespace!="a"}',
        "queue_depth{",
    ],
)
def test_a_query_that_cannot_be_confined_is_refused_before_anything_is_sent(
    servers: PrometheusServers, query: str
) -> None:
    with pytest.raises(Refused) as refused:
        make_prometheus(parsed(spec(query)), tools(servers))
    assert refused.value.reason == "InvalidQuery"
    assert refused.value.message.startswith("spec.source.prometheus.query: ")


@pytest.mark.parametrize(
    "query",
    [
        '{__name__=~".+"}',
        'sum(queue_depth) + on() group_left sum({__name__="queue_depth"})',
        'label_replace(queue_depth, "namespace", "b", "", "")',
        "queue_depth or inflight",
    ],
)
async def test_crafted_queries_never_answer_anothers_namespaces_series(
    servers: PrometheusServers, query: str
) -> None:
    source = make_prometheus(parsed(spec(query)), tools(servers))
    values = await read(source)
    assert values  # a's series do answer
    assert not {value for value, _ in values} & B_VALUES


async def test_pods_values_are_the_series_by_pod(servers: PrometheusServers) -> None:
    source = make_prometheus(parsed(spec("inflight", {"type": "Pods"})), tools(servers))
    await source.refresh()
    found = sorted((v.pod, v.value) for v in source.values(source.clock()))
    assert found == [("stray", 100.0), ("web-1", 3.0), ("web-2", 5.0)]


async def test_object_values_are_the_workloads_pods(servers: PrometheusServers) -> None:
    served = {
        "type": "Object",
        "describedObject": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "podValues": "average",
    }
    # What the namespace's watches deliver: web's pods through its ReplicaSet, and a stray;
    # in namespace b, a pod of a ReplicaSet of the same name (never a's).
    rs = {"kind": "ReplicaSet", "name": "web-7d9", "controller": True}
    deployment = {"kind": "Deployment", "name": "web", "controller": True}
    with FakeKubeApiServer() as api:
        for namespace, name, owner in (
            ("a", "web-1", rs),
            ("a", "web-2", rs),
            ("a", "stray", None),
            ("b", "web-3", rs),
        ):
            made = pod(namespace, name)
            made["metadata"]["ownerReferences"] = [owner] if owner else []
            api.add("pods", made)
        for namespace in ("a", "b"):
            api.add(
                "replicasets.apps",
                {
                    "metadata": {
                        "name": "web-7d9",
                        "namespace": namespace,
                        "ownerReferences": [deployment],
                    }
                },
            )
        client = KubeClient(api.connection())
        group = WatchGroup(client)
        source = make_prometheus(parsed(spec("inflight", served)), tools(servers, group=group))
        assert source.watches is not None
        assert [path for path, _ in source.watches.paths] == [
            "/api/v1/namespaces/a/pods",
            "/apis/apps/v1/namespaces/a/replicasets",
        ]
        try:
            async with source:
                await source.refresh()
        finally:
            await group.aclose()
            await client.aclose()
    web = (GroupResource("apps", "deployments"), "web")
    owned = sorted(v.pod or "" for v in source.values(source.clock()) if web in v.workloads)
    assert owned == ["web-1", "web-2"]
    assert source.pods is not None
    assert "web-3" not in source.pods.members()


async def test_an_answer_over_the_series_cap_is_refused_whole(servers: PrometheusServers) -> None:
    source = make_prometheus(parsed(spec("many")), tools(servers, series=4))
    with pytest.raises(SourceError, match="answered 5 series, over the limit of 4 for namespace a"):
        await source.refresh()
    assert source.values(source.clock()) == []
    source = make_prometheus(parsed(spec("many")), tools(servers, series=5))
    assert len(await read(source)) == 5


def test_servers_are_the_platforms_by_name(servers: PrometheusServers) -> None:
    with pytest.raises(Refused) as refused:
        make_prometheus(parsed(spec("up", server="elsewhere")), tools(servers))
    assert refused.value.reason == "UnknownServer"
    assert "'elsewhere' is not one the platform configured (down, main)" in refused.value.message
    with pytest.raises(Refused) as refused:
        make_prometheus(parsed(spec("up")), tools(None))
    assert refused.value.reason == "UnknownServer"
    named = make_prometheus(parsed(spec("up", server="down")), tools(servers))
    assert named.client is servers.client("down")


async def test_failures_are_the_sources_errors(servers: PrometheusServers) -> None:
    down = make_prometheus(parsed(spec("queue_depth", server="down")), tools(servers))
    with pytest.raises(SourceError, match=r"the query failed \(unavailable\)"):
        await down.refresh()
    matrix = make_prometheus(parsed(spec("queue_depth[5m]")), tools(servers))
    with pytest.raises(SourceError, match="answered a matrix"):
        await matrix.refresh()
