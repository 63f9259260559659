"""The /apis hot path as a whole: error masking, pretty printing, headers, discovery."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Collection, Sequence
from types import TracebackType
from typing import Any, Self

import httpx
import orjson
import pytest

from custom_metrics_server.cluster.in_memory import InMemoryCluster
from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalSample,
    GroupResource,
    MetricInfo,
    Readiness,
    Sample,
)
from custom_metrics_server.server.app import create_app

P = "/apis/custom.metrics.k8s.io/v1beta2"


class BuggyBackend:
    """Raises a plain exception from fetch: a bug, not a Status."""

    name = "buggy"

    def __init__(self) -> None:
        self.calls = 0

    def list_metrics(self) -> Collection[MetricInfo]:
        return {MetricInfo(GroupResource("", "pods"), True, "boom")}

    def list_external_metrics(self) -> Collection[str]:
        return {"boom"}

    async def fetch(self, request: BackendRequest) -> Sequence[Sample]:
        self.calls += 1
        raise RuntimeError("secret internal detail")

    async def fetch_external(self, request: ExternalBackendRequest) -> Sequence[ExternalSample]:
        raise KeyError("another secret")

    def ready(self) -> Readiness:
        return Readiness(ready=True)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


@pytest.fixture
async def buggy_client() -> AsyncIterator[httpx.AsyncClient]:
    cluster = InMemoryCluster()
    cluster.add("pods", "p", namespace="ns")
    app = create_app(cluster=cluster, backends=[BuggyBackend()])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://testserver") as client:
        yield client


async def test_backend_bug_is_a_masked_500_naming_the_backend_with_a_logged_request_id(
    buggy_client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    for path in (
        P + "/namespaces/ns/pods/*/boom",
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/boom",
    ):
        response = await buggy_client.get(path)
        assert response.status_code == 500
        body = response.json()
        assert (body["reason"], body["message"]) == (
            "InternalError",
            'an error on the server ("backend buggy failed") has prevented the request from '
            "succeeding",
        )
        assert "secret" not in response.text
        assert "Traceback" not in response.text
        request_id = response.headers["audit-id"]
        assert request_id in caplog.text
    assert "secret internal detail" in caplog.text  # the stack is in the log, not on the wire
    healthy = await buggy_client.get(P)
    assert healthy.status_code == 200


async def test_pretty_output_for_query_parameter_and_curl(asgi_client: httpx.AsyncClient) -> None:
    path = P + "/namespaces/ns/pods/foo/some-metric"
    compact = await asgi_client.get(path)
    pretty = await asgi_client.get(path + "?pretty=true")
    curl = await asgi_client.get(path, headers={"User-Agent": "curl/8.5.0"})
    curl_off = await asgi_client.get(path + "?pretty=false", headers={"User-Agent": "curl/8.5.0"})
    assert b"\n  " not in compact.content
    assert pretty.content.startswith(b'{\n  "kind": "MetricValueList",\n')
    assert curl.content == pretty.content
    assert curl_off.content == compact.content
    assert orjson.loads(pretty.content) == orjson.loads(compact.content)


async def test_response_headers(asgi_client: httpx.AsyncClient) -> None:
    response = await asgi_client.get(P + "/namespaces/ns/pods/*/some-metric")
    assert response.headers["content-type"] == "application/json"
    assert response.headers["cache-control"] == "no-cache, private"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert int(response.headers["content-length"]) == len(response.content)
    assert response.content.endswith(b"]}\n")


async def test_bad_request_on_other_methods_is_405_first(asgi_client: httpx.AsyncClient) -> None:
    response = await asgi_client.post(P + "/namespaces/ns/pods/*/m?labelSelector=%3D")
    assert response.status_code == 405
    response = await asgi_client.post(P + "/nothing/here")
    assert response.status_code == 404


async def test_empty_discovery_lists_the_upstream_placeholder() -> None:
    app = create_app(cluster=InMemoryCluster(), backends=[])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://t"
    ) as client:
        custom = (await client.get(P)).json()
        external = (await client.get("/apis/external.metrics.k8s.io/v1beta1")).json()
    assert [r["name"] for r in custom["resources"]] == ["/custommetrics"]
    assert [r["name"] for r in external["resources"]] == ["externalmetrics"]


class CountingCluster(InMemoryCluster):
    """A real in-memory cluster that counts its REST mapping lookups."""

    def __init__(self) -> None:
        super().__init__()
        self.lookups = 0

    def mapping(self, resource: str) -> Any:
        self.lookups += 1
        return super().mapping(resource)


async def test_a_metric_request_looks_its_rest_mapping_up_once() -> None:
    cluster = CountingCluster()
    cluster.add("pods", "p", namespace="ns")
    app = create_app(cluster=cluster, backends=[BuggyBackend()])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://t"
    ) as client:
        # A resource the view does not map goes on to `resolve()` (discovery), which looks
        # again after refreshing; a mapped one is looked up once.
        response = await client.get(P + "/namespaces/ns/pods/p/boom")
        assert response.status_code == 500
        assert cluster.lookups == 1
