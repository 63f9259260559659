"""Request limits in the outer ASGI app: the in-flight limit (429) and the request deadline (504).

Driven in process with the scope uvicorn builds (tests/asgi.py), with a backend that blocks until
released, so the number of requests in flight is exactly known.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import Collection, Sequence
from types import TracebackType
from typing import Self

import orjson
import pytest

from custom_metrics_server import cli
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
from custom_metrics_server.server.app import AppSettings, Server, create_app
from custom_metrics_server.server.chain import request_deadline
from custom_metrics_server.testing.server_process import ServerProcess as RunningServer
from tests.asgi import call, scope_for

P = "/apis/custom.metrics.k8s.io/v1beta2"
SLOW = (P + "/namespaces/ns/pods/*/slow").encode()


class BlockingBackend:
    """`fetch` waits for `release`; remembers whether it was cancelled."""

    name = "blocking"

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.waiting = 0
        self.cancelled = 0

    def list_metrics(self) -> Collection[MetricInfo]:
        return {MetricInfo(GroupResource("", "pods"), True, "slow")}

    def list_external_metrics(self) -> Collection[str]:
        return set()

    async def fetch(self, request: BackendRequest) -> Sequence[Sample]:
        self.waiting += 1
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.waiting -= 1
        return []

    async def fetch_external(self, request: ExternalBackendRequest) -> Sequence[ExternalSample]:
        return []

    def ready(self) -> Readiness:
        return Readiness(ready=True)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


def _app(backend: BlockingBackend, **settings: float) -> Server:
    cluster = InMemoryCluster()
    cluster.add("pods", "p", namespace="ns")
    return create_app(cluster=cluster, backends=[backend], settings=AppSettings(**settings))  # type: ignore[arg-type]


async def _until(condition: object) -> None:
    for _ in range(500):
        if callable(condition) and condition():
            return
        await asyncio.sleep(0.002)
    raise AssertionError("condition never held")


async def test_over_the_inflight_limit_is_429_with_retry_after_and_probes_pass() -> None:
    backend = BlockingBackend()
    app = _app(backend, max_requests_inflight=2)
    held = [asyncio.create_task(call(app, scope_for("GET", SLOW))) for _ in range(2)]
    await _until(lambda: backend.waiting == 2)
    assert app.inflight == 2

    over = await call(app, scope_for("GET", P.encode()))
    assert over.status == 429
    assert over.headers["retry-after"] == "1"
    assert over.headers["content-type"] == "application/json"
    assert orjson.loads(over.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Too many requests, please try again later.",
        "reason": "TooManyRequests",
        "details": {"retryAfterSeconds": 1},
        "code": 429,
    }
    for probe in (b"/readyz", b"/livez", b"/healthz", b"/readyz/ping"):
        assert (await call(app, scope_for("GET", probe))).status == 200, probe

    backend.release.set()
    assert [reply.status for reply in await asyncio.gather(*held)] == [200, 200]
    assert app.inflight == 0
    assert (await call(app, scope_for("GET", P.encode()))).status == 200


async def test_zero_means_no_inflight_limit() -> None:
    backend = BlockingBackend()
    app = _app(backend, max_requests_inflight=0)
    held = [asyncio.create_task(call(app, scope_for("GET", SLOW))) for _ in range(5)]
    await _until(lambda: backend.waiting == 5)
    assert (await call(app, scope_for("GET", P.encode()))).status == 200
    backend.release.set()
    assert {reply.status for reply in await asyncio.gather(*held)} == {200}


async def test_request_deadline_is_a_504_status_and_cancels_the_work() -> None:
    backend = BlockingBackend()
    app = _app(backend, request_timeout=0.1, backend_timeout=30)
    reply = await asyncio.wait_for(call(app, scope_for("GET", SLOW)), timeout=5)
    assert reply.status == 504
    assert orjson.loads(reply.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Timeout: request did not complete within the allotted timeout",
        "reason": "Timeout",
        "details": {},
        "code": 504,
    }
    assert backend.cancelled == 1
    assert backend.waiting == 0
    assert app.inflight == 0
    counted = [
        line
        for line in app.metrics.exposition().decode().splitlines()
        if line.startswith("apiserver_request_total{") and 'code="504"' in line
    ]
    assert len(counted) == 1, counted  # counted once, by the /apis handler, with its labels
    assert 'resource="pods"' in counted[0]
    assert counted[0].endswith(" 1") or counted[0].endswith(" 1.0")
    assert (await call(app, scope_for("GET", P.encode()))).status == 200


async def test_backend_deadline_shorter_than_the_request_deadline_answers_first() -> None:
    backend = BlockingBackend()
    app = _app(backend, request_timeout=5, backend_timeout=0.05)
    reply = await asyncio.wait_for(call(app, scope_for("GET", SLOW)), timeout=5)
    assert reply.status == 504
    assert b"blocking backend did not answer within 0.05s" in reply.body


def test_limit_flags_parse_with_upstream_defaults() -> None:
    parser = cli.build_parser()
    defaults = parser.parse_args(["serve", "--demo"])
    assert (defaults.max_requests_inflight, defaults.request_timeout) == (400, 60.0)
    given = parser.parse_args(
        ["serve", "--demo", "--max-requests-inflight", "10", "--request-timeout", "1m30s"]
    )
    assert (given.max_requests_inflight, given.request_timeout) == (10, 90.0)


# URL and selector sizes.

URI_STATUS_MESSAGE = "Request-URI Too Long: {} bytes, at most 16384 are accepted"


async def test_url_over_16_kib_is_414_before_anything_else() -> None:
    app = _app(BlockingBackend())
    selector = b"labelSelector=" + b"a" * 100 * 1024  # checklist item 25: 100 KiB selector
    reply = await call(app, scope_for("GET", SLOW, selector))
    assert reply.status == 414
    body = orjson.loads(reply.body)
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "RequestEntityTooLarge", 414)
    assert body["message"] == URI_STATUS_MESSAGE.format(len(SLOW) + len(selector))
    long_path = b"/apis/" + b"x" * 16384
    assert (await call(app, scope_for("GET", long_path))).status == 414
    assert (await call(app, scope_for("POST", b"/" + b"y" * 20000))).status == 414
    at_bound = b"/apis/" + b"x" * (16384 - len("/apis/"))
    assert (await call(app, scope_for("GET", at_bound))).status == 404


async def test_selector_over_8_kib_is_a_400() -> None:
    app = _app(BlockingBackend())
    for name in (b"labelSelector", b"metricLabelSelector", b"fieldSelector"):
        reply = await call(app, scope_for("GET", SLOW, name + b"=" + b"k" * 8193))
        assert reply.status == 400, name
        body = orjson.loads(reply.body)
        assert body["reason"] == "BadRequest"
        assert body["message"] == (
            f"{name.decode()} is too long: 8193 bytes, at most 8192 are accepted"
        )
    # multi-byte characters count in bytes: 2731 x 3 bytes
    reply = await call(app, scope_for("GET", SLOW, b"labelSelector=" + "€".encode() * 2731))
    assert reply.status == 400
    assert b"is too long: 8193 bytes" in reply.body
    at_bound = await call(app, scope_for("GET", SLOW, b"labelSelector=" + b"k" * 8192))
    assert b"too long" not in at_bound.body


def _raw_exchange(server: RunningServer, head: bytes, body: bytes = b"") -> bytes:
    """Send a request head (and part of a body) over TLS; return what arrives in 5 s."""
    host, port = server.url.removeprefix("https://").rsplit(":", 1)
    with (
        socket.create_connection((host.strip("[]"), int(port)), timeout=5) as raw,
        server.ssl_context().wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        tls.sendall(head + body)
        received = b""
        with contextlib.suppress(TimeoutError, ssl.SSLError, ConnectionError):
            while b"\r\n\r\n" not in received or len(received) < received.index(b"\r\n\r\n") + 4:
                chunk = tls.recv(65536)
                if not chunk:
                    break
                received += chunk
            # the Status body follows the head
            received += tls.recv(65536)
        return received


def test_post_with_a_huge_body_is_405_without_reading_the_body(demo_server: RunningServer) -> None:
    path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/http_requests_per_second"
    head = (
        f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Content-Length: {100 << 20}\r\n\r\n"
    ).encode()
    started = time.monotonic()
    # 100 MiB announced, 256 KiB sent: the answer cannot depend on the rest.
    received = _raw_exchange(demo_server, head, b"x" * (256 << 10))
    assert received.startswith(b"HTTP/1.1 405 "), received[:200]
    assert b'"reason":"MethodNotAllowed"' in received
    # Answered on the head (milliseconds): waiting for the 100 MiB that never come would last
    # until a read timeout, which a loaded machine's few hundred milliseconds do not reach.
    assert time.monotonic() - started < 5
    with demo_server.client() as client:
        assert client.get("/readyz").status_code == 200


def test_long_urls_over_the_real_server_are_414_or_the_parsers_400(
    demo_server: RunningServer,
) -> None:
    target = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/m?labelSelector="

    def head(size: int) -> bytes:
        return f"GET {target}{'a' * size} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()

    received = _raw_exchange(demo_server, head(60 << 10))
    assert received.startswith(b"HTTP/1.1 414 "), received[:200]
    assert b'"reason":"RequestEntityTooLarge"' in received
    # From about 64 KiB httptools itself refuses the request line before the app runs; the
    # answer is still a Status (tls_peer overrides uvicorn's plain-text 400).
    received = _raw_exchange(demo_server, head(100 << 10))
    assert received.startswith(b"HTTP/1.1 400 "), received[:200]
    assert b"content-type: application/json\r\n" in received
    assert received.endswith(b'"reason":"BadRequest","code":400}\n'), received[-200:]
    assert b"the request is not valid HTTP/1.1" in received
    # A malformed header line is the same Status.
    received = _raw_exchange(demo_server, b"GET / HTTP/1.1\r\nBad Header\r\n\r\n")
    assert received.startswith(b"HTTP/1.1 400 "), received[:200]
    assert b'"kind":"Status"' in received
    with demo_server.client() as client:
        assert client.get("/apis/custom.metrics.k8s.io/v1beta2").status_code == 200


async def test_deadline_cancels_only_the_overdue_request() -> None:
    backend = BlockingBackend()
    app = _app(backend, request_timeout=0.3, backend_timeout=30)
    slow = asyncio.create_task(call(app, scope_for("GET", SLOW)))
    await _until(lambda: backend.waiting == 1)
    # Requests that finish in time meanwhile are untouched by the sweeper.
    for _ in range(3):
        assert (await call(app, scope_for("GET", P.encode()))).status == 200
    reply = await asyncio.wait_for(slow, timeout=5)
    assert reply.status == 504
    assert (backend.cancelled, app.inflight) == (1, 0)
    # A later slow request gets its own full deadline, and one released in time is a 200.
    again = asyncio.create_task(call(app, scope_for("GET", SLOW)))
    await _until(lambda: backend.waiting == 1)
    backend.release.set()
    assert (await asyncio.wait_for(again, timeout=5)).status == 200
    assert backend.cancelled == 1


async def test_a_cancellation_that_is_not_the_deadline_propagates() -> None:
    backend = BlockingBackend()
    app = _app(backend, request_timeout=30)
    task = asyncio.create_task(call(app, scope_for("GET", SLOW)))
    await _until(lambda: backend.waiting == 1)
    task.cancel()  # e.g. uvicorn giving up at the end of the graceful shutdown
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert task.cancelled()
    assert app.inflight == 0


# `?timeout=` (upstream's WithRequestDeadline: shortens, never lengthens).

TIMEOUT_STATUS = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "Timeout: request did not complete within the allotted timeout",
    "reason": "Timeout",
    "details": {},
    "code": 504,
}


def test_request_deadline_is_the_shorter_of_the_flag_and_a_valid_timeout() -> None:
    cases = {
        (60.0, b""): 60.0,
        (60.0, b"labelSelector=a%3Db"): 60.0,
        (60.0, b"timeout=2s"): 2.0,
        (60.0, b"timeout=1m30s"): 60.0,  # never lengthened
        (60.0, b"timeout=250ms&labelSelector=x"): 0.25,
        (60.0, b"labelSelector=x&timeout=1.5s"): 1.5,
        (60.0, b"timeout=0"): 60.0,  # 0: "no timeout on the user's part"
        (60.0, b"timeout=-5s"): 60.0,
        (60.0, b"timeout=abc"): 60.0,  # the grammar answers 400 for it
        (60.0, b"timeout=3s&timeout=1s"): 3.0,  # first value wins, as everywhere
        (0.0, b"timeout=2s"): 2.0,  # no deadline configured: the caller's still applies
        (0.0, b""): 0.0,
    }
    for (configured, query), expected in cases.items():
        assert request_deadline(configured, query) == expected, (configured, query)


async def test_a_timeout_parameter_shortens_the_deadline_to_a_504() -> None:
    backend = BlockingBackend()
    app = _app(backend, request_timeout=30, backend_timeout=30)
    started = time.monotonic()
    reply = await asyncio.wait_for(call(app, scope_for("GET", SLOW, b"timeout=200ms")), 10)
    assert reply.status == 504
    assert orjson.loads(reply.body) == TIMEOUT_STATUS
    assert time.monotonic() - started < 5  # 0.2 s plus at most one sweep, not 30 s
    assert (backend.cancelled, backend.waiting, app.inflight) == (1, 0, 0)


async def test_a_longer_timeout_parameter_does_not_lengthen_the_deadline() -> None:
    backend = BlockingBackend()
    app = _app(backend, request_timeout=0.2, backend_timeout=30)
    reply = await asyncio.wait_for(call(app, scope_for("GET", SLOW, b"timeout=1h")), 10)
    assert reply.status == 504
    assert orjson.loads(reply.body) == TIMEOUT_STATUS


async def test_a_timeout_parameter_applies_without_a_configured_deadline() -> None:
    backend = BlockingBackend()
    app = _app(backend, request_timeout=0, backend_timeout=30)
    reply = await asyncio.wait_for(call(app, scope_for("GET", SLOW, b"timeout=100ms")), 10)
    assert reply.status == 504
    assert orjson.loads(reply.body) == TIMEOUT_STATUS
    # ...and without one, the request is not under any deadline.
    held = asyncio.create_task(call(app, scope_for("GET", SLOW)))
    await _until(lambda: backend.waiting == 1)
    await asyncio.sleep(0.8)
    assert not held.done()
    backend.release.set()
    assert (await asyncio.wait_for(held, 10)).status == 200


async def test_an_in_time_request_with_a_timeout_parameter_is_served() -> None:
    backend = BlockingBackend()
    backend.release.set()
    app = _app(backend, request_timeout=30)
    reply = await call(app, scope_for("GET", SLOW, b"timeout=10s"))
    assert reply.status == 200
    assert orjson.loads(reply.body)["kind"] == "MetricValueList"
    bad = await call(app, scope_for("GET", SLOW, b"timeout=10"))  # Go needs a unit
    assert bad.status == 400
    assert orjson.loads(bad.body)["message"] == (
        'invalid timeout specified in the request URL - time: invalid duration "10"'
    )


# Shutdown: requests already in flight when it begins.


@pytest.mark.parametrize("request_timeout", [30, 0])
async def test_a_response_started_after_begin_shutdown_closes_its_connection(
    request_timeout: float,
) -> None:
    """With or without a request deadline (0: none), as the two take different paths."""
    backend = BlockingBackend()
    app = _app(backend, request_timeout=request_timeout)
    heads: list[list[tuple[bytes, bytes]]] = []

    async def run(scope: dict[str, object]) -> None:
        async def receive() -> dict[str, object]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, object]) -> None:
            if message["type"] == "http.response.start":
                heads.append(list(message["headers"]))  # type: ignore[call-overload]

        await app(scope, receive, send)

    before = asyncio.create_task(run(scope_for("GET", SLOW)))
    await _until(lambda: backend.waiting == 1)
    app.begin_shutdown()
    backend.release.set()
    await asyncio.wait_for(before, 5)
    await run(scope_for("GET", SLOW))  # began after: wrapped once, not twice
    await run(scope_for("GET", b"/readyz"))  # exempt from the limit, still closing
    assert len(heads) == 3
    for head in heads:
        assert head.count((b"connection", b"close")) == 1, head
