"""The built-in in-memory types, each as the one entry of a backends file, answer every URL form
in a real server over TLS (the conformance kit's wire half)."""

from __future__ import annotations

from pathlib import Path

import pytest

from custom_metrics_server.backends.simulated import DemoSettings, SimulatedCluster
from custom_metrics_server.domain import GroupResource
from custom_metrics_server.machinery.label_parser import parse_selector
from custom_metrics_server.testing.serving import (
    CustomQuery,
    ExternalQuery,
    query_every_form,
    serve_backends,
)
from tests.conftest import CONTRACT_FIXTURE

pytestmark = pytest.mark.integration


def test_the_demo_type_is_served_at_every_url_form(tmp_path: Path) -> None:
    world = SimulatedCluster(DemoSettings(pods=20))
    (web, *_) = world.cluster.list_objects(
        GroupResource("", "pods"), "default", parse_selector("app=web")
    )
    entry = {"name": "demo", "type": "demo", "settings": {"pods": 20}}
    with serve_backends(tmp_path, [entry]) as server:
        query_every_form(
            server,
            custom=[
                CustomQuery("pods", "http_requests_per_second", "default", web[1], "app=web"),
                CustomQuery("deployments.apps", "http_requests_per_second", "default", "web"),
                CustomQuery("namespaces", "queue_length", None, "default"),
                CustomQuery(
                    "pods",
                    "kube_pod_resource_request_hpa",
                    "default",
                    web[1],
                    "app=web",
                    metric_selector="resource=cpu",
                ),
            ],
            external=[
                ExternalQuery("queue_depth", "default", "queue=emails"),
                ExternalQuery("cluster_requests_per_second", "default"),
            ],
        )


def test_the_fixture_type_is_served_at_every_url_form(tmp_path: Path) -> None:
    entry = {"name": "contract", "type": "fixture", "settings": {"file": str(CONTRACT_FIXTURE)}}
    with serve_backends(tmp_path, [entry]) as server:
        query_every_form(
            server,
            custom=[
                CustomQuery("pods", "some-metric", "ns", "foo"),
                CustomQuery("nodes", "some-metric", None, "node-1"),
                CustomQuery("namespaces", "some-metric", None, "ns"),
            ],
            external=[ExternalQuery("my-external-metric", "ns", "foo=bar")],
        )
