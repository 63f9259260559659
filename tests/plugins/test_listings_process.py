"""A plugin's listing changed in place reaches discovery and routing in a real server process
over TLS: listings are compared by value, not by the identity of the object a plugin returns
(`query.routing`, `plugins.adapter`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from custom_metrics_server.testing.server_process import ServerProcess
from custom_metrics_server.testing.serving import serve_backends

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DISCOVERY = "/apis/custom.metrics.k8s.io/v1beta2"
PODS = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods"
#: The server re-reads listings every second; this is a margin a loaded machine cannot cross
#: by accident, while the defect (a listing never re-read) never shows the change at all.
PATIENCE = 30.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serve_backends(
        tmp_path_factory.mktemp("listings"),
        [{"name": "growing", "type": "tests.fakes.plugins:growing"}],
        objects=[{"resource": "pods", "namespace": "default", "name": "web-0"}],
        pythonpath=[ROOT],
    ) as running:
        yield running


def test_a_metric_added_to_the_same_set_object_is_discovered_and_served(
    server: ServerProcess,
) -> None:
    with server.client() as client:
        names = {r["name"] for r in client.get(DISCOVERY).json()["resources"]}
        assert "pods/grow_pod" in names
        assert "pods/grown_pod" not in names
        assert client.get(f"{PODS}/web-0/grown_pod").status_code == 404
        assert client.get(f"{PODS}/web-0/grow_pod").status_code == 200  # adds grown_pod
        deadline = time.monotonic() + PATIENCE
        while True:
            names = {r["name"] for r in client.get(DISCOVERY).json()["resources"]}
            if "pods/grown_pod" in names or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert "pods/grown_pod" in names
        answer = client.get(f"{PODS}/web-0/grown_pod")
        assert answer.status_code == 200, answer.text
        assert [item["value"] for item in answer.json()["items"]] == ["1"]
