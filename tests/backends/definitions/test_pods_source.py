"""The pods source's values over the pod-metrics parts: a pod's series summed, the definition's
type (gauge or counter) only, the namespace's pods only, and a workload's pods marked for Object
serving. The watch and the scrapes are fed by hand here (the control-plane tier runs them for
real: tests/controlplane/test_metric_definitions_serving.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from custom_metrics_server.backends.definitions.pods_source import make_pods
from custom_metrics_server.backends.definitions.source import SourceTools
from custom_metrics_server.backends.definitions.spec import parse_definition
from custom_metrics_server.backends.definitions.watched import watch_group
from custom_metrics_server.backends.pod_metrics.exposition import Kept
from custom_metrics_server.domain import GroupResource
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kube.config import Connection
from custom_metrics_server.kube.shared_watches import WatchGroup
from tests.backends.definitions.test_spec import definition
from tests.fakes.kube_apiserver import FakeKubeApiServer

NOW = 1_765_000_000.0
REPLICASETS = GroupResource("apps", "replicasets")


def pod(namespace: str, name: str, *, owner: str | None = None, port: int = 9090) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {"app": "web"}}
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner, "controller": True}
        ]
    return {
        "metadata": meta,
        "spec": {
            "containers": [{"name": "main", "ports": [{"name": "metrics", "containerPort": port}]}]
        },
        "status": {"phase": "Running", "podIP": "10.0.0.1"},
    }


def source(served: dict[str, Any], kind: str = "gauge") -> Any:
    spec = {
        "metricName": "inflight",
        "servedAs": served,
        "source": {
            "type": "Pods",
            "pods": {
                "selector": {"matchLabels": {"app": "web"}},
                "port": "metrics",
                "metric": "inflight",
                "type": kind,
            },
        },
    }
    client = KubeClient(Connection(host="https://127.0.0.1:1"))
    tools = SourceTools(
        client=client,
        external_value=lambda namespace, metric, now: None,
        watches=WatchGroup(client),
    )
    return make_pods(parse_definition(definition(spec, namespace="a")), tools)


def scrape(made: Any, name: str, *samples: tuple[dict[str, str], float, bool], at: float) -> None:
    (target,) = made.pod_targets.pod_targets(("a", name))
    made.store.apply(
        target.name,
        [
            Kept("inflight", tuple(sorted(labels.items())), value, None, counter)
            for labels, value, counter in samples
        ],
        at,
    )


def test_a_pods_series_are_summed_and_only_the_definitions_type_serves() -> None:
    made = source({"type": "Pods"})
    made.pod_targets.list_started()
    made.pod_targets.listed(pod("a", "web-1"))
    made.pod_targets.listed(pod("a", "web-2"))
    made.pod_targets.list_finished()
    assert made.targets() == 2
    scrape(made, "web-1", ({"path": "/x"}, 2.0, False), ({"path": "/y"}, 3.0, False), at=NOW)
    scrape(made, "web-2", ({}, 100.0, True), at=NOW)  # a counter: not this gauge definition's
    values = made.values(NOW)
    assert [(v.pod, v.value, v.labels) for v in values] == [("web-1", 5.0, {"pod": "web-1"})]


def test_a_counter_definition_serves_rates_over_two_scrapes() -> None:
    made = source({"type": "Pods"}, kind="counter")
    made.pod_targets.list_started()
    made.pod_targets.listed(pod("a", "web-1"))
    made.pod_targets.list_finished()
    scrape(made, "web-1", ({}, 100.0, True), at=NOW - 10)
    assert made.values(NOW - 10) == []  # one observation: no rate yet
    scrape(made, "web-1", ({}, 150.0, True), at=NOW)
    (value,) = made.values(NOW)
    assert (value.value, value.window) == (5.0, 10.0)


def test_another_namespaces_pod_is_never_a_target() -> None:
    made = source({"type": "Pods"})
    made.pod_targets.list_started()
    made.pod_targets.listed(pod("b", "web-b"))  # as a misbehaving watch might hand it
    made.pod_targets.list_finished()
    assert made.targets() == 0
    assert made.values(NOW) == []


def test_an_object_definition_marks_its_workloads_pods() -> None:
    served = {
        "type": "Object",
        "describedObject": {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs"},
    }
    made = source(served)
    made.pod_targets.list_started()
    made.pod_targets.listed(pod("a", "web-1", owner="web-rs"))
    made.pod_targets.listed(pod("a", "stray"))
    made.pod_targets.list_finished()
    scrape(made, "web-1", ({}, 2.0, False), at=NOW)
    scrape(made, "stray", ({}, 7.0, False), at=NOW)
    owned = {v.pod: v.workloads for v in made.values(NOW)}
    assert owned == {"web-1": frozenset({(REPLICASETS, "web-rs")}), "stray": frozenset()}


async def test_definitions_in_two_namespaces_share_the_group_but_never_each_others_pods() -> None:
    """One `WatchGroup` for both (as the server has), real watches of the fake API server:
    each definition's targets are its namespace's pods only, also after a new pod in each."""
    with FakeKubeApiServer() as api:
        api.apply_many("pods", [pod("a", "web-a"), pod("b", "web-b")])
        client = KubeClient(api.connection())
        group = WatchGroup(client)
        tools = SourceTools(client=client, external_value=lambda *_: None, watches=group)
        spec = {
            "metricName": "inflight",
            "servedAs": {"type": "Pods"},
            "source": {
                "type": "Pods",
                "pods": {"selector": {}, "port": "metrics", "metric": "inflight"},
            },
        }
        made = {
            namespace: make_pods(parse_definition(definition(spec, namespace=namespace)), tools)
            for namespace in ("a", "b")
        }
        try:
            async with made["a"], made["b"]:
                for source in made.values():
                    assert await source.watches.wait_synced(10) is None
                api.add("pods", pod("b", "web-b2"))
                api.add("pods", pod("a", "web-a2"))
                deadline = time.monotonic() + 10
                while any(source.targets() < 2 for source in made.values()):
                    assert time.monotonic() < deadline, "the new pods did not arrive"
                    await asyncio.sleep(0.01)
                assert group.paths() == [
                    ("/api/v1/namespaces/a/pods", 1),
                    ("/api/v1/namespaces/b/pods", 1),
                ]
        finally:
            await group.aclose()
            await client.aclose()
    assert set(made["a"].pod_targets.pods()) == {("a", "web-a"), ("a", "web-a2")}
    assert set(made["b"].pod_targets.pods()) == {("b", "web-b"), ("b", "web-b2")}


async def test_the_backends_watch_group_has_a_pool_of_its_own() -> None:
    """Watches hold their connections (HTTP/1.1): never the backend client's."""
    client = KubeClient(Connection(host="https://127.0.0.1:1"))
    group = watch_group(client, name="mdef-watches")
    assert group.client is not client
    assert isinstance(group.client, KubeClient)
    assert group.client.connection is client.connection
    await group.aclose()
    await client.aclose()
