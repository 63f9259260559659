"""The tutorial of docs/backends.md runs as written."""

from __future__ import annotations

from pathlib import Path

import pytest

from custom_metrics_server import sdk
from custom_metrics_server.testing.serving import (
    CustomQuery,
    ExternalQuery,
    query_every_form,
    serve_backends,
)
from tests.sdk.tutorial import import_tutorial, tutorial_source, write_tutorial

SETTINGS = {"queues": {"emails": 12, "reports": 3}, "running": {"default/web-0": 2}}


def test_the_tutorial_is_about_thirty_lines() -> None:
    lines = [line for line in tutorial_source().splitlines() if line.strip()]
    assert len(lines) <= 35


def test_the_tutorial_answers_both_apis(tmp_path: Path) -> None:
    module = import_tutorial(tmp_path)
    settings = module.make.settings_model.model_validate(SETTINGS)
    backend = module.make(settings)
    assert isinstance(backend, sdk.CustomMetricsSource)
    assert isinstance(backend, sdk.ExternalMetricsSource)
    external = backend.fetch_external(
        sdk.ExternalBackendRequest(
            metric="jobs_waiting",
            namespace="default",
            metric_selector=sdk.parse_selector("queue=emails"),
        )
    )
    assert [(s.labels, s.value) for s in external] == [({"queue": "emails"}, 12)]
    pods = sdk.ResourceMapping(sdk.GroupResource("", "pods"), "v1", "Pod", True)
    custom = backend.fetch(
        sdk.BackendRequest(
            metric=sdk.MetricInfo(pods.group_resource, True, "jobs_running"),
            mapping=pods,
            objects=(("default", "web-0"), ("default", "web-1")),
            metric_selector=sdk.EVERYTHING,
        )
    )
    assert [(s.described.name, s.value) for s in custom] == [("web-0", 2)]


@pytest.mark.integration
def test_the_tutorial_is_served_at_every_url_form_by_a_real_server(tmp_path: Path) -> None:
    write_tutorial(tmp_path / "plugin")
    objects = [
        {"resource": "pods", "namespace": "default", "name": name, "labels": {"app": "web"}}
        for name in ("web-0", "web-1")
    ]
    entry = {"name": "jobs", "type": "jobs_backend:make", "settings": SETTINGS}
    with serve_backends(
        tmp_path / "server", [entry], objects=objects, pythonpath=[tmp_path / "plugin"]
    ) as server:
        answers = query_every_form(
            server,
            custom=[CustomQuery("pods", "jobs_running", "default", "web-0", "app=web")],
            external=[ExternalQuery("jobs_waiting", "default", "queue=emails")],
        )
        with server.client() as client:
            one = client.get(
                "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/jobs_waiting"
                "?labelSelector=queue%3Dreports"
            )
    assert [(i["metricLabels"], i["value"]) for i in one.json()["items"]] == [
        ({"queue": "reports"}, "3")
    ]
    assert (
        len(answers) == 12
    )  # 9 custom (3 versions x 2 forms, all namespaces, protobuf, discovery), 3 external
