"""Series listings to metrics: association rules and the memory bound."""

from __future__ import annotations

import tracemalloc

from custom_metrics_server.cluster import InMemoryCluster
from custom_metrics_server.domain import GroupResource, MetricInfo
from custom_metrics_server.prometheus.registry import build, reduce_series
from custom_metrics_server.prometheus.rules import DEFAULT_SERVER, ServerConfig, parse_config

DEFAULT = ServerConfig(name=DEFAULT_SERVER, url="http://p:9090")
CONFIG = parse_config(
    """
rules:
- seriesQuery: '{__name__=~".+"}'
  resources:
    template: "<<.Resource>>"
    overrides: {kube_deployment: {group: apps, resource: deployment}}
externalRules:
- seriesQuery: '{__name__=~".+"}'
  name: {matches: "^queue_(.*)$", as: "q_$1"}
""",
    default_server=DEFAULT,
)
QUERY = (DEFAULT_SERVER, '{__name__=~".+"}')


async def registry_for(series: list[dict[str, str]]):  # type: ignore[no-untyped-def]
    cluster = InMemoryCluster()

    async def resolve(text: str):  # type: ignore[no-untyped-def]
        return cluster.mapping(text)

    return await build(CONFIG, {QUERY: sorted(reduce_series(series))}, resolve)


async def test_association_follows_upstream() -> None:
    registry = await registry_for(
        [
            {"__name__": "http_total", "namespace": "a", "pod": "p", "service": "s"},
            {"__name__": "load", "node": "n"},
            {"__name__": "orphans", "pod": "p"},  # a pod series without a namespace label
            {"__name__": "replicas", "namespace": "a", "kube_deployment": "d"},
            {"__name__": "queue_len", "instance": "x"},
            {"__name__": "unrelated", "instance": "x"},
        ]
    )
    custom = set(registry.custom)
    assert MetricInfo(GroupResource("", "pods"), True, "http_total") in custom
    assert MetricInfo(GroupResource("", "services"), True, "http_total") in custom
    assert MetricInfo(GroupResource("", "namespaces"), False, "http_total") in custom
    assert MetricInfo(GroupResource("", "nodes"), False, "load") in custom
    assert MetricInfo(GroupResource("apps", "deployments"), True, "replicas") in custom
    assert not any(info.metric in ("orphans", "unrelated", "queue_len") for info in custom)
    assert set(registry.external) == {"q_len"}
    assert registry.external["q_len"].series == "queue_len"


def test_listing_memory_is_bounded_by_metric_shapes_not_series() -> None:
    """50,000 pod series of 3 metrics reduce to 3 (name, label-set) pairs."""
    series = (
        {"__name__": f"m{i % 3}", "namespace": f"ns{i % 50}", "pod": f"pod-{i}", "container": "c"}
        for i in range(50_000)
    )
    tracemalloc.start()
    shapes = reduce_series(series)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(shapes) == 3
    assert peak < 1_000_000  # the reduction keeps shapes, never the series themselves
