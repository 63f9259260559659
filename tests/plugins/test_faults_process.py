"""Faults of plugins in a real server process over TLS: a hang is a 504 at its deadline while
another backend answers in milliseconds; bugs, wrong types and runaway answers are 500s naming
the backend; a broken listing fails only its own metrics; start-up failures are one line."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from custom_metrics_server.testing.server_process import ServerProcess, server_command
from custom_metrics_server.testing.serving import serve_backends

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
P = "tests.fakes.plugins"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default"
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods"
PODS = [
    {"resource": "pods", "namespace": "default", "name": f"web-{i}", "labels": {"app": "web"}}
    for i in range(3)
]
#: The hung backend's deadline: long enough that a quick answer stuck behind a hung call (which
#: waits for it) stands apart from one slowed by a loaded machine (a few hundred ms).
HANG_DEADLINE = 5.0
BACKENDS = [
    {"name": "hang", "type": f"{P}:hanging", "timeout": f"{HANG_DEADLINE:g}s", "threads": 1},
    {"name": "quick", "type": f"{P}:instant"},
    {"name": "broken", "type": f"{P}:broken_listing"},
    {"name": "wrong", "type": f"{P}:wrong_types"},
    {"name": "huge", "type": f"{P}:huge", "maxSeries": 100},
    {"name": "buggy", "type": f"{P}:buggy"},
    {"name": "refusing", "type": f"{P}:refusing"},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serve_backends(
        tmp_path_factory.mktemp("faults"), BACKENDS, objects=PODS, pythonpath=[ROOT]
    ) as running:
        yield running


def get(server: ServerProcess, path: str) -> tuple[httpx.Response, float]:
    with server.client(timeout=30) as client:
        started = time.perf_counter()
        response = client.get(path)
        return response, time.perf_counter() - started


def test_a_hung_backend_is_a_504_at_its_deadline_while_another_answers_in_milliseconds(
    server: ServerProcess,
) -> None:
    hung_paths = [f"{EXTERNAL}/hang_sync"] * 3 + [f"{CUSTOM}/web-0/hang_async"]
    with concurrent.futures.ThreadPoolExecutor(len(hung_paths)) as pool, server.client() as client:
        started = time.perf_counter()
        hung = [pool.submit(get, server, path) for path in hung_paths]
        time.sleep(0.2)  # the hung calls are in flight (three plain calls on one thread)
        latencies = []
        while time.perf_counter() - started < 0.8:
            before = time.perf_counter()
            quick = client.get(f"{EXTERNAL}/instant_total")
            latencies.append(time.perf_counter() - before)
            assert quick.status_code == 200
            assert [i["value"] for i in quick.json()["items"]] == ["7", "7"]
        assert all(not future.done() for future in hung)  # still hanging meanwhile
        answers = [future.result() for future in hung]
    # Quick answers came while every hung call was still in flight (checked above), and none
    # of them waited for the hung calls' deadline.
    assert len(latencies) >= 5
    assert max(latencies) < HANG_DEADLINE / 2, latencies
    for response, elapsed in answers:
        assert response.status_code == 504
        assert response.json()["message"] == "the hang backend did not answer within 5s"
        # At the deadline, not before; a missing deadline would hang to the client's 30 s.
        assert HANG_DEADLINE * 0.9 < elapsed < 25, elapsed


def test_a_bug_is_a_masked_500_naming_the_backend_with_the_traceback_in_the_log_only(
    server: ServerProcess,
) -> None:
    response, _ = get(server, f"{EXTERNAL}/buggy_total")
    assert response.status_code == 500
    assert response.json()["message"] == (
        'an error on the server ("backend buggy failed") has prevented the request from succeeding'
    )
    assert "secret" not in response.text
    request_id = response.headers["audit-id"]
    log = server.logs()
    assert (
        f"backend buggy failed (request id {request_id}): KeyError: 'secret internal detail'" in log
    )
    assert "Traceback" in log


def test_wrong_types_are_a_500_naming_the_backend(server: ServerProcess) -> None:
    response, _ = get(server, f"{EXTERNAL}/wrong_total")
    assert response.status_code == 500
    assert '("backend wrong failed")' in response.json()["message"]
    assert "ContractViolation: returned a dict, not an ExternalSample" in server.logs()


def test_a_runaway_answer_is_bounded_and_a_500_naming_the_backend(server: ServerProcess) -> None:
    response, elapsed = get(server, f"{EXTERNAL}/huge_total")
    assert response.status_code == 500
    assert '("backend huge failed")' in response.json()["message"]
    assert "returned more than 100 items for 100 series allowed" in server.logs()
    # Cut off at 101 items: an answer read to its end would run until the client's 30 s.
    assert elapsed < 15


@pytest.mark.parametrize(
    ("query", "code", "message"),
    [
        ("?labelSelector=queue%3Dbad", 400, "backend refusing: queue=bad cannot be served"),
        ("", 503, "backend refusing: the database is down"),
    ],
)
def test_sdk_errors_keep_their_code_and_name_the_backend(
    server: ServerProcess, query: str, code: int, message: str
) -> None:
    response, _ = get(server, f"{EXTERNAL}/refusing_total{query}")
    assert response.status_code == code
    assert response.json()["message"] == message


def test_a_broken_listing_fails_only_its_own_metrics(server: ServerProcess) -> None:
    with server.client() as client:
        discovery = client.get("/apis/custom.metrics.k8s.io/v1beta2").json()
        names = {r["name"] for r in discovery["resources"]}
        assert "pods/instant_pod" in names
        assert "pods/broken_pod" not in names
        assert client.get(f"{CUSTOM}/web-0/broken_pod").status_code == 404
        # The broken backend is not ready: its other metrics answer 503, naming why.
        external = client.get(f"{EXTERNAL}/broken_total")
        assert external.status_code == 503
        assert external.json()["message"] == (
            "the broken backend is not ready: list_metrics() raised RuntimeError: catalog unavailable"
        )
        assert client.get("/readyz").status_code == 200  # the server stays in rotation
        verbose = client.get("/readyz?verbose").text
        assert (
            "[+]backend-broken ok (not ready, its metrics answer 503: list_metrics() raised "
            "RuntimeError: catalog unavailable)" in verbose
        )
        assert "[+]backend-quick ok\n" in verbose
    assert server.logs().count("catalog unavailable; serving no metrics from it") == 1


def _run(tmp_path: Path, entries: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "backends.yaml"
    path.write_text(yaml.safe_dump({"backends": entries}))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = server_command(tmp_path, "--backends-config", str(path))
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False, env=env)


@pytest.mark.parametrize(
    ("entries", "status", "line"),
    [
        pytest.param(
            [{"name": "pg", "type": "tests.fakes.broken_plugin:make"}],
            2,
            "cannot start: backends[0] 'pg' (type tests.fakes.broken_plugin:make): importing "
            "tests.fakes.broken_plugin:make failed: ModuleNotFoundError: No module named "
            "'psycopg_not_installed_here'",
            id="import-fails",
        ),
        pytest.param(
            [{"name": "orders", "type": f"{P}:with_settings", "settings": {"pool": 2}}],
            2,
            f"cannot start: backends[0] 'orders' (type {P}:with_settings): settings.dsn: field required",
            id="settings",
        ),
        pytest.param(
            [{"name": "db", "type": f"{P}:failing_start"}],
            3,
            "backend 'db' failed to start: ConnectionRefusedError: db:5432 refused the connection",
            id="start-fails",
        ),
        pytest.param(
            [{"name": "a", "type": f"{P}:instant"}, {"name": "b", "type": f"{P}:instant"}],
            3,
            "backends 'a' and 'b' both list the custom metric pods/instant_pod: add a route that "
            "decides (docs/backends.md, Routing)",
            id="conflict",
        ),
    ],
)
def test_start_up_failures_are_one_line_naming_the_plugin(
    tmp_path: Path, entries: list[dict[str, Any]], status: int, line: str
) -> None:
    result = _run(tmp_path, entries)
    assert result.returncode == status, result.stderr
    assert line in result.stderr
    assert "Traceback" not in result.stderr
