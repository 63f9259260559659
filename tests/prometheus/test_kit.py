"""The Prometheus backend passes the conformance kit against a real Prometheus, in process and
served from a backends file by a real server over TLS."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from custom_metrics_server.domain import GroupResource
from custom_metrics_server.machinery.labels import EVERYTHING
from custom_metrics_server.prometheus.backend import PrometheusBackend
from custom_metrics_server.testing.kit import check_backend
from custom_metrics_server.testing.serving import (
    CustomQuery,
    ExternalQuery,
    query_every_form,
    serve_backends,
)
from tests.prometheus.conftest import CLUSTER, RULES, fixture_cluster, settings_for
from tests.prometheus.real_prometheus import RealPrometheus

PODS = GroupResource("", "pods")


async def test_the_prometheus_backend_passes_the_kit(running_prometheus: RealPrometheus) -> None:
    cluster = fixture_cluster()
    backend = PrometheusBackend(cluster, settings_for(running_prometheus.url))
    pods = cluster.list_objects(PODS, "default", EVERYTHING)
    report = await check_backend(
        backend, cluster=cluster, objects={PODS: pods}, absent_as_zero={"memory_bytes"}
    )
    assert report.custom_metrics >= 5
    assert report.external_metrics == 2


@pytest.mark.integration
def test_a_prometheus_entry_is_served_at_every_url_form(
    tmp_path: Path, running_prometheus: RealPrometheus
) -> None:
    objects = yaml.safe_load(CLUSTER.read_text())["objects"]
    entry = {
        "name": "prometheus",
        "type": "prometheus",
        "settings": {
            "url": running_prometheus.url,
            "config": str(RULES),
            "metricsRelistInterval": "1s",
            "metricsMaxAge": "1h",
        },
    }
    with serve_backends(tmp_path, [entry], objects=objects) as server:
        query_every_form(
            server,
            custom=[
                CustomQuery("pods", "http_requests_per_second", "default", "web-0", "app=web"),
                CustomQuery("nodes", "node_load", None, "node-a"),
            ],
            external=[ExternalQuery("queue_depth", "default", "queue=emails")],
        )
