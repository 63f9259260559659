"""The `http` source plugged in (backends/definitions/http_source.py): its subscriptions to the
shared watches of the definition's namespace, of which it keeps its Service and its slices
only, the value read from a real loopback HTTP server that the Service's EndpointSlices (served
by the fake API server, watched through a real `WatchGroup`) name as ready, a not-ready
endpoint never connected to, and every failure the source's error."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from custom_metrics_server.backends.definitions.http_source import (
    HttpSettings,
    HttpSource,
    make_http,
)
from custom_metrics_server.backends.definitions.source import SourceError, SourceTools
from custom_metrics_server.backends.definitions.spec import Refused, parse_definition
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kube.config import Connection
from custom_metrics_server.kube.shared_watches import WatchGroup
from tests.backends.definitions.test_http_json import (
    HANDLERS,
    Server,
    endpoint_slice,
    ready,
    service,
)
from tests.backends.definitions.test_spec import definition
from tests.fakes.kube_apiserver import DEFAULT_RESOURCES, FakeKubeApiServer, ResourceType

Obj = dict[str, Any]


def spec(**http: Any) -> Obj:
    fields = {
        "service": "scheduler",
        "port": "http",
        "path": "/stats?format=json",
        "valuePath": "queues.0.pending",
        **http,
    }
    return {
        "metricName": "jobs_pending",
        "servedAs": {"type": "External"},
        "source": {"type": "HTTP", "http": fields},
        "interval": "30s",
    }


SERVICES = "services"
SLICES = "endpointslices.discovery.k8s.io"


def tools(settings: HttpSettings | None = None, group: WatchGroup | None = None) -> SourceTools:
    client = KubeClient(Connection(host="https://127.0.0.1:1"))
    return SourceTools(
        client=client,
        external_value=lambda *_: None,
        settings={"http": settings or HttpSettings(deadline=5.0, allow_loopback=True)},
        watches=group or WatchGroup(client),
    )


@pytest.fixture
def api() -> Iterator[FakeKubeApiServer]:
    resources = (
        *DEFAULT_RESOURCES,
        ResourceType("", "v1", "services", "Service"),
        ResourceType("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice"),
    )
    with FakeKubeApiServer(resources) as server:
        yield server


@pytest.fixture
async def group(api: FakeKubeApiServer) -> AsyncIterator[WatchGroup]:
    client = KubeClient(api.connection())
    made = WatchGroup(client)
    yield made
    await made.aclose()
    await client.aclose()


async def eventually(check: Callable[[], bool], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "not reached"
        await asyncio.sleep(0.005)


def replace(api: FakeKubeApiServer, resource: str, objects: list[Obj]) -> None:
    """Make `objects` the namespace's whole collection at the API server."""
    for namespace, name in list(api.objects(resource)):
        api.delete(resource, name, namespace=namespace)
    for obj in objects:
        api.add(resource, obj)


@pytest.fixture
async def servers() -> AsyncIterator[tuple[Server, Server]]:
    """The ready endpoint, and one the slices name as not ready."""
    ready_one, not_ready = Server(HANDLERS), Server(HANDLERS)
    await ready_one.start()
    await not_ready.start()
    yield ready_one, not_ready
    for item in (ready_one, not_ready):
        assert item.server is not None
        item.server.close()
        await item.server.wait_closed()


def slices(ready_one: Server, not_ready: Server) -> list[Obj]:
    made = [
        endpoint_slice([ready("127.0.0.1")], ports=[{"name": "http", "port": ready_one.port}]),
        endpoint_slice(
            [ready("127.0.0.1", ready=False)], ports=[{"name": "http", "port": not_ready.port}]
        ),
    ]
    made[1]["metadata"]["name"] = "scheduler-fghij"
    return made


def test_the_watches_are_the_namespaces_and_the_source_keeps_its_service_only() -> None:
    source = make_http(parse_definition(definition(spec())), tools())
    assert isinstance(source, HttpSource)
    assert source.watches.paths == [
        ("/api/v1/namespaces/shop/services", ""),
        ("/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices", ""),
    ]
    assert source.targets() == 1
    other = service()
    other["metadata"]["name"] = "billing"
    for sink, objects in (
        (source.services, [service(), other]),
        (source.slices, [endpoint_slice([]), endpoint_slice([], name="billing")]),
    ):
        sink.list_started()
        for obj in objects:
            sink.listed(obj)
        sink.list_finished()
    assert list(source.services.by_name) == ["scheduler"]
    assert list(source.slices.by_name) == ["scheduler-abcde"]
    # A slice relabelled to another Service leaves.
    moved = endpoint_slice([])
    moved["metadata"]["labels"]["kubernetes.io/service-name"] = "billing"
    source.slices.event("MODIFIED", moved)
    assert list(source.slices.by_name) == []


async def test_the_value_comes_from_the_ready_endpoint_only(
    servers: tuple[Server, Server], api: FakeKubeApiServer, group: WatchGroup
) -> None:
    ready_one, not_ready = servers
    replace(api, SERVICES, [service()])
    replace(api, SLICES, slices(ready_one, not_ready))
    source = make_http(parse_definition(definition(spec())), tools(group=group))
    async with source:
        for _ in range(3):
            await source.refresh()
            assert [v.value for v in source.values(source.clock())] == [42.0]
    assert ready_one.connections == 3
    assert not_ready.connections == 0
    head = ready_one.heads[0]
    assert head.startswith("GET /stats?format=json HTTP/1.1\r\n")
    assert f"Host: scheduler.shop.svc:{ready_one.port}\r\n" in head
    assert "authorization" not in head.lower()


async def test_failures_are_the_sources_errors(
    servers: tuple[Server, Server], api: FakeKubeApiServer, group: WatchGroup
) -> None:
    ready_one, not_ready = servers
    source = make_http(parse_definition(definition(spec(path="/moved"))), tools(group=group))
    with pytest.raises(SourceError, match="not listed yet"):  # not entered: nothing watched
        await source.refresh()
    replace(api, SLICES, slices(ready_one, not_ready))
    async with source:
        with pytest.raises(SourceError, match="no Service scheduler in namespace shop"):
            await source.refresh()
        replace(api, SERVICES, [service()])
        await eventually(lambda: "scheduler" in source.services.by_name)
        with pytest.raises(SourceError, match="redirects are not followed"):
            await source.refresh()
        replace(api, SLICES, slices(ready_one, not_ready)[1:])
        await eventually(lambda: len(source.slices.by_name) == 1)
        with pytest.raises(SourceError, match="no ready endpoint at port 'http'"):
            await source.refresh()
        assert source.values(source.clock()) == []
    # Loopback endpoints are skipped unless the platform allows them (a single-host test).
    replace(api, SLICES, slices(ready_one, not_ready))
    strict = make_http(parse_definition(definition(spec())), tools(HttpSettings(), group))
    async with strict:
        with pytest.raises(SourceError, match="no ready endpoint"):
            await strict.refresh()
    assert not_ready.connections == 0


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("port", True, "InvalidPort"),
        ("path", "stats", "InvalidPath"),
        ("valuePath", "", "InvalidSpec"),
    ],
)
def test_the_maker_refuses_a_malformed_spec(field: str, value: Any, reason: str) -> None:
    with pytest.raises(Refused) as refused:
        make_http(parse_definition(definition(spec(**{field: value}))), tools())
    assert refused.value.reason == reason
