"""The `http` source plugged in (backends/definitions/http_source.py): its watches confined to
the definition's namespace and Service, the value read from a real loopback HTTP server that
the Service's EndpointSlices name as ready, a not-ready endpoint never connected to, and every
failure the source's error."""

from __future__ import annotations

from collections.abc import AsyncIterator
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
from tests.backends.definitions.test_http_json import (
    HANDLERS,
    Server,
    endpoint_slice,
    ready,
    service,
)
from tests.backends.definitions.test_spec import definition

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


def tools(settings: HttpSettings | None = None) -> SourceTools:
    return SourceTools(
        client=KubeClient(Connection(host="https://127.0.0.1:1")),
        external_value=lambda *_: None,
        settings={"http": settings or HttpSettings(deadline=5.0, allow_loopback=True)},
    )


def feed(sink: Any, objects: list[Obj]) -> None:
    """What the watch's list delivers."""
    sink.list_started()
    for obj in objects:
        sink.listed(obj)
    sink.list_finished()


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


def test_the_watches_are_of_the_namespace_and_the_service_only() -> None:
    source = make_http(parse_definition(definition(spec())), tools())
    assert isinstance(source, HttpSource)
    assert [(w.path, dict(w.selectors)) for w in source.watches] == [
        ("/api/v1/namespaces/shop/services", {"fieldSelector": "metadata.name=scheduler"}),
        (
            "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices",
            {"labelSelector": "kubernetes.io/service-name=scheduler"},
        ),
    ]
    assert source.targets() == 1


async def test_the_value_comes_from_the_ready_endpoint_only(
    servers: tuple[Server, Server],
) -> None:
    ready_one, not_ready = servers
    source = make_http(parse_definition(definition(spec())), tools())
    feed(source.services, [service()])
    feed(source.slices, slices(ready_one, not_ready))
    for _ in range(3):
        await source.refresh()
        assert [v.value for v in source.values(source.clock())] == [42.0]
    assert ready_one.connections == 3
    assert not_ready.connections == 0
    head = ready_one.heads[0]
    assert head.startswith("GET /stats?format=json HTTP/1.1\r\n")
    assert f"Host: scheduler.shop.svc:{ready_one.port}\r\n" in head
    assert "authorization" not in head.lower()


async def test_failures_are_the_sources_errors(servers: tuple[Server, Server]) -> None:
    ready_one, not_ready = servers
    source = make_http(parse_definition(definition(spec(path="/moved"))), tools())
    feed(source.services, [])
    feed(source.slices, slices(ready_one, not_ready))
    with pytest.raises(SourceError, match="no Service scheduler in namespace shop"):
        await source.refresh()
    feed(source.services, [service()])
    with pytest.raises(SourceError, match="redirects are not followed"):
        await source.refresh()
    feed(source.slices, slices(ready_one, not_ready)[1:])
    with pytest.raises(SourceError, match="no ready endpoint at port 'http'"):
        await source.refresh()
    assert source.values(source.clock()) == []
    # Loopback endpoints are skipped unless the platform allows them (a single-host test).
    strict = make_http(parse_definition(definition(spec())), tools(HttpSettings()))
    feed(strict.services, [service()])
    feed(strict.slices, slices(ready_one, not_ready))
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
