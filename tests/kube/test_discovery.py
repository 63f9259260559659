"""Live API discovery and the refreshing REST mapper, against the fake API server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from custom_metrics_server.cluster.restmapper import BUILTIN_MAPPINGS
from custom_metrics_server.domain import GroupResource, ResourceMapping
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kube.discovery import (
    METRICS_GROUPS,
    DiscoveryRestMapper,
    discover_groups,
    resources_of,
)
from tests.fakes.kube_apiserver import FakeKubeApiServer, ResourceType

WIDGETS = ResourceType("example.com", "v1", "widgets", "Widget", short_names=("wd",))


@pytest.fixture
def api() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as server:
        yield server


@pytest.fixture
async def client(api: FakeKubeApiServer) -> AsyncIterator[KubeClient]:
    kube = KubeClient(api.connection())
    yield kube
    await kube.aclose()


async def discover(client: KubeClient) -> list[ResourceMapping]:
    """Every resource the cluster serves (core, then each group's preferred version)."""
    return list((await discover_groups(client)).mappings)


def mapping(
    group: str, version: str, resource: str, kind: str, *, namespaced: bool = True, singular: str
) -> ResourceMapping:
    return ResourceMapping(GroupResource(group, resource), version, kind, namespaced, singular)


# ---------------------------------------------------------------------- discover()


async def test_discovery_reads_core_and_each_groups_preferred_version(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    api.register(ResourceType("apps", "v1beta2", "deployments", "Deployment"))
    found = await discover(client)
    by_name = {str(m.group_resource): m for m in found}
    assert by_name["pods"] == mapping("", "v1", "pods", "Pod", singular="pod")
    assert by_name["nodes"] == mapping("", "v1", "nodes", "Node", namespaced=False, singular="node")
    assert by_name["deployments.apps"].version == "v1"
    assert by_name["jobs.batch"] == mapping("batch", "v1", "jobs", "Job", singular="job")
    assert not any("/" in m.group_resource.resource for m in found)  # pods/status, nodes/proxy
    assert [m.group_resource.group for m in found][:3] == ["", "", ""]  # core first
    assert api.count("discovery", "/apis/apps/v1beta2") == 0


async def test_a_preferred_version_other_than_the_first_is_followed(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    api.register(ResourceType("example.com", "v1alpha1", "widgets", "Widget"))
    api.register(ResourceType("example.com", "v2", "widgets", "Widget"), preferred=True)
    [widgets] = [m for m in await discover(client) if m.group_resource.group == "example.com"]
    assert widgets.version == "v2"


async def test_empty_singular_name_falls_back_to_the_lower_cased_kind(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    api.register(ResourceType("example.com", "v1", "gadgets", "GadgetThing", singular=""))
    [gadgets] = [m for m in await discover(client) if m.group_resource.resource == "gadgets"]
    assert gadgets.singular == "gadgetthing"


async def test_groups_that_fail_are_skipped_with_a_warning(
    api: FakeKubeApiServer, client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    api.register(WIDGETS)
    api.fail_discovery("example.com/v1")
    result = await discover_groups(client)
    assert dict(result.failed).keys() == {"example.com/v1"}
    assert "503 ServiceUnavailable" in result.failed["example.com/v1"]
    groups = {m.group_resource.group for m in result.mappings}
    assert "example.com" not in groups
    assert {"", "apps", "batch"} <= groups

    mapper = DiscoveryRestMapper(client)
    with caplog.at_level(logging.WARNING, logger="custom_metrics_server.kube.discovery"):
        assert await mapper.refresh()
        assert await mapper.refresh()
    [warning] = caplog.records  # once per group and error, not once per refresh
    assert "skipping example.com/v1" in warning.getMessage()


async def test_the_metrics_apis_own_groups_are_not_asked(
    api: FakeKubeApiServer, client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    """At start-up the aggregator answers 503 for the groups this server serves until it is
    Available: discovery leaves them out instead of warning about them."""
    api.register(ResourceType("metrics.k8s.io", "v1beta1", "pods", "PodMetrics"))
    api.register(ResourceType("custom.metrics.k8s.io", "v1beta2", "pods", "MetricValueList"))
    api.register(ResourceType("external.metrics.k8s.io", "v1beta1", "x", "ExternalMetricValueList"))
    for group_version in (
        "metrics.k8s.io/v1beta1",
        "custom.metrics.k8s.io/v1beta2",
        "external.metrics.k8s.io/v1beta1",
    ):
        api.fail_discovery(group_version)
    mapper = DiscoveryRestMapper(client)
    with caplog.at_level(logging.DEBUG, logger="custom_metrics_server.kube.discovery"):
        assert await mapper.refresh()
    assert caplog.records == []
    for group in METRICS_GROUPS:
        assert api.count("discovery", f"/apis/{group}/v1beta1") == 0
        assert api.count("discovery", f"/apis/{group}/v1beta2") == 0
    groups = {m.group_resource.group for m in mapper.mapper.mappings}
    assert not groups & METRICS_GROUPS
    assert {"", "apps", "batch"} <= groups


async def test_discovery_fails_when_the_group_list_cannot_be_read(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    api.fail_next(kind="discovery", path="/apis", code=500)
    with pytest.raises(Exception, match="500"):
        await discover(client)


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        pytest.param({}, [], id="no-resources"),
        pytest.param({"resources": "nope"}, [], id="not-a-list"),
        pytest.param({"resources": [{"name": "a/b", "kind": "A"}]}, [], id="subresource"),
        pytest.param({"resources": [{"name": "a"}]}, [], id="no-kind"),
        pytest.param(
            {"resources": [{"name": "as", "kind": "A", "singularName": None}]},
            [mapping("g", "v1", "as", "A", namespaced=False, singular="a")],
            id="null-singular",
        ),
    ],
)
def test_resource_lists_are_read_defensively(
    document: Any, expected: list[ResourceMapping]
) -> None:
    assert resources_of(document, group="g", version="v1") == expected


# ---------------------------------------------------------------------- DiscoveryRestMapper


async def test_the_builtin_table_answers_until_the_first_discovery(client: KubeClient) -> None:
    mapper = DiscoveryRestMapper(client)
    assert mapper.mapping("deployments.apps") in BUILTIN_MAPPINGS
    assert not mapper.readiness().ready
    assert DiscoveryRestMapper(client, seed=()).mapping("pods") is None


async def test_a_crd_created_at_runtime_resolves_after_a_refresh_on_miss(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    mapper = DiscoveryRestMapper(client, min_refresh_interval=0.0)
    assert await mapper.refresh()
    assert mapper.mapping("widgets.example.com") is None
    api.register(WIDGETS)
    assert mapper.mapping("widgets.example.com") is None  # sync lookups never do I/O
    found = await mapper.resolve("widgets.example.com")
    assert found == mapping("example.com", "v1", "widgets", "Widget", singular="widget")
    assert mapper.mapping("widget.example") == found  # singular, group prefix
    assert mapper.stats.miss_refreshes == 1


async def test_a_removed_crd_stops_resolving_after_a_refresh(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    api.register(WIDGETS)
    mapper = DiscoveryRestMapper(client)
    await mapper.refresh()
    assert mapper.mapping("widgets.example.com") is not None
    api.unregister("widgets.example.com")
    await mapper.refresh()
    assert mapper.mapping("widgets.example.com") is None


async def test_misses_refresh_at_most_once_per_interval(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    now = [100.0]
    mapper = DiscoveryRestMapper(client, min_refresh_interval=5.0, clock=lambda: now[0])
    await mapper.refresh()
    api.reset_counts()
    assert await mapper.resolve("nothings.example.com") is None
    assert await mapper.resolve("nothings.example.com") is None
    assert api.count("discovery", "/apis") == 0  # the start-up refresh was 0 s ago
    now[0] += 5.0
    api.register(WIDGETS)
    assert await mapper.resolve("widgets.example.com") is not None
    assert await mapper.resolve("nothings.example.com") is None
    assert api.count("discovery", "/apis") == 1


async def test_concurrent_misses_share_one_refresh(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    mapper = DiscoveryRestMapper(client, min_refresh_interval=0.0)
    await mapper.refresh()
    api.register(WIDGETS)
    api.reset_counts()
    answers = await asyncio.gather(*(mapper.resolve("widgets.example.com") for _ in range(20)))
    assert len(set(answers)) == 1
    assert answers[0] is not None
    assert api.count("discovery", "/apis") == 1


async def test_a_miss_that_joins_an_older_refresh_refreshes_once_more(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    """A discovery already under way when a CRD appears may not see it: the miss that joined
    it refreshes once more rather than answering 'unknown' until the next interval."""
    mapper = DiscoveryRestMapper(client, min_refresh_interval=60.0)
    await mapper.refresh()
    api.reset_counts()
    api.discovery_delay = 0.3
    running = asyncio.ensure_future(mapper.refresh())  # e.g. the periodic refresh
    await api_sees_discovery(api)
    api.register(WIDGETS)  # after that refresh's /apis was read, before it ends
    api.discovery_delay = 0.0
    api.reset_counts()
    found = await mapper.resolve("widgets.example.com")
    await running
    assert found is not None
    assert found.kind == "Widget"
    assert api.count("discovery", "/apis") == 1  # the one fresh discovery after the miss


async def test_a_miss_just_after_a_refresh_ended_starts_a_new_one(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    """The moment a refresh has published its mapping (`discovered`) but its future's done
    callback has not run yet: a miss then must not join that finished refresh (awaiting a done
    future does not yield, so it would join it twice and answer 'unknown')."""
    mapper = DiscoveryRestMapper(client, min_refresh_interval=0.0)
    running = asyncio.ensure_future(mapper.refresh())
    for _ in range(100_000):  # loop turns, one at a time: the window is one turn wide
        if mapper.discovered:
            break
        await asyncio.sleep(0)
    assert mapper._inflight is not None
    finished = mapper._inflight.done()
    api.register(WIDGETS)
    found = await mapper.resolve("widgets.example.com")
    await running
    assert found is not None, f"the refresh had finished: {finished}"
    assert found.kind == "Widget"


async def api_sees_discovery(api: FakeKubeApiServer) -> None:
    """Until the fake has received the /apis request of a discovery under way."""
    for _ in range(200):
        if api.count("discovery", "/apis"):
            return
        await asyncio.sleep(0.005)
    raise AssertionError("no discovery request arrived")


async def test_a_cancelled_caller_does_not_cancel_the_shared_refresh(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    api.register(WIDGETS)
    mapper = DiscoveryRestMapper(client, seed=())
    impatient = asyncio.create_task(mapper.resolve("widgets.example.com"))
    await asyncio.sleep(0)
    impatient.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await impatient
    assert await mapper.resolve("widgets.example.com") is not None
    assert mapper.stats.refreshes == 1


async def test_ambiguous_names_resolve_to_nothing(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    api.register(ResourceType("foo.example.com", "v1", "widgets", "Widget"))
    api.register(ResourceType("foo.example.org", "v1", "widgets", "Widget"))
    mapper = DiscoveryRestMapper(client, min_refresh_interval=0.0)
    assert await mapper.resolve("widgets.foo") is None
    assert (await mapper.resolve("widgets.foo.example.org")) == mapping(
        "foo.example.org", "v1", "widgets", "Widget", singular="widget"
    )


async def test_a_failing_group_keeps_the_mappings_it_had(
    api: FakeKubeApiServer, client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    mapper = DiscoveryRestMapper(client)
    await mapper.refresh()
    api.fail_discovery("batch/v1")
    with caplog.at_level(logging.INFO, logger="custom_metrics_server.kube.discovery"):
        assert await mapper.refresh()
        assert mapper.mapping("jobs.batch") is not None
        api.heal_discovery()
        assert await mapper.refresh()
    assert mapper.mapping("jobs.batch") is not None
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]


async def test_a_group_failing_at_the_first_discovery_is_not_mapped(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    api.fail_discovery("batch/v1")
    mapper = DiscoveryRestMapper(client)
    assert await mapper.refresh()
    assert mapper.mapping("jobs.batch") is None
    assert mapper.mapping("pods") is not None


async def test_readiness_follows_the_first_successful_discovery(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    api.fail_next(kind="discovery", path="/api/v1", code=503, reason="ServiceUnavailable")
    mapper = DiscoveryRestMapper(client)
    assert mapper.readiness().reason == "discovery: waiting for the first API discovery"
    assert not await mapper.refresh()
    failing = mapper.readiness()
    assert not failing.ready
    assert "503 ServiceUnavailable" in failing.reason
    assert mapper.mapping("pods") is not None  # still the seed
    assert await mapper.refresh()
    assert mapper.readiness().ready
    api.stop()
    assert not await mapper.refresh()
    assert mapper.readiness().ready  # a later failure keeps the last mapping
    assert mapper.stats.failures == 2


async def test_run_refreshes_periodically_and_retries_failures_sooner(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    sleeps: list[float] = []
    enough = asyncio.Event()

    async def sleep(delay: float) -> None:
        sleeps.append(delay)
        if len(sleeps) >= 5:
            enough.set()
        await asyncio.sleep(0)

    api.fail_next(kind="discovery", path="/api/v1", count=3)
    mapper = DiscoveryRestMapper(
        client, interval=600.0, retry_initial=1.0, retry_max=3.0, sleep=sleep
    )
    task = asyncio.create_task(mapper.run())
    try:
        await asyncio.wait_for(enough.wait(), 5)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert sleeps[:5] == [1.0, 2.0, 3.0, 600.0, 600.0]
    assert mapper.readiness().ready
