"""The backends file in a real server: routes send metrics to the backend they name, and a
changed file is reloaded without a restart, a broken one logged and skipped."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_metrics_server.testing.serving import serve_backends

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
P = "tests.fakes.plugins"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default"


def eventually(check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.1)


def write(path: Path, entries: list[dict[str, Any]]) -> None:
    """Replace the file at once, as a ConfigMap update does (a reload never reads half)."""
    staged = path.with_suffix(".staged")
    staged.write_text(yaml.safe_dump({"backends": entries}))
    staged.replace(path)


def test_a_changed_file_is_served_without_a_restart_and_a_broken_one_is_skipped(
    tmp_path: Path,
) -> None:
    first = [{"name": "a", "type": f"{P}:instant", "settings": {"prefix": "a"}}]
    with serve_backends(
        tmp_path, first, pythonpath=[ROOT], args=["--backends-config-reload-interval", "100ms"]
    ) as server:
        path = tmp_path / "backends.yaml"
        with server.client() as client:

            def status(metric: str) -> int:
                return client.get(f"{EXTERNAL}/{metric}").status_code

            def items(metric: str) -> int:
                return len(client.get(f"{EXTERNAL}/{metric}").json()["items"])

            assert items("a_total") == 2
            # Routes: `b` answers every metric named b_* (a claim, listed or not).
            write(
                path,
                [
                    *first,
                    {
                        "name": "b",
                        "type": f"{P}:instant",
                        "settings": {"prefix": "b"},
                        "routes": [{"api": "external", "metric": "b_*"}],
                    },
                ],
            )
            eventually(lambda: items("b_total") == 2)
            assert items("b_unlisted") == 0
            assert items("a_total") == 2
            pid = server.pid
            write(path, [{"name": "a", "type": "nosuch"}])
            eventually(lambda: "not reloaded, keeping the last good one" in server.logs())
            assert items("b_total") == 2
            write(path, first)
            eventually(lambda: items("b_total") == 0)
            assert status("a_total") == 200
            metrics = client.get("/metrics").text
        assert server.pid == pid
        assert (
            'custom_metrics_server_backends_config_reloads_total{result="success"} 2.0' in metrics
        )
        assert (
            'custom_metrics_server_backends_config_reloads_total{result="failure"} 1.0' in metrics
        )
        assert "custom_metrics_server_backends_config_last_reload_successful 1.0" in metrics
        assert "backends[0] 'a' (type nosuch): no backend type 'nosuch'" in server.logs()
    # Dropped backends stop once their deadline has passed (or at shutdown): once each.
    assert server.logs().count("backend b stopped") == 1
