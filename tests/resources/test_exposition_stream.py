"""Tests for resources.exposition_stream: the streamed ``/metrics/resources`` body is the rows
renderer's (resources.exposition, which tests/resources/test_exposition.py pins to
kube-scheduler's bytes), byte for byte, in bounded chunks, over a snapshot taken at the first
chunk; and the server sends it in several ASGI body messages."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custom_metrics_server.backends.kubernetes.state_exposition import (
    render_state_exposition,
    stream_state_exposition,
)
from custom_metrics_server.cluster_state.records import NAMESPACES, NODES, PODS, ClusterState
from custom_metrics_server.resources import exposition_stream
from custom_metrics_server.resources.exposition import PodResourceRow, render_pod_resource_metrics
from custom_metrics_server.resources.exposition_stream import (
    PodResourceRecord,
    stream_pod_resources,
)
from custom_metrics_server.resources.lifecycle import resource_unit
from custom_metrics_server.server.app import AppSettings, create_app
from custom_metrics_server.server.observability import EXPOSITION_CONTENT_TYPE
from tests.fakes.envelope_world import make_node, make_pod, namespace_name, plan_world, scale_shape


def _rows(pods: Iterable[PodResourceRecord], *, limits: bool) -> Iterator[PodResourceRow]:
    for pod in pods:
        for resource, value in (pod.metric_limits if limits else pod.metric_requests).items():
            yield PodResourceRow(
                pod.namespace,
                pod.name,
                pod.node,
                pod.scheduler,
                pod.priority,
                resource,
                resource_unit(resource),
                float(value),
            )


def rendered(pods: Iterable[PodResourceRecord]) -> bytes:
    """The body by the rows renderer, independently of the stream's grouped form."""
    listed = list(pods)
    return render_pod_resource_metrics(_rows(listed, limits=False), _rows(listed, limits=True))


def counted(state: ClusterState) -> list[PodResourceRecord]:
    return [p for p in state.pods.values() if p.lifecycle != "Completed"]


def world(pods: int) -> ClusterState:
    """The envelope benchmark's generated cluster (owners, DaemonSets, a big namespace)."""
    plan = plan_world(scale_shape(pods))
    state = ClusterState()
    shape = plan.shape
    for gr, objects in (
        (NAMESPACES, [{"metadata": {"name": namespace_name(i)}} for i in range(shape.namespaces)]),
        (NODES, [make_node(i) for i in range(shape.nodes)]),
        (PODS, [make_pod(plan, i) for i in range(len(plan.pods))]),
    ):
        sink = state.sink(gr)
        sink.list_started()
        for obj in objects:
            sink.listed(obj)
        sink.list_finished()
    return state


@pytest.fixture(scope="module")
def cluster() -> ClusterState:
    return world(4000)


@pytest.mark.parametrize("chunk_bytes", [1, 4096, 10**9])
def test_the_streamed_body_is_the_rows_renderer_s(
    cluster: ClusterState, chunk_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small groups too: the big namespace (1,000 pods) is then split by node.
    monkeypatch.setattr(exposition_stream, "_GROUP_PODS", 50)
    old = rendered(counted(cluster))
    chunks = list(
        stream_pod_resources(
            (p for p in cluster.pods.values() if p.lifecycle != "Completed"),
            unit=resource_unit,
            chunk_bytes=chunk_bytes,
        )
    )
    assert len(old) > 1_000_000
    assert b"".join(chunks) == old
    if chunk_bytes == 10**9:
        assert len(chunks) == 1
    else:
        assert len(chunks) > 100
        # A chunk is the threshold plus at most one group (here <= 50 pods, 4 series each).
        assert max(len(chunk) for chunk in chunks) < chunk_bytes + 50 * 4 * 200


def test_the_server_s_stream_is_the_body_in_chunks_of_256_kib(cluster: ClusterState) -> None:
    chunks = list(stream_state_exposition(cluster))
    assert b"".join(chunks) == render_state_exposition(cluster) == rendered(counted(cluster))
    assert len(chunks) > 4
    # 256 KiB, plus at most one group: 256 pods of a namespace, or its pods on one node.
    assert all(len(chunk) < 512 * 1024 for chunk in chunks)


def test_the_body_is_the_state_when_the_first_chunk_was_asked_for() -> None:
    state = world(600)
    before = rendered(counted(state))
    chunks = stream_pod_resources(
        (p for p in state.pods.values() if p.lifecycle != "Completed"),
        unit=resource_unit,
        chunk_bytes=1,
    )
    first = next(chunks)
    # The watches change the state between two chunks: pods deleted, one added.
    for key in list(state.pods)[:100]:
        state.remove(PODS, key)
    plan = plan_world(scale_shape(600))
    extra = make_pod(plan, 0)
    extra["metadata"]["name"] = "zz-late"
    state.apply(PODS, extra)
    assert first + b"".join(chunks) == before
    assert rendered(counted(state)) != before


def test_an_empty_cluster_streams_no_chunk() -> None:
    assert list(stream_state_exposition(ClusterState())) == []
    assert render_state_exposition(ClusterState()) == b""


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    node: str
    scheduler: str
    priority: str
    metric_requests: Mapping[str, Decimal]
    metric_limits: Mapping[str, Decimal]


_TEXT = st.text(alphabet='ab-.z"\\\n !#\x01/', max_size=4)
_VALUES = st.dictionaries(
    st.sampled_from(["cpu", "memory", "nvidia.com/gpu", 'x"y', "a b"]),
    st.sampled_from([Decimal(0), Decimal("0.1"), Decimal(1), Decimal(2**30), Decimal("1e-7")]),
    max_size=3,
)
_POD = st.builds(
    Pod,
    namespace=st.sampled_from(["a", "a-b", "ab", "b", 'q"', "a b"]),
    name=_TEXT,
    node=st.sampled_from(["", "n1", "n1-2", "n10", "n\\"]),
    scheduler=st.sampled_from(["default-scheduler", "other", "s!"]),
    priority=st.sampled_from(["", "0", "-5", "1000"]),
    metric_requests=_VALUES,
    metric_limits=_VALUES,
)


@settings(max_examples=300, deadline=None)
@given(pods=st.lists(_POD, max_size=25), group_pods=st.integers(1, 5))
def test_any_pods_stream_the_renderer_s_bytes(pods: list[Pod], group_pods: int) -> None:
    # Escapes, values sorting before '"', pods given twice, zeros, empty families: the
    # stream falls back where it must and is otherwise the grouped form, both exact.
    old = rendered(pods)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(exposition_stream, "_GROUP_PODS", group_pods)
        chunks = list(stream_pod_resources(iter(pods), unit=resource_unit, chunk_bytes=64))
    assert b"".join(chunks) == old


async def scrape(app: Any, accept_encoding: bytes | None) -> list[dict[str, Any]]:
    """The ASGI messages of one `GET /metrics/resources`."""
    messages: list[dict[str, Any]] = []
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if requested:  # as a server does: the next message is the client going away
            await asyncio.Event().wait()
        requested = True
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    headers = [(b"host", b"t")]
    if accept_encoding is not None:
        headers.append((b"accept-encoding", accept_encoding))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "https",
        "path": "/metrics/resources",
        "raw_path": b"/metrics/resources",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "server": ("127.0.0.1", 6443),
        "client": ("127.0.0.1", 40000),
    }
    await app(scope, receive, send)
    return messages


@pytest.mark.parametrize(
    ("accept_encoding", "compressed"),
    [
        (b"gzip", True),  # Prometheus: Accept-Encoding: gzip
        (b"br, gzip;q=0.5", True),
        (b"*", True),
        (None, False),
        (b"identity", False),
        (b"gzip;q=0", False),
        (b"gzip;q=0, *", False),
    ],
)
async def test_the_server_streams_the_body_in_several_messages(
    cluster: ClusterState, accept_encoding: bytes | None, compressed: bool
) -> None:
    app = create_app(
        cluster=cluster,
        backends=[],
        settings=AppSettings(resource_exposition=lambda: stream_state_exposition(cluster)),
    )
    start, *bodies = await scrape(app, accept_encoding)
    assert start["status"] == 200
    headers = dict(start["headers"])
    assert headers[b"content-type"] == EXPOSITION_CONTENT_TYPE.encode()
    assert headers[b"vary"] == b"Accept-Encoding"
    assert b"content-length" not in headers  # chunked: the length is not known beforehand
    assert len(bodies) > 4
    assert all(m["more_body"] for m in bodies[:-1])
    body = b"".join(m["body"] for m in bodies)
    if compressed:
        assert headers[b"content-encoding"] == b"gzip"
        assert len(body) < 300_000  # 2.9 MB of text
        body = gzip.decompress(body)
    else:
        assert b"content-encoding" not in headers
    assert body == render_state_exposition(cluster)


async def test_a_standby_replica_streams_an_empty_body(cluster: ClusterState) -> None:
    app = create_app(
        cluster=cluster, backends=[], settings=AppSettings(resource_exposition=lambda: iter(()))
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://t"
    ) as client:
        response = await client.get("/metrics/resources")
    assert response.status_code == 200
    assert response.content == b""
