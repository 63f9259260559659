"""Request semantics owned by the query layer: resolution, ownership, scope, not-found policy,
backend readiness and deadlines."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from types import TracebackType
from typing import Self

import pytest

from custom_metrics_server.api.grammar import parse, parse_query
from custom_metrics_server.backends.memory import MemoryBackend, SnapshotBuilder
from custom_metrics_server.cluster.in_memory import InMemoryCluster
from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalSample,
    GroupResource,
    MetricInfo,
    MetricRequest,
    Readiness,
    Sample,
)
from custom_metrics_server.errors import BackendTimeout, BackendUnavailable, NotFound
from custom_metrics_server.query.engine import QueryEngine

P = "/apis/custom.metrics.k8s.io/v1beta2"


def request(path: str, query: bytes = b"") -> MetricRequest:
    parsed = parse(P + path, parse_query(query))
    assert isinstance(parsed, MetricRequest)
    return parsed


@pytest.fixture
def world() -> tuple[InMemoryCluster, MemoryBackend]:
    cluster = InMemoryCluster()
    for name, app in [("a", "web"), ("b", "web"), ("c", "db")]:
        cluster.add("pods", name, namespace="ns", labels={"app": app})
    cluster.add("pods", "a", namespace="other", labels={"app": "web"})
    cluster.add("nodes", "n1", labels={})
    builder = SnapshotBuilder(cluster, timestamp=1000.0)
    rps = builder.declare("pods", "rps", window=60)
    for key, value in [(("ns", "a"), 1), (("ns", "b"), 2), (("other", "a"), 5)]:
        builder.add(rps, key, value, {"verb": "GET"})
    builder.add(rps, ("ns", "a"), 10, {"verb": "POST"})
    load = builder.declare("nodes", "load")
    builder.add(load, ("", "n1"), 3)
    return cluster, MemoryBackend(snapshot=builder.build())


def engine(world: tuple[InMemoryCluster, MemoryBackend], **kwargs: object) -> QueryEngine:
    cluster, backend = world
    return QueryEngine(cluster=cluster, backends=[backend], **kwargs)  # type: ignore[arg-type]


def values(samples: Sequence[Sample]) -> list[tuple[str, str, object]]:
    return [(s.described.namespace, s.described.name, s.value) for s in samples]


async def test_wildcard_resolves_selector_in_namespace(
    world: tuple[InMemoryCluster, MemoryBackend],
) -> None:
    samples = await engine(world).custom(
        request("/namespaces/ns/pods/*/rps", b"labelSelector=app%3Dweb")
    )
    assert values(samples) == [("ns", "a", 11), ("ns", "b", 2)]


async def test_cluster_url_on_namespaced_resource_spans_namespaces(
    world: tuple[InMemoryCluster, MemoryBackend],
) -> None:
    samples = await engine(world).custom(request("/pods/*/rps"))
    assert values(samples) == [("ns", "a", 11), ("ns", "b", 2), ("other", "a", 5)]


async def test_metric_selector_picks_series(world: tuple[InMemoryCluster, MemoryBackend]) -> None:
    samples = await engine(world).custom(
        request("/namespaces/ns/pods/*/rps", b"metricLabelSelector=verb%3DPOST")
    )
    assert values(samples) == [("ns", "a", 10)]


async def test_namespaced_url_on_cluster_scoped_resource_ignores_the_namespace(
    world: tuple[InMemoryCluster, MemoryBackend],
) -> None:
    samples = await engine(world).custom(request("/namespaces/ns/nodes/n1/load"))
    assert values(samples) == [("", "n1", 3)]


async def test_wildcard_without_matches_is_empty_not_an_error(
    world: tuple[InMemoryCluster, MemoryBackend],
) -> None:
    assert (
        await engine(world).custom(
            request("/namespaces/ns/pods/*/rps", b"labelSelector=app%3Dnone")
        )
        == ()
    )
    assert (
        await engine(world).custom(request("/namespaces/ns/pods/*/rps", b"labelSelector=app%3Ddb"))
        == []
    )


@pytest.mark.parametrize(
    ("path", "query", "message"),
    [
        ("/namespaces/ns/pods/c/rps", b"", "the server could not find the metric rps for pods c"),
        ("/namespaces/ns/pods/zz/rps", b"", "the server could not find the metric rps for pods zz"),
        (
            "/namespaces/ns/pods/b/rps",
            b"metricLabelSelector=verb%3DPOST",
            "the server could not find the metric rps for pods b with selector verb=POST",
        ),
        ("/namespaces/ns/pods/*/nope", b"", "the server could not find the metric nope for pods"),
        (
            "/namespaces/ns/widgets/*/rps",
            b"",
            "the server could not find the metric rps for widgets",
        ),
        (
            "/namespaces/ns/widgets/w/rps",
            b"",
            "the server could not find the metric rps for widgets w",
        ),
        ("/pods/a/rps", b"", "the server could not find the metric rps for pods a"),
    ],
)
async def test_not_found_wordings(
    world: tuple[InMemoryCluster, MemoryBackend], path: str, query: bytes, message: str
) -> None:
    with pytest.raises(NotFound) as caught:
        await engine(world).custom(request(path, query))
    assert caught.value.message == message


class StubbornBackend:
    """A backend that owns one metric and is not ready, or never answers."""

    def __init__(self, *, ready: bool, delay: float = 0.0) -> None:
        self.name = "stubborn"
        self._ready = ready
        self._delay = delay
        self.cancelled = False

    def list_metrics(self) -> Collection[MetricInfo]:
        return {MetricInfo(GroupResource("", "pods"), True, "slow")}

    def list_external_metrics(self) -> Collection[str]:
        return {"slow"}

    async def fetch(self, request: BackendRequest) -> Sequence[Sample]:
        try:
            await asyncio.sleep(self._delay)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return []

    async def fetch_external(self, request: ExternalBackendRequest) -> Sequence[ExternalSample]:
        await asyncio.sleep(self._delay)
        return []

    def ready(self) -> Readiness:
        return Readiness(ready=self._ready, reason="waiting for the first series listing")

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


async def test_unready_backend_is_503_with_its_reason_and_others_still_answer(
    world: tuple[InMemoryCluster, MemoryBackend],
) -> None:
    cluster, memory = world
    query = QueryEngine(cluster=cluster, backends=[memory, StubbornBackend(ready=False)])
    with pytest.raises(BackendUnavailable) as caught:
        await query.custom(request("/namespaces/ns/pods/*/slow"))
    assert (
        caught.value.message
        == "the stubborn backend is not ready: waiting for the first series listing"
    )
    assert values(await query.custom(request("/namespaces/ns/pods/b/rps"))) == [("ns", "b", 2)]
    assert query.readiness()["backend-stubborn"].ready is False


async def test_slow_backend_is_cancelled_at_the_deadline(
    world: tuple[InMemoryCluster, MemoryBackend],
) -> None:
    cluster, _ = world
    slow = StubbornBackend(ready=True, delay=30)
    observed: list[tuple[str, str]] = []
    query = QueryEngine(
        cluster=cluster,
        backends=[slow],
        backend_timeout=0.05,
        observe=lambda b, o, s: observed.append((b, o)),
    )
    with pytest.raises(BackendTimeout, match="did not answer within 0.05s"):
        await query.custom(request("/namespaces/ns/pods/*/slow"))
    assert slow.cancelled
    assert observed == [("stubborn", "timeout")]


async def test_first_backend_listing_a_metric_owns_it(
    world: tuple[InMemoryCluster, MemoryBackend],
) -> None:
    cluster, memory = world
    second = MemoryBackend(name="second", snapshot=memory.snapshot)
    query = QueryEngine(cluster=cluster, backends=[StubbornBackend(ready=True), second])
    assert values(await query.custom(request("/namespaces/ns/pods/b/rps"))) == [("ns", "b", 2)]
    assert len(query.custom_metrics()) == 3
