"""The simulated cluster: deterministic, realistic, moving, and serving every HPA source type."""

from __future__ import annotations

import asyncio

from custom_metrics_server.api.grammar import parse, parse_query
from custom_metrics_server.backends import demo_kubelets
from custom_metrics_server.backends.simulated import DemoSettings, SimulatedCluster
from custom_metrics_server.domain import (
    ExternalMetricRequest,
    GroupResource,
    MetricInfo,
    MetricRequest,
)
from custom_metrics_server.kubelet_format.rows import read_usage_rows
from custom_metrics_server.machinery.label_parser import parse_selector
from custom_metrics_server.query.engine import QueryEngine

NOW = 1_767_323_045.0


def demo(**settings: object) -> SimulatedCluster:
    return SimulatedCluster(DemoSettings(**settings), clock=lambda: NOW)  # type: ignore[arg-type]


def query(sim: SimulatedCluster, path: str, q: bytes = b"") -> list[tuple[str, object]]:
    parsed = parse(path, parse_query(q))
    engine = QueryEngine(cluster=sim.cluster, backends=[sim])
    if isinstance(parsed, ExternalMetricRequest):
        return [(s.labels.get("queue", ""), s.value) for s in asyncio.run(engine.external(parsed))]
    assert isinstance(parsed, MetricRequest)
    return [(s.described.name, s.value) for s in asyncio.run(engine.custom(parsed))]


def test_same_seed_and_time_give_the_same_cluster_and_values() -> None:
    first, second = demo(seed=7), demo(seed=7)
    pods = GroupResource("", "pods")
    assert [r.name for r in first.cluster.inventory.records(pods)] == [
        r.name for r in second.cluster.inventory.records(pods)
    ]
    assert first.build_snapshot(NOW) == second.build_snapshot(NOW)
    assert demo(seed=8).build_snapshot(NOW) != first.build_snapshot(NOW)


def test_pod_count_and_web_replicas_follow_the_settings() -> None:
    sim = demo(pods=200, web_pods=50)
    lifecycles = [pod.lifecycle for pod in sim.cluster.pods.values()]
    assert lifecycles.count("Runnable") == 200
    assert lifecycles.count("Schedulable") == 2  # the Job no node can take
    assert lifecycles.count("Completed") == 2  # the finished Job
    assert (
        len(
            sim.cluster.list_objects(
                GroupResource("", "pods"), "default", parse_selector("app=web")
            )
        )
        == 50
    )
    assert (
        len(
            sim.cluster.list_objects(
                GroupResource("", "nodes"), None, parse_selector("kubernetes.io/os=linux")
            )
        )
        == 25  # eight pods a node
    )


def test_values_move_between_ticks_and_carry_the_tick_time() -> None:
    sim = demo(interval=15.0)
    now = sim.build_snapshot(NOW)
    later = sim.build_snapshot(NOW + 15)
    info = MetricInfo(GroupResource("", "pods"), True, "http_requests_per_second")
    key = next(iter(now.custom[info]))
    assert now.custom[info][key].total.value != later.custom[info][key].total.value
    assert now.custom[info][key].total.timestamp == NOW // 15 * 15
    assert later.custom[info][key].total.timestamp == now.custom[info][key].total.timestamp + 15


def test_hpa_pods_object_and_external_examples_answer() -> None:
    sim = demo()
    p = "/apis/custom.metrics.k8s.io/v1beta2"
    pods = query(
        sim, p + "/namespaces/default/pods/*/http_requests_per_second", b"labelSelector=app%3Dweb"
    )
    assert len(pods) == 12
    assert all(name.startswith("web-") for name, _ in pods)
    deployment = query(sim, p + "/namespaces/default/deployments.apps/web/http_requests_per_second")
    assert len(deployment) == 1
    assert abs(float(deployment[0][1]) - sum(float(v) for _, v in pods)) < 0.01  # type: ignore[arg-type]
    ingress = query(
        sim, p + "/namespaces/default/ingresses.networking.k8s.io/web/requests_per_second"
    )
    assert ingress[0][1] == deployment[0][1]
    assert len(query(sim, p + "/namespaces/shop/metrics/queue_length")) == 1
    assert len(query(sim, p + "/namespaces/default/nodes/node-a-0/node_load1")) == 1
    queues = query(sim, "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/queue_depth")
    assert [q for q, _ in queues] == ["emails", "jobs"]
    assert (
        query(
            sim,
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/queue_depth",
            b"labelSelector=queue%3Djobs",
        )[0][0]
        == "jobs"
    )
    assert (
        len(
            query(
                sim,
                "/apis/external.metrics.k8s.io/v1beta1/namespaces/batch/cluster_requests_per_second",
            )
        )
        == 1
    )


def test_method_series_sum_to_the_total() -> None:
    sim = demo()
    p = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/http_requests_per_second"
    total = dict(query(sim, p))
    get = dict(query(sim, p, b"metricLabelSelector=method%3DGET"))
    post = dict(query(sim, p, b"metricLabelSelector=method%3DPOST"))
    for name, value in total.items():
        assert abs(float(value) - float(get[name]) - float(post[name])) < 0.002  # type: ignore[arg-type]


def test_every_listed_metric_has_values() -> None:
    sim = demo()
    snapshot = sim.snapshot
    for info in sim.list_metrics():
        assert snapshot.custom[info], info
    assert set(sim.list_external_metrics()) == {"queue_depth", "cluster_requests_per_second"}


async def test_background_ticks_publish_new_snapshots() -> None:
    clock = [NOW]
    sim = SimulatedCluster(DemoSettings(interval=0.05), clock=lambda: clock[0])
    first = sim.snapshot
    async with sim:
        clock[0] += 0.05
        for _ in range(100):
            await asyncio.sleep(0.01)
            if sim.snapshot is not first:
                break
    assert sim.snapshot is not first


def test_the_demo_kubelets_write_with_the_kubelet_writer_escapes_included() -> None:
    rows = [
        demo_kubelets.ContainerUsage('odd"ns', "p\\1", "c\n1", 12.5, 2**20, 1_700_000_000.0),
        demo_kubelets.ContainerUsage('odd"ns', "p\\1", "c2", 0.25, 3 * 2**20, 1_700_000_000.0),
    ]
    body = demo_kubelets.kubelet_exposition(
        rows, node_cpu_seconds=100.0, node_memory=2**30, now=1e9
    )
    assert b'container="c\\n1",namespace="odd\\"ns",pod="p\\\\1"' in body
    scrape = read_usage_rows(body, default_time=0.0)
    assert scrape.layout is None  # escaped labels: read line by line, unescaped
    assert scrape.pods == [('odd"ns', "p\\1")] * 2
    assert scrape.containers == ["c\n1", "c2"]
    assert (scrape.cpu, scrape.times) == ([12.5, 0.25], [1e9, 1e9])
    assert scrape.node is not None
    assert not scrape.scrape_error


def test_processes_started_at_different_moments_of_a_tick_compute_the_same_usage() -> None:
    # `serve --workers N` runs one demo per worker: kubectl top and the HPA's resource metrics
    # must not depend on which worker answers.
    tick_start = NOW // 15 * 15
    first, second = (
        SimulatedCluster(DemoSettings(interval=15), clock=lambda at=at: at)  # type: ignore[misc]
        for at in (tick_start + 0.5, tick_start + 14.0)
    )
    assert sorted(first.usage.pod_usages()) == sorted(second.usage.pod_usages())
    assert len(list(first.usage.pod_usages())) > 10
    nodes = first.usage.nodes()
    assert nodes
    assert [first.usage.node_usage(n) for n in nodes] == [second.usage.node_usage(n) for n in nodes]


def test_the_demo_reads_its_kubelets_as_the_scraper_does_layouts_kept_between_scrapes() -> None:
    sim = demo()
    nodes = sim.usage.nodes()
    assert nodes
    first = {node: sim.usage.known(node) for node in nodes}
    # The production reader's canonical path took every body (a layout, not the line reader).
    assert all(known is not None and known[0] is not None for known in first.values())
    before = sorted(sim.usage.pod_usages())
    sim.scrape(NOW + 15)
    assert {node: sim.usage.known(node) for node in nodes} == first  # same pods: rows reused
    assert sorted(sim.usage.pod_usages()) != before  # and the counters moved
