"""The plugin served by the real server process over TLS, from a backends file naming the type
`postgres` (found through the installed entry point), against a real PostgreSQL: every URL form
(the kit's `query_every_form`), `kubectl get --raw`, an outage and a recovery without restarting
the server, a statement timeout, and bad settings refused at start-up."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from custom_metrics_server.testing.server_process import ServerProcess, server_command
from custom_metrics_server.testing.serving import (
    CustomQuery,
    ExternalQuery,
    query_every_form,
    serve_backends,
)
from jobsdb import JobsDatabase, example_entry

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]  # the repository (examples/postgres-backend/tests)
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1/namespaces"
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2/namespaces"
OBJECTS = [
    {"resource": "deployments.apps", "namespace": namespace, "name": name, "labels": {"app": name}}
    for namespace, name in (
        ("default", "web"),
        ("default", "worker"),
        ("default", "idle"),
        ("other", "web"),
    )
]


def entry(settings: dict[str, Any]) -> dict[str, Any]:
    """The example file's `jobs` entry with these settings."""
    return {**example_entry(), "settings": settings}


def backend_ready(server: ServerProcess, within: float = 30) -> ServerProcess:
    """Wait until `/readyz?verbose` shows the backend ready (a plugin does not gate `/readyz`,
    so the server is ready before its first `SELECT 1`)."""
    deadline = time.monotonic() + within
    with server.client() as client:
        while True:
            lines = client.get("/readyz?verbose").text.splitlines()
            if "[+]backend-jobs ok" in lines:
                return server
            assert time.monotonic() < deadline, lines
            time.sleep(0.05)


@pytest.fixture
def served(jobs: JobsDatabase, tmp_path: Path) -> Iterator[ServerProcess]:
    """The server on the example's entry, pointed at the shared database, its backend ready."""
    with serve_backends(
        tmp_path / "server", [entry(jobs.settings(tmp_path))], objects=OBJECTS
    ) as server:
        yield backend_ready(server)


def items(client: httpx.Client, url: str) -> list[tuple[str, str]]:
    """(name or queue, value) of each item of a 200 answer."""
    answer = client.get(url)
    assert answer.status_code == 200, answer.text
    found = []
    for item in answer.json()["items"]:
        name = item.get("describedObject", {}).get("name") or item["metricLabels"].get("queue", "")
        found.append((name, item["value"]))
    return sorted(found)


def test_every_url_form_through_the_entry_point(served: ServerProcess) -> None:
    answers = query_every_form(
        served,
        custom=[
            CustomQuery("deployments.apps", "jobs_pending", "default", "web", "app=web"),
            CustomQuery("deployments.apps", "jobs_pending_or_zero", "default", "idle", "app=idle"),
        ],
        external=[
            ExternalQuery("jobs_pending", "default", "queue=emails"),
            ExternalQuery("jobs_pending_here", "other", "queue=emails"),
        ],
    )
    assert len(answers) == 2 * 9 + 2 * 3
    # The type was found as the installed plugin's entry point.
    assert "backend jobs: plugin postgres = cms_postgres:factory (cms-postgres-backend" in (
        served.logs()
    )


def test_the_values_over_the_wire(served: ServerProcess) -> None:
    with served.client() as client:
        assert items(client, f"{EXTERNAL}/default/jobs_pending?labelSelector=queue%3Demails") == [
            ("emails", "4")
        ]
        assert items(client, f"{EXTERNAL}/default/jobs_pending?labelSelector=queue%3Dimages") == [
            ("images", "0")
        ]
        assert items(client, f"{EXTERNAL}/default/jobs_pending") == [
            ("emails", "4"),
            ("reports", "2"),
        ]
        assert items(client, f"{EXTERNAL}/default/jobs_pending_here") == [
            ("emails", "3"),
            ("reports", "2"),
        ]
        # The wildcard: the server resolves `*` to the Deployments it knows, the query answers.
        assert items(client, f"{CUSTOM}/default/deployments.apps/*/jobs_pending") == [
            ("web", "3"),
            ("worker", "2"),
        ]
        assert items(client, f"{CUSTOM}/default/deployments.apps/*/jobs_pending_or_zero") == [
            ("idle", "0"),
            ("web", "3"),
            ("worker", "2"),
        ]
        everywhere = client.get(
            "/apis/custom.metrics.k8s.io/v1beta2/deployments.apps/*/jobs_pending"
        )
        assert sorted(
            (i["describedObject"]["namespace"], i["describedObject"]["name"], i["value"])
            for i in everywhere.json()["items"]
        ) == [("default", "web", "3"), ("default", "worker", "2"), ("other", "web", "1")]
        # A Deployment without pending jobs has no value: the upstream 404.
        idle = client.get(f"{CUSTOM}/default/deployments.apps/idle/jobs_pending")
        assert idle.status_code == 404
        assert "jobs_pending" in idle.json()["message"]


def test_a_hostile_object_name_over_the_wire_is_data(
    served: ServerProcess, jobs: JobsDatabase
) -> None:
    hostile = urllib.parse.quote("x'; DROP TABLE jobs; --", safe="")
    with served.client() as client:
        answer = client.get(f"{CUSTOM}/default/deployments.apps/{hostile}/jobs_pending")
        # The server hands the name to the backend as it came; the query ran with it as a
        # parameter and found no row: the upstream 404, naming the object.
        assert answer.status_code == 404, answer.text
        assert answer.json()["message"] == (
            "the server could not find the metric jobs_pending for deployments.apps "
            "x'; DROP TABLE jobs; --"
        )
        assert items(client, f"{CUSTOM}/default/deployments.apps/*/jobs_pending") == [
            ("web", "3"),
            ("worker", "2"),
        ]
    assert jobs.count() == 8


def _kubectl() -> str:
    for candidate in (
        os.environ.get("KUBECTL"),
        shutil.which("kubectl"),
        str(ROOT / ".tools" / "bin" / "kubectl"),
    ):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    message = "kubectl is not installed (in the base image, or `make tools` at the repository root)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run this test: {message}")
    pytest.skip(message)


def kubectl_raw(server: ServerProcess, path: str) -> subprocess.CompletedProcess[str]:
    """`kubectl get --raw PATH` with the kubeconfig the server wrote."""
    return subprocess.run(
        [_kubectl(), "--kubeconfig", str(server.kubeconfig), "get", "--raw", path],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_kubectl_get_raw(served: ServerProcess) -> None:
    external = kubectl_raw(served, f"{EXTERNAL}/default/jobs_pending?labelSelector=queue%3Dreports")
    assert external.returncode == 0, external.stderr
    (item,) = json.loads(external.stdout)["items"]
    assert (item["metricName"], item["metricLabels"], item["value"]) == (
        "jobs_pending",
        {"queue": "reports"},
        "2",
    )
    custom = kubectl_raw(served, f"{CUSTOM}/default/deployments.apps/worker/jobs_pending")
    assert custom.returncode == 0, custom.stderr
    (item,) = json.loads(custom.stdout)["items"]
    assert item["describedObject"] == {
        "kind": "Deployment",
        "namespace": "default",
        "name": "worker",
        "apiVersion": "apps/v1",
    }
    assert item["value"] == "2"
    discovery = kubectl_raw(served, "/apis/external.metrics.k8s.io/v1beta1")
    assert discovery.returncode == 0, discovery.stderr
    names = {resource["name"] for resource in json.loads(discovery.stdout)["resources"]}
    assert {"jobs_pending", "jobs_pending_here"} <= names


def _wait_status(client: httpx.Client, url: str, status: int, within: float = 30) -> httpx.Response:
    deadline = time.monotonic() + within
    while True:
        answer = client.get(url)
        if answer.status_code == status or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)


def test_a_database_outage_is_a_503_naming_the_backend_and_recovers_without_a_restart(
    private_jobs: JobsDatabase, tmp_path: Path
) -> None:
    database = private_jobs.server
    url = f"{EXTERNAL}/default/jobs_pending?labelSelector=queue%3Demails"
    with (
        serve_backends(
            tmp_path / "server", [entry(private_jobs.settings(tmp_path))], objects=OBJECTS
        ) as server,
        server.client() as client,
    ):
        pid = backend_ready(server).pid
        assert items(client, url) == [("emails", "4")]

        database.stop()
        down = _wait_status(client, url, 503)
        assert down.status_code == 503, down.text
        status = down.json()
        assert (status["kind"], status["reason"], status["code"]) == (
            "Status",
            "ServiceUnavailable",
            503,
        )
        assert "jobs backend" in status["message"] or "backend jobs" in status["message"]
        assert "database unreachable" in status["message"]
        custom = client.get(f"{CUSTOM}/default/deployments.apps/web/jobs_pending")
        assert custom.status_code == 503
        # A plugin does not take the replica out of the Service: /readyz passes, with the note.
        readyz = client.get("/readyz?verbose")
        assert readyz.status_code == 200
        assert "[+]backend-jobs ok (not ready, its metrics answer 503: database unreachable" in (
            readyz.text
        )
        failed = kubectl_raw(server, url)
        assert failed.returncode != 0
        assert "ServiceUnavailable" in failed.stderr or "503" in failed.stderr

        database.start()
        up = _wait_status(client, url, 200)
        assert up.status_code == 200, up.text
        assert items(client, url) == [("emails", "4")]
        assert items(client, f"{CUSTOM}/default/deployments.apps/*/jobs_pending") == [
            ("web", "3"),
            ("worker", "2"),
        ]
        assert server.pid == pid
        assert server.process.poll() is None  # the same server, never restarted
    log = server.logs()
    assert "backend jobs: not ready: database unreachable" in log
    assert "backend jobs: the database answers again" in log


def test_a_statement_timeout_is_a_504_naming_the_backend(
    jobs: JobsDatabase, tmp_path: Path
) -> None:
    settings = jobs.settings(tmp_path, statementTimeout="300ms")
    settings["external"] = [
        *settings["external"],
        {"metric": "slow", "queryAll": "SELECT 1 FROM pg_sleep(3)"},
    ]
    with (
        serve_backends(tmp_path / "server", [entry(settings)], objects=OBJECTS) as server,
        server.client() as client,
    ):
        backend_ready(server)
        started = time.monotonic()
        answer = client.get(f"{EXTERNAL}/default/slow")
        elapsed = time.monotonic() - started
        assert answer.status_code == 504, answer.text
        assert answer.json()["message"] == (
            "backend jobs: the query of slow ran past the statement timeout (300 ms)"
        )
        assert elapsed < 2.5  # the database's timeout, not pg_sleep's 3 s nor the 5 s deadline
        assert items(client, f"{EXTERNAL}/default/jobs_pending?labelSelector=queue%3Demails") == [
            ("emails", "4")
        ]


def _refused(tmp_path: Path, settings: dict[str, Any], *, timeout: str = "5s") -> str:
    """Start the server on a file with this entry; it must exit 2. Its log."""
    config = tmp_path / "backends.yaml"
    config.write_text(
        yaml.safe_dump({"backends": [{**entry(settings), "timeout": timeout}]}, sort_keys=False)
    )
    command = server_command(tmp_path, "--backends-config", str(config))
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr
    assert command[0] == sys.executable
    return result.stderr


def test_bad_settings_stop_the_start_naming_the_entry_and_every_field(tmp_path: Path) -> None:
    settings = dict(example_entry()["settings"])
    settings.update(poolSize=0, statementTimeout="2x")
    settings["external"] = [{**settings["external"][0], "query": "SELECT %(queu)s"}]
    log = _refused(tmp_path, settings)
    # One start-up line names every problem, separated by "; ".
    assert "start-up failed: cannot start: backends[0] 'jobs' (type postgres): " in log
    where = "backends[0] 'jobs' (type postgres): "
    assert f"{where}settings.poolSize: Input should be greater than or equal to 1" in log
    assert f"{where}settings.statementTimeout: invalid duration '2x'" in log
    assert (
        f"{where}settings.external[0].query: unknown parameter %(queu)s; this query has: "
        "namespace, queue"
    ) in log


def test_a_statement_timeout_past_the_entry_deadline_stops_the_start(tmp_path: Path) -> None:
    settings = dict(example_entry()["settings"], passwordFile=str(tmp_path / "password"))
    (tmp_path / "password").write_text("x\n")
    log = _refused(tmp_path, settings, timeout="1s")
    assert (
        "backends[0] 'jobs' (type postgres): making the backend failed: ValueError: "
        "statementTimeout (2s) must be below the backend's fetch deadline (1s"
    ) in log
