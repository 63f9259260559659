"""The chart's `crds/` directory: the MetricDefinition CRD of manifests/crds, byte for byte, as
Helm installs it (and `helm template --include-crds` shows it), valid against the Kubernetes
1.37 schemas; and the chart's MetricDefinition RBAC, the same as manifests/base's.

The CRD's schema itself (descriptions, rule messages): tests/deployment/test_manifests_crds.py;
against the real API server: tests/controlplane/test_metric_definitions.py.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.chart.conftest import (
    CHART,
    MANIFESTS,
    NAME,
    Obj,
    chart_crds,
    helm,
    kustomize,
    one,
    render,
    select,
)
from tests.chart.test_render import schema_version

kubernetes_validate = pytest.importorskip("kubernetes_validate")

GROUP = "metrics.custom-metrics-server.io"
CRD_NAME = f"metricdefinitions.{GROUP}"
EDITOR = f"{NAME}:metric-definitions-editor"
VIEWER = f"{NAME}:metric-definitions-viewer"


def test_the_chart_ships_the_crds_of_manifests_byte_for_byte() -> None:
    ours = sorted(p.name for p in (CHART / "crds").glob("*"))
    theirs = sorted(p.name for p in (MANIFESTS / "crds").glob("*.yaml"))
    theirs.remove("kustomization.yaml")
    assert ours == theirs == ["custom-resource-definition-metric-definitions.yaml"]
    for name in ours:
        assert (CHART / "crds" / name).read_bytes() == (MANIFESTS / "crds" / name).read_bytes()


def test_helm_installs_the_crd_before_the_templates() -> None:
    """`--include-crds` prints what `helm install` creates first: the file as it is (no
    templating in crds/), and nothing of it without the flag."""
    with_crds = helm(
        "template", "custom-metrics-server", str(CHART), "--namespace", "custom-metrics",
        "--include-crds",
    ).stdout  # fmt: skip
    documents = [d for d in yaml.safe_load_all(with_crds) if d]
    assert documents[0]["kind"] == "CustomResourceDefinition"
    assert one(documents, "CustomResourceDefinition", CRD_NAME) == one(
        chart_crds(), "CustomResourceDefinition"
    )
    assert not select(render(), "CustomResourceDefinition")


def test_the_crd_matches_the_kubernetes_1_37_schemas() -> None:
    assert schema_version() == "1.37"
    (crd,) = chart_crds()
    kubernetes_validate.validate(crd, schema_version(), strict=True)
    broken = copy.deepcopy(crd)
    broken["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "x-kubernetes-validations"
    ][0]["mesage"] = "a misspelt key"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, schema_version(), strict=True)


def _rules(objects: list[Obj], name: str) -> list[Obj]:
    return one(objects, "ClusterRole", name)["rules"]  # type: ignore[no-any-return]


def _group_rules(rules: list[Obj]) -> list[Obj]:
    """The rules of the server's ClusterRole about MetricDefinitions, the EndpointSlices of
    their `http` sources, and Events."""
    return [
        r
        for r in rules
        if GROUP in r["apiGroups"]
        or "events" in r["resources"]
        or "endpointslices" in r["resources"]
    ]


def test_the_metric_definition_rbac_is_the_manifests_rbac() -> None:
    ours = render()
    theirs = kustomize(MANIFESTS / "base")
    for name in (EDITOR, VIEWER):
        assert _rules(ours, name) == _rules(theirs, name)
        ours_labels, theirs_labels = (
            {
                key: value
                for key, value in one(objects, "ClusterRole", name)["metadata"]["labels"].items()
                if key.startswith("rbac.authorization.k8s.io/")
            }
            for objects in (ours, theirs)
        )
        assert ours_labels == theirs_labels
    server_rules = _group_rules(_rules(ours, NAME))
    assert server_rules == _group_rules(_rules(theirs, NAME))
    assert server_rules == [
        {
            "apiGroups": ["discovery.k8s.io"],
            "resources": ["endpointslices"],
            "verbs": ["list", "watch"],
        },
        {"apiGroups": [GROUP], "resources": ["metricdefinitions"], "verbs": ["list", "watch"]},
        {
            "apiGroups": [GROUP],
            "resources": ["metricdefinitions/status"],
            "verbs": ["update"],
        },
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
    ]


def test_the_aggregated_roles_can_be_left_out() -> None:
    without = render(sets=("rbac.metricDefinitionRoles=false",))
    names = {o["metadata"]["name"] for o in select(without, "ClusterRole")}
    assert EDITOR not in names
    assert VIEWER not in names
    # The server's own grants stay: it still reads the definitions it serves.
    assert _group_rules(_rules(without, NAME)) == _group_rules(_rules(render(), NAME))
    assert {o["metadata"]["name"] for o in select(render(), "ClusterRole")} - names == {
        EDITOR,
        VIEWER,
    }
