"""The step-by-step SQLite tutorial of docs/backends.md runs as written: its files are taken from
the page (`tutorial_files`), its own tests pass with the pytest configuration it shows (and fail
without it), it passes `mypy --strict` with the `MYPYPATH` it documents, and a real server
serves it over TLS at every URL form, to curl with the certificate file the page names, and
explains the Deployment that does not exist."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import orjson
import pytest
import yaml

from custom_metrics_server.machinery.quantity import format_quantity
from custom_metrics_server.testing.serving import (
    CustomQuery,
    ExternalQuery,
    query_every_form,
    serve_backends,
)
from tests.sdk.tutorial import tutorial_files

REPO = Path(__file__).resolve().parents[2]
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/deployments.apps"


def _write(directory: Path, *, config: bool = True) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in tutorial_files().items():
        if config or name != "pyproject.toml":
            (directory / name).write_text(text)
    return directory


def _database(directory: Path) -> None:
    with closing(sqlite3.connect(directory / "jobs.db")) as db:
        db.executescript((directory / "schema.sql").read_text())


def _run(command: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    environment.pop("MYPYPATH", None)
    environment.update(env)
    return subprocess.run(
        command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_tutorial_builds_every_file_it_names() -> None:
    files = tutorial_files()
    assert sorted(files) == [
        "backends.yaml",
        "pyproject.toml",
        "schema.sql",
        "sqlite_jobs.py",
        "test_sqlite_jobs.py",
    ]
    lines = [line for line in files["sqlite_jobs.py"].splitlines() if line.strip()]
    assert len(lines) <= 90


def test_its_own_tests_pass_with_the_pytest_configuration_it_shows(tmp_path: Path) -> None:
    pytest_command = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly"]
    pytest_command += ["-p", "no:cacheprovider", "-p", "no:cov"]
    shown = _run(pytest_command, _write(tmp_path / "with"), PYTHONPATH=".")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "2 passed" in shown.stdout
    without = _run(pytest_command, _write(tmp_path / "without", config=False), PYTHONPATH=".")
    assert without.returncode == 1
    assert "async def functions are not natively supported" in without.stdout


def test_it_passes_mypy_strict_with_the_mypypath_it_documents(tmp_path: Path) -> None:
    directory = _write(tmp_path / "plugin")
    command = [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache")]
    command += ["sqlite_jobs.py", "test_sqlite_jobs.py"]
    checked = _run(command, directory, MYPYPATH=str(REPO))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_float_is_rounded_up_at_the_nano_scale_unless_the_backend_rounds_it() -> None:
    assert format_quantity(0.1 + 0.2) == "300000001n"
    assert format_quantity(round(0.1 + 0.2, 3)) == "300m"
    assert format_quantity(1 / 3) == "333333334n"
    assert format_quantity(round(1 / 3, 3)) == "333m"


@pytest.mark.integration
def test_a_real_server_serves_it_as_the_page_says(tmp_path: Path) -> None:
    plugin = _write(tmp_path / "plugin")
    server_dir = tmp_path / "server"
    server_dir.mkdir()
    _database(plugin)
    (plugin / "jobs.db").rename(server_dir / "jobs.db")  # `database: jobs.db`, beside the file
    entries = yaml.safe_load(tutorial_files()["backends.yaml"])["backends"]
    with serve_backends(server_dir, entries, pythonpath=[plugin]) as server:
        assert "/deployments.apps/*/deploy_error_rate'" in server.banner
        assert "/namespaces/default/pending_jobs'" in server.banner
        answers = query_every_form(
            server,
            custom=[
                CustomQuery("deployments.apps", "deploy_error_rate", "default", "web", "app=web")
            ],
            external=[ExternalQuery("pending_jobs", "default", "queue=emails")],
        )
        assert len(answers) == 12
        with server.client() as client:
            reports = client.get(
                "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/pending_jobs",
                params={"labelSelector": "queue=reports"},
            ).json()
            idle = client.get(f"{CUSTOM}/idle/deploy_error_rate")
            ghost = client.get(f"{CUSTOM}/ghost/deploy_error_rate", params={"explain": "1"})
        assert [item["value"] for item in reports["items"]] == ["0"]
        assert idle.status_code == 404  # no requests: no rate, left out
        explained = ghost.json()
        assert explained["outcome"]["list"]["items"][0]["value"] == "500m"
        assert explained["causes"][0]["message"].startswith(
            "ghost does not exist in the cluster view (3 deployments.apps in namespace default)"
        )
        curl = shutil.which("curl")
        if curl is None:
            pytest.skip("no curl on this machine")
        cert = server.cert_dir / "apiserver.crt"
        shown = _run(
            [curl, "-sS", "--cacert", str(cert), f"{server.url}{CUSTOM}/web/deploy_error_rate"],
            tmp_path,
        )
        assert shown.returncode == 0, shown.stderr
        assert orjson.loads(shown.stdout)["items"][0]["value"] == "300m"
