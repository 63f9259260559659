"""A slow backend against the real server process over TLS (security.md checklist items 34, 38).

The server is the real `serve --backends-config`: a fixture backend gives the cluster view and
the test-only plugin of tests/fakes/slow_backend.py answers the metrics, its `delays` making the
fetches of one metric wait, so the requests are slow the way a hanging backend makes them slow,
and the server's own observable
state is read from `/metrics` (in-flight gauge, pending deadlines, asyncio tasks, backend
outcomes) and from `/proc/<pid>/fd`.

* 34: 1,000 requests past their deadline (a `?timeout=` shorter than `--request-timeout`): each
  a 504 `Timeout` Status, each backend call cancelled, and afterwards no request, deadline,
  task or file descriptor left over.
* 38: 50 requests in flight across SIGTERM all complete 200 (with `Connection: close`),
  `/readyz` fails at once while `/livez` passes, the listener closes after the delay while they
  drain, and the process exits 0 well before a pod's termination grace period.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from custom_metrics_server.testing.server_process import ServerProcess as RunningServer
from custom_metrics_server.testing.server_process import start_server as start_plain
from custom_metrics_server.testing.server_process import stop_server

P = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns/pods"
SLOW = P + "/*/slow"
FAST = P + "/*/fast"
#: Kubernetes' default `terminationGracePeriodSeconds`.
GRACE_PERIOD = 30.0


ROOT = Path(__file__).resolve().parent.parent.parent


def start_server(workdir: Path, delay: float, *args: str, **options: Any) -> RunningServer:
    """The real server whose `slow` metric waits `delay` seconds: a fixture backend for the
    objects (the cluster view) and the slow plugin (tests/fakes/slow_backend.py, on
    PYTHONPATH) answering every custom metric."""
    fixture = {
        "objects": [{"resource": "pods", "namespace": "ns", "name": "p1"}],
        "values": [
            {"resource": "pods", "namespace": "ns", "name": "p1", "metric": "slow", "value": 1},
            {"resource": "pods", "namespace": "ns", "name": "p1", "metric": "fast", "value": 2},
        ],
    }
    (workdir / "slow.yaml").write_text(yaml.safe_dump(fixture))
    backends = {
        "backends": [
            {"name": "objects", "type": "fixture", "settings": {"file": "slow.yaml"}},
            {
                "name": "memory",
                "type": "tests.fakes.slow_backend:slow_fixture",
                "settings": {"file": "slow.yaml", "delays": {"slow": delay}},
                "routes": [{"api": "custom"}],
            },
        ]
    }
    (workdir / "backends.yaml").write_text(yaml.safe_dump(backends))
    path = os.environ.get("PYTHONPATH", "")
    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT)}
    flags = ("--backends-config", str(workdir / "backends.yaml"), *args)
    return start_plain(workdir, *flags, env=env, **options)


def _client(server: RunningServer, **kwargs: object) -> httpx.Client:
    return httpx.Client(base_url=server.url, verify=server.ssl_context(), timeout=60, **kwargs)  # type: ignore[arg-type]


def _samples(client: httpx.Client) -> dict[str, float]:
    """The self-metrics as {series: value} (`name{labels}` keys)."""
    response = client.get("/metrics")
    assert response.status_code == 200
    found = {}
    for line in response.text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            found[series] = float(value)
    return found


INFLIGHT = 'apiserver_current_inflight_requests{request_kind="readOnly"}'
DEADLINES = "custom_metrics_server_request_deadlines"
TASKS = "custom_metrics_server_asyncio_tasks"


def _open_fds(server: RunningServer) -> int:
    return len(os.listdir(f"/proc/{server.process.pid}/fd"))


def _settled(measure: object, *, at_most: int, within: float) -> int:
    """Poll `measure()` until it is at most `at_most` (what it was last, either way)."""
    assert callable(measure)
    deadline = time.monotonic() + within
    value: int = measure()
    while value > at_most and time.monotonic() < deadline:
        time.sleep(0.2)
        value = measure()
    return value


def _connection_refused(server: RunningServer) -> bool:
    host, port = server.url.removeprefix("https://").rsplit(":", 1)
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_34_a_thousand_request_deadlines_leave_no_task_fd_or_request_behind(
    tmp_path: Path,
) -> None:
    # The backend hangs for an hour; --backend-timeout (10 s) and --request-timeout (60 s)
    # are far away, so every 504 below comes from the caller's shorter `?timeout=`.
    server = start_server(tmp_path, 3600)
    try:
        with _client(server) as client:  # warm up every lazily opened resource, then measure
            assert client.get(SLOW + "?timeout=100ms").status_code == 504
            assert client.get(FAST).status_code == 200
            before = _samples(client)
        assert (before[INFLIGHT], before[DEADLINES]) == (1, 1)  # the scrape itself
        time.sleep(1)  # the server closes its side of the warm-up connection
        baseline_fds = _open_fds(server)

        async def hammer() -> list[httpx.Response]:
            # 100 connections, 10 requests each (httpx's pool is slow with 1,000 queued).
            async def ten(client: httpx.AsyncClient) -> list[httpx.Response]:
                return [await client.get(SLOW + "?timeout=300ms") for _ in range(10)]

            clients = [
                httpx.AsyncClient(base_url=server.url, verify=server.ssl_context(), timeout=60)
                for _ in range(100)
            ]
            try:
                batches = await asyncio.gather(*(ten(client) for client in clients))
            finally:
                for client in clients:
                    await client.aclose()
            return [reply for batch in batches for reply in batch]

        started = time.monotonic()
        replies = asyncio.run(hammer())
        elapsed = time.monotonic() - started
        assert {reply.status_code for reply in replies} == {504}
        assert {reply.json()["reason"] for reply in replies} == {"Timeout"}
        assert replies[0].json() == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Timeout: request did not complete within the allotted timeout",
            "reason": "Timeout",
            "details": {},
            "code": 504,
        }
        # 10 rounds of 100 at 0.3-0.8 s each, not the 10 s backend timeout per round.
        assert elapsed < 60

        fds = _settled(lambda: _open_fds(server), at_most=baseline_fds, within=20)
        # A leak per request or per connection would be 100+ here.
        assert fds <= baseline_fds + 3, (baseline_fds, fds)
        with _client(server) as client:
            after = _samples(client)
            deadline = time.monotonic() + 10
            while after[TASKS] > before[TASKS] and time.monotonic() < deadline:
                time.sleep(0.2)
                after = _samples(client)
            assert after[TASKS] == before[TASKS]
            assert (after[INFLIGHT], after[DEADLINES]) == (1, 1)
            timeouts = 'apiserver_request_total{code="504",group="custom.metrics.k8s.io",'
            timeouts += 'resource="pods",verb="get",version="v1beta2"}'
            assert after[timeouts] == 1001
            cancelled = (
                'custom_metrics_server_backend_fetch_duration_seconds_count{backend="memory",'
            )
            cancelled += 'outcome="cancelled"}'
            assert after[cancelled] == 1001  # every backend call was cancelled, none left
            fast = client.get(FAST)
            assert fast.status_code == 200
            assert fast.json()["items"][0]["value"] == "2"
    finally:
        stop_server(server)
    assert server.process.returncode == 0


def test_38_fifty_slow_requests_in_flight_complete_across_sigterm(tmp_path: Path) -> None:
    # Each bound below is a share of a delay that the defect it guards would cost in full: the
    # slow requests outlast the shutdown delay even if getting them in flight took delay / 2,
    # and readiness failing "at once" means within half the shutdown delay (a loaded machine
    # adds a few hundred milliseconds; /readyz left at 200 would stay so for all 6 s).
    delay = 16.0
    shutdown_delay = 6.0
    server = start_server(
        tmp_path,
        delay,
        "--shutdown-delay-duration",
        f"{shutdown_delay:g}s",
        "--backend-timeout",
        "30s",  # the default 10 s would answer the slow requests with a 504 first
    )

    def slow_request() -> tuple[int, str, str]:
        with _client(server) as client:
            response = client.get(SLOW)
            return (
                response.status_code,
                response.headers.get("connection", ""),
                response.json()["kind"],
            )

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=50)
    try:
        with _client(server) as probe:
            started = time.monotonic()
            held = [pool.submit(slow_request) for _ in range(50)]
            while _samples(probe)[INFLIGHT] < 51:  # the 50, plus this scrape
                assert time.monotonic() - started < delay / 2, "requests did not get in flight"
                time.sleep(0.05)
            assert not any(future.done() for future in held)

            signalled = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            while probe.get("/readyz").status_code == 200:
                assert time.monotonic() - signalled < shutdown_delay / 2, "/readyz did not fail"
            ready = probe.get("/readyz")
            assert ready.status_code == 500
            assert "[-]shutdown failed: reason withheld\n" in ready.text
            assert probe.get("/livez").status_code == 200
            fast = probe.get(FAST)  # served during the delay, closing its connection
            assert (fast.status_code, fast.headers["connection"]) == (200, "close")
            assert time.monotonic() - signalled < shutdown_delay, "checks outlasted the delay"

        # After the delay the listener is closed while the 50 still drain.
        while not _connection_refused(server):
            assert time.monotonic() - signalled < shutdown_delay + 5, "connections accepted"
            time.sleep(0.1)
        refused_at = time.monotonic()
        assert not all(future.done() for future in held)

        results = [future.result(timeout=60) for future in held]
        assert results == [(200, "close", "MetricValueList")] * 50
        assert server.process.wait(timeout=GRACE_PERIOD) == 0
        exited = time.monotonic()
        assert exited - signalled < GRACE_PERIOD
        assert refused_at - signalled >= shutdown_delay - 0.1  # not before the delay
        assert _connection_refused(server)
        log = (tmp_path / "server.log").read_text()
        assert "Traceback" not in log
        assert not [line for line in log.splitlines() if line.split(" ")[2:3] == ["E"]], log
    finally:
        if server.process.poll() is None:
            server.process.kill()
        stop_server(server)
        pool.shutdown(wait=True, cancel_futures=True)  # their requests end with the server


def test_36_over_the_inflight_limit_is_a_429_status_over_the_real_server(tmp_path: Path) -> None:
    server = start_server(
        tmp_path,
        6,
        "--max-requests-inflight",
        "5",
    )
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=5)

    def slow_request() -> int:
        with _client(server) as client:
            return client.get(SLOW).status_code

    try:
        held = [pool.submit(slow_request) for _ in range(5)]
        with _client(server) as client:
            started = time.monotonic()
            while (over := client.get(FAST)).status_code == 200:
                assert time.monotonic() - started < 10, "the limit was never reached"
                # This poll counts too: a slow request that raced it for the last slot got
                # the 429 instead. Send that one again.
                held = [
                    pool.submit(slow_request) if f.done() and f.result() == 429 else f for f in held
                ]
                time.sleep(0.05)
            assert over.status_code == 429
            assert over.headers["retry-after"] == "1"
            assert over.json() == {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "Too many requests, please try again later.",
                "reason": "TooManyRequests",
                "details": {"retryAfterSeconds": 1},
                "code": 429,
            }
            assert client.get("/readyz").status_code == 200  # probes are exempt
            assert not any(future.done() for future in held)
            assert [future.result(timeout=30) for future in held] == [200] * 5
            assert client.get(FAST).status_code == 200
    finally:
        stop_server(server)
        pool.shutdown(wait=True, cancel_futures=True)  # their requests end with the server
