"""The pod-metrics backend in process, against the fake API server (real list and watch, the
pod proxy) and fake pods' `/metrics` endpoints on real sockets: values of pods and workloads,
rates, absence, failures and their reasons, staleness, the listing, the proxy source and the
conformance kit.

Bodies stamp their samples (10 s apart per scrape) so rates are exact whatever the machine's
load; intervals are short (0.2-0.3 s).
"""

from __future__ import annotations

import asyncio
import gc
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from custom_metrics_server.backends.pod_metrics.backend import PodMetricsBackend
from custom_metrics_server.backends.pod_metrics.settings import PodMetricsSettings
from custom_metrics_server.domain import (
    BackendRequest,
    GroupResource,
    MetricInfo,
    ResourceMapping,
    Sample,
)
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.machinery.label_parser import parse_selector
from custom_metrics_server.testing.kit import check_backend
from tests.fakes.kube_apiserver import FakeKubeApiServer
from tests.fakes.pod_endpoints import PodEndpoints

pytestmark = pytest.mark.integration

NS = "shop"
T0_MS = 1_700_000_000_000
PODS = ResourceMapping(GroupResource("", "pods"), "v1", "Pod", True)
DEPLOYMENTS = ResourceMapping(GroupResource("apps", "deployments"), "v1", "Deployment", True)
STATEFULSETS = ResourceMapping(GroupResource("apps", "statefulsets"), "v1", "StatefulSet", True)


def app_body(rate: int, depth: int = 3) -> Callable[[int], bytes]:
    """`requests_total{code="200"}` growing by `rate`/s and `{code="500"}` by 1/s, stamped 10 s
    apart per scrape; `queue_depth` a gauge; a histogram whose `_count` grows by 2/s."""

    def body(scrape: int) -> bytes:
        stamp = T0_MS + scrape * 10_000
        return (
            "# HELP requests_total Requests.\n# TYPE requests_total counter\n"
            f'requests_total{{code="200"}} {scrape * 10 * rate} {stamp}\n'
            f'requests_total{{code="500"}} {scrape * 10} {stamp}\n'
            f"# TYPE queue_depth gauge\nqueue_depth {depth}\n"
            "# TYPE latency_seconds histogram\n"
            f'latency_seconds_bucket{{le="+Inf"}} {scrape * 20} {stamp}\n'
            f"latency_seconds_sum {scrape * 5} {stamp}\n"
            f"latency_seconds_count {scrape * 20} {stamp}\n"
            'unselected_metric{whatever="x"} 1\n'
        ).encode()

    return body


def pod_object(
    name: str, port: int, owner: tuple[str, str] | None, **labels: str
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": NS, "labels": {"app": "web", **labels}}
    if owner is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "controller": True}
        ]
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": metadata,
        "spec": {
            "containers": [{"name": "app", "ports": [{"name": "metrics", "containerPort": port}]}]
        },
        "status": {"phase": "Running", "podIP": "127.0.0.1"},
    }


def replicaset(name: str, deployment: str) -> dict[str, Any]:
    return {
        "kind": "ReplicaSet",
        "apiVersion": "apps/v1",
        "metadata": {
            "name": name,
            "namespace": NS,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": deployment,
                    "controller": True,
                }
            ],
        },
    }


SETTINGS: dict[str, Any] = {
    "interval": 0.25,
    "timeout": 1,
    "metrics": ["requests_total", "queue_depth", "latency_seconds_count", "latency_seconds_bucket"],
    "scrape": [{"name": "web", "selector": "app=web", "port": "metrics"}],
}


class World:
    """The fake API server and pods, with helpers to add pods."""

    def __init__(self, api: FakeKubeApiServer, pods: PodEndpoints) -> None:
        self.api, self.pods = api, pods

    def add_pod(
        self,
        name: str,
        body: Callable[[int], bytes],
        owner: tuple[str, str] | None = ("ReplicaSet", "web-1"),
        **labels: str,
    ) -> int:
        port = self.pods.add(f"{NS}/{name}", body)
        self.api.apply("pods", pod_object(name, port, owner, **labels))
        return port


@pytest.fixture
def world() -> Iterator[World]:
    with FakeKubeApiServer() as api, PodEndpoints() as pods:
        api.apply("replicasets.apps", replicaset("web-1", "web"))
        yield World(api, pods)


@asynccontextmanager
async def running(world: World, **overrides: Any) -> AsyncIterator[PodMetricsBackend]:
    config = PodMetricsSettings.model_validate({**SETTINGS, **overrides}).to_config()
    backend = PodMetricsBackend(config, KubeClient(world.api.connection()), name="app")
    async with backend:
        yield backend


def request(
    mapping: ResourceMapping, metric: str, *names: str, selector: str = ""
) -> BackendRequest:
    return BackendRequest(
        metric=MetricInfo(mapping.group_resource, True, metric),
        mapping=mapping,
        objects=tuple((NS, name) for name in names),
        metric_selector=parse_selector(selector),
    )


async def until(read: Callable[[], Any], check: Callable[[Any], bool], within: float = 10.0) -> Any:
    deadline = time.monotonic() + within
    while True:
        found = await read()
        if check(found) or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.05)


def by_name(samples: list[Sample]) -> dict[str, float]:
    return {s.described.name: s.value for s in samples}


async def test_pods_and_their_workloads_answer_gauges_and_counter_rates(world: World) -> None:
    world.add_pod("web-1-a", app_body(rate=5))
    world.add_pod("web-1-b", app_body(rate=7, depth=4))
    world.add_pod("db-0", app_body(rate=2, depth=10), owner=("StatefulSet", "db"))
    async with running(world) as backend:
        rates = await until(
            lambda: backend.fetch(request(PODS, "requests_total", "web-1-a", "web-1-b", "db-0")),
            lambda found: len(found) == 3,
        )
        # The sum of a pod's series: code 200 at `rate`/s plus code 500 at 1/s.
        assert by_name(rates) == {"web-1-a": 6.0, "web-1-b": 8.0, "db-0": 3.0}
        assert {s.window for s in rates} == {10}
        # The samples' own stamps: T0 + 10 s per scrape, not the scrape time.
        assert all((s.timestamp - T0_MS / 1000) % 10 == 0 for s in rates)
        assert all(s.timestamp < T0_MS / 1000 + 10_000 for s in rates)
        assert rates[0].labels == {}  # two series summed: no labels
        # metricLabelSelector picks series; one series keeps its labels.
        only_ok = await backend.fetch(
            request(PODS, "requests_total", "web-1-a", selector="code=200")
        )
        assert [(s.value, dict(s.labels)) for s in only_ok] == [(5.0, {"code": "200"})]
        gauges = await backend.fetch(request(PODS, "queue_depth", "web-1-a", "web-1-b"))
        assert by_name(gauges) == {"web-1-a": 3.0, "web-1-b": 4.0}
        assert {s.window for s in gauges} == {None}
        # A histogram's count is a counter (its rate); its buckets are never kept.
        counts = await backend.fetch(request(PODS, "latency_seconds_count", "web-1-a"))
        assert by_name(counts) == {"web-1-a": 2.0}
        assert await backend.fetch(request(PODS, "latency_seconds_bucket", "web-1-a")) == []
        # Workloads: the Deployment through its ReplicaSet, the StatefulSet directly.
        deployment = await until(
            lambda: backend.fetch(request(DEPLOYMENTS, "requests_total", "web")),
            bool,
        )
        assert [(s.described.kind, s.described.api_version, s.value) for s in deployment] == [
            ("Deployment", "apps/v1", 14.0)
        ]
        assert by_name(await backend.fetch(request(STATEFULSETS, "queue_depth", "db"))) == {
            "db": 10.0
        }
        # Absent, never an error: unknown pods and workloads, unselected or missing metrics.
        assert await backend.fetch(request(PODS, "requests_total", "nope")) == []
        assert await backend.fetch(request(DEPLOYMENTS, "requests_total", "nope")) == []
        assert await backend.fetch(request(PODS, "unselected_metric", "web-1-a")) == []
        assert (
            await backend.fetch(request(PODS, "requests_total", "web-1-a", selector="code=404"))
            == []
        )
        # The listing: names seen on targets, per resource that owns them.
        listed = {(str(m.group_resource), m.metric) for m in backend.list_metrics()}
        assert {
            ("pods", "requests_total"),
            ("pods", "queue_depth"),
            ("pods", "latency_seconds_count"),
            ("deployments.apps", "requests_total"),
            ("replicasets.apps", "queue_depth"),
            ("statefulsets.apps", "requests_total"),
        } <= listed
        assert not {m for _, m in listed} & {"unselected_metric", "latency_seconds_bucket"}
        assert backend.list_metrics() is backend.list_metrics()  # answered from memory


async def test_workloads_can_average_their_pods(world: World) -> None:
    world.add_pod("web-1-a", app_body(rate=5, depth=2))
    world.add_pod("web-1-b", app_body(rate=7, depth=5))
    async with running(world, workloadValue="average") as backend:
        found = await until(
            lambda: backend.fetch(request(DEPLOYMENTS, "requests_total", "web")),
            lambda found: found and found[0].value == 7.0,
        )
        assert by_name(found) == {"web": 7.0}  # (6 + 8) / 2
        assert by_name(await backend.fetch(request(DEPLOYMENTS, "queue_depth", "web"))) == {
            "web": 3.5
        }


@pytest.fixture
def frozen_heap() -> Iterator[None]:
    """The suite's heap out of the collector's way: rounds here have a 25 ms margin (a 0.25 s
    interval, scrapes end by 90 % of it), and a full collection of the whole suite's objects
    inside a round can take longer (one overrun seen in CI): the test process's pause, not
    the scraper's scheduling, which is what the test holds to no overrun."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.mark.usefixtures("frozen_heap")
async def test_failures_have_reasons_targets_back_off_and_go_stale(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.add_pod("ok", app_body(rate=1))
    world.add_pod("broken", lambda _: b'requests_total{code="200" oops} 1\n')
    world.add_pod("huge", lambda _: b"queue_depth 1\n" + b"# padding\n" * 200_000)
    world.add_pod("slow", app_body(rate=1))
    world.pods.set_delay(f"{NS}/slow", 5)
    world.add_pod("failing", app_body(rate=1))
    world.pods.set_status(f"{NS}/failing", 500)
    world.add_pod("goes-away", app_body(rate=3))
    async with running(world, maxBodyBytes=100_000, timeout=0.5, staleAfter=1) as backend:
        await until(
            lambda: backend.fetch(request(PODS, "requests_total", "goes-away")),
            bool,
        )
        reasons = await until(
            lambda: asyncio.sleep(0, backend.scraper.stats().failures_by_reason),
            lambda found: {"parse", "too_large", "timeout", "http_500"} <= found.keys(),
        )
        assert {"parse", "too_large", "timeout", "http_500"} <= reasons.keys()
        assert set(backend.scraper.book.failing()) == {
            f"{NS}/{name}:{world.pods.port(f'{NS}/{name}')}/metrics"
            for name in ("broken", "huge", "slow", "failing")
        }
        # Failing targets are retried with backoff: fewer attempts than rounds.
        rounds = backend.scraper.stats().rounds_completed
        assert world.pods.scrapes(f"{NS}/ok") >= rounds - 1
        await asyncio.sleep(1.5)
        rounds = backend.scraper.stats().rounds_completed
        assert backend.scraper.stats().failures_by_reason["http_500"] < rounds - 2
        # A pod that stops answering keeps its values until staleAfter, then they are absent.
        assert await backend.fetch(request(PODS, "requests_total", "goes-away"))
        world.pods.stop(f"{NS}/goes-away")
        assert (
            await until(
                lambda: backend.fetch(request(PODS, "requests_total", "goes-away")),
                lambda found: found == [],
            )
            == []
        )
        assert "unreachable" in backend.scraper.stats().failures_by_reason
        # A failing pod that recovers answers again.
        world.pods.set_status(f"{NS}/failing", 200)
        assert await until(
            lambda: backend.fetch(request(PODS, "requests_total", "failing")),
            bool,
        )
        stats = backend.scraper.stats()
        assert stats.targets == 6
        # The slow target cannot hold its round past the 0.25 s interval: its deadline is cut
        # to fit in the round (without the cut it would run to `timeout`, 0.5 s, and overrun
        # every round that tries it). Read from the deadline applied, not from
        # `rounds_overrun`, which a loaded machine raises by starting a round late.
        deadlines = [float(d) for d in re.findall(r"no answer within ([0-9.]+)s", caplog.text)]
        assert deadlines
        assert max(deadlines) < 0.25, deadlines


async def test_the_pod_proxy_source_reaches_pods_through_the_api_server(world: World) -> None:
    world.add_pod("web-1-a", app_body(rate=4))
    async with running(world, source="proxy") as backend:
        found = await until(
            lambda: backend.fetch(request(PODS, "requests_total", "web-1-a")),
            bool,
        )
        assert by_name(found) == {"web-1-a": 5.0}
    port = world.pods.port(f"{NS}/web-1-a")
    proxied = [r for r in world.api.requests if r.kind == "proxy"]
    assert proxied
    assert {r.path for r in proxied} == {
        f"/api/v1/namespaces/{NS}/pods/web-1-a:{port}/proxy/metrics"
    }
    assert {r.authorization for r in proxied} == {"Bearer fake-token"}


async def test_pods_that_stop_running_or_leave_are_no_longer_targets(world: World) -> None:
    world.add_pod("web-1-a", app_body(rate=4))
    async with running(world) as backend:
        await until(lambda: backend.fetch(request(PODS, "requests_total", "web-1-a")), bool)
        finished = pod_object("web-1-a", world.pods.port(f"{NS}/web-1-a"), None)
        finished["status"]["phase"] = "Succeeded"
        world.api.update("pods", finished)  # leaves the field selector: a DELETED event
        assert (
            await until(
                lambda: asyncio.sleep(0, dict(backend.targets.targets)), lambda found: not found
            )
            == {}
        )
        assert (
            await until(lambda: asyncio.sleep(0, backend.list_metrics()), lambda found: not found)
            == frozenset()
        )


async def test_the_first_round_is_paced_and_new_pods_are_scraped_before_the_next_tick(
    world: World,
) -> None:
    """The kubelet scraper's first-round behaviour (`scraping.rounds`): the first round
    starts when the pods are listed and is paced, not spread over half the interval; a pod
    that starts serving between rounds is scraped at once, not at the next tick (30 s away)."""
    for name in ("web-1-a", "web-1-b", "web-1-c"):
        world.add_pod(name, app_body(rate=4))
    async with running(world, interval=30, timeout=2) as backend:
        started = time.monotonic()
        first = await until(
            lambda: backend.fetch(request(PODS, "queue_depth", "web-1-a", "web-1-b", "web-1-c")),
            lambda found: len(found) == 3,
        )
        assert len(first) == 3
        assert time.monotonic() - started < 5  # spread, the last would start 10 s in
        assert await until(lambda: asyncio.sleep(0, backend.scraper.readiness().ready), bool)
        world.add_pod("web-1-d", app_body(rate=4, depth=9))
        joined = time.monotonic()
        found = await until(lambda: backend.fetch(request(PODS, "queue_depth", "web-1-d")), bool)
        assert by_name(found) == {"web-1-d": 9.0}
        assert time.monotonic() - joined < 5  # at once, not at the next tick 30 s away
        assert world.pods.scrapes(f"{NS}/web-1-a") == 1  # no round since the first
        assert backend.scraper.rounds.counters.rounds_started == 1


async def test_the_backend_passes_the_conformance_kit(world: World) -> None:
    world.add_pod("web-1-a", app_body(rate=4))
    world.add_pod("web-1-b", app_body(rate=4))
    config = PodMetricsSettings.model_validate(SETTINGS).to_config()
    backend = PodMetricsBackend(config, KubeClient(world.api.connection()), name="app")
    report = await check_backend(
        backend,
        objects={
            PODS.group_resource: [(NS, "web-1-a"), (NS, "web-1-b")],
            DEPLOYMENTS.group_resource: [(NS, "web")],
        },
        expect_not_ready_before_start=True,
    )
    assert report.ok
