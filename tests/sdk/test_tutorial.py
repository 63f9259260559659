"""The tutorial of docs/backends.md runs as written."""

from __future__ import annotations

from pathlib import Path

from custom_metrics_server import sdk
from tests.sdk.tutorial import import_tutorial, tutorial_source

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
