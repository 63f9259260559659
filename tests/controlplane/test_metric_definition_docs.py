"""The MetricDefinition guides (docs/tutorial-metric-definitions.md,
docs/metric-definitions-platform.md, docs/migration-metric-definitions.md) against a real
kube-apiserver with the CRD installed: every MetricDefinition and autoscaling/v2
HorizontalPodAutoscaler block of the pages is accepted by a server-side dry run
(`?dryRun=All`: the schema, the CEL rules and the defaults applied, nothing stored), and the
same objects with a field broken are refused, so the check can fail. The unit-tier half
(backends-file blocks through the real loader): tests/test_metric_definition_docs.py.
"""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest

from tests.controlplane.cluster import ControlPlane
from tests.controlplane.deployment import Obj
from tests.controlplane.test_metric_definitions import collection, crd  # noqa: F401 (fixture)
from tests.test_metric_definition_docs import blocks_of_kind

pytestmark = pytest.mark.integration

HPAS = "/apis/autoscaling/v2/namespaces/{namespace}/horizontalpodautoscalers"


@pytest.fixture(scope="module")
def docs_namespace(control_plane: ControlPlane, crd: Obj) -> str:  # noqa: F811
    return control_plane.create_namespace("mdef-docs")


def dry_run(plane: ControlPlane, url: str, obj: dict[str, Any]) -> httpx.Response:
    with plane.admin_client() as client:
        return client.post(url, json=obj, params={"dryRun": "All"})


def moved(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["namespace"] = namespace
    return out


def test_every_metric_definition_of_the_guides_is_accepted(
    control_plane: ControlPlane, docs_namespace: str
) -> None:
    examples = blocks_of_kind("MetricDefinition")
    assert len(examples) >= 7
    for page, example in examples:
        response = dry_run(
            control_plane, collection(docs_namespace), moved(example, docs_namespace)
        )
        assert response.status_code == 201, (page, example["metadata"]["name"], response.text)
        stored = response.json()
        assert stored["spec"]["metricName"] == example["spec"]["metricName"]
        assert stored["spec"]["interval"] == example["spec"].get("interval", "30s")
    # A dry run stores nothing.
    listed = control_plane.get_json(collection(docs_namespace))
    assert listed["items"] == []


def test_a_guide_definition_with_a_broken_field_is_refused(
    control_plane: ControlPlane, docs_namespace: str
) -> None:
    _, example = blocks_of_kind("MetricDefinition")[0]
    broken = moved(example, docs_namespace)
    broken["spec"]["interval"] = "1s"
    response = dry_run(control_plane, collection(docs_namespace), broken)
    assert response.status_code == 422, response.text
    assert "spec.interval" in response.text


def test_every_hpa_of_the_guides_is_accepted(
    control_plane: ControlPlane, docs_namespace: str
) -> None:
    hpas = blocks_of_kind("HorizontalPodAutoscaler")
    assert {hpa["apiVersion"] for _, hpa in hpas} == {"autoscaling/v2"}
    url = HPAS.format(namespace=docs_namespace)
    for page, hpa in hpas:
        response = dry_run(control_plane, url, moved(hpa, docs_namespace))
        assert response.status_code == 201, (page, hpa["metadata"]["name"], response.text)
        stored = response.json()["spec"]["metrics"]
        assert [m["type"] for m in stored] == [m["type"] for m in hpa["spec"]["metrics"]]


def test_a_guide_hpa_with_a_broken_field_is_refused(
    control_plane: ControlPlane, docs_namespace: str
) -> None:
    _, hpa = blocks_of_kind("HorizontalPodAutoscaler")[0]
    broken = moved(hpa, docs_namespace)
    broken["spec"]["metrics"][0]["pods"]["target"] = {"type": "AverageValue"}
    response = dry_run(control_plane, HPAS.format(namespace=docs_namespace), broken)
    assert response.status_code == 422, response.text
    assert "averageValue" in response.text
