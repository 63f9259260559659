"""Static checks of manifests/crds (the MetricDefinition CRD, docs/metric-definitions.md): the
kustomization builds it alone and manifests/base includes it; the schema is structural, every
field has a description (`kubectl explain` shows them), every CEL rule's message names the field
it is about, the printer columns read fields the schema has; and it matches the Kubernetes 1.37
schemas (kubernetes-validate, strict).

What the API server does with it (install, refusals with these messages, explain, RBAC):
tests/controlplane/test_metric_definitions.py. The chart's copy: tests/chart/test_crds.py.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import get_args

import pytest
import yaml

from custom_metrics_server.plugins.config import PolicyAnswer, RouteEntry
from tests.deployment.test_manifests import MANIFESTS, Obj, kustomize, one

CRD_FILE = MANIFESTS / "crds" / "custom-resource-definition-metric-definitions.yaml"
GROUP = "metrics.custom-metrics-server.io"


def crd() -> Obj:
    document: Obj = yaml.safe_load(CRD_FILE.read_text())
    return document


def version(document: Obj) -> Obj:
    (only,) = document["spec"]["versions"]
    return only  # type: ignore[no-any-return]


def schema(document: Obj) -> Obj:
    return version(document)["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def nodes(node: Obj, path: str) -> Iterator[tuple[str, Obj]]:
    """Every schema node with its field path (`spec.source.schedule.windows[]`)."""
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from nodes(child, f"{path}.{name}" if path else name)
    if "items" in node:
        yield from nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from nodes(node["additionalProperties"], f"{path}[*]")


def test_manifests_crds_builds_the_crd_alone_and_the_base_includes_it() -> None:
    alone = kustomize(MANIFESTS / "crds")
    assert alone == [crd()]
    base = kustomize(MANIFESTS / "base")
    assert one(base, "CustomResourceDefinition") == crd()  # the base's labels are the file's


def test_the_resource_is_namespaced_v1alpha1_with_a_status_subresource() -> None:
    document = crd()
    spec = document["spec"]
    assert document["metadata"]["name"] == f"metricdefinitions.{GROUP}"
    assert spec["group"] == GROUP
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "MetricDefinition"
    assert spec["names"]["plural"] == "metricdefinitions"
    only = version(document)
    assert (only["name"], only["served"], only["storage"]) == ("v1alpha1", True, True)
    assert only["subresources"] == {"status": {}}


def test_the_schema_is_structural() -> None:
    """Every node says its type (or is int-or-string); objects list their properties or say
    what their values are; nothing is preserved unknown. (kube-apiserver refuses a CRD whose
    schema is not structural; this finds it before.)"""
    for path, node in nodes(schema(crd()), ""):
        assert "type" in node or node.get("x-kubernetes-int-or-string") is True, path
        assert "x-kubernetes-preserve-unknown-fields" not in node, path
        if node.get("type") == "object" and path != "metadata":
            assert "properties" in node or "additionalProperties" in node, path


def test_every_field_has_a_description() -> None:
    # metadata is the ObjectMeta kube-apiserver describes itself.
    missing = [
        path
        for path, node in nodes(schema(crd()), "")
        if path != "metadata"
        and not path.endswith("[*]")  # a map's values: described by the map
        and not (path.endswith("[]") and node.get("type") != "object")  # a list of scalars
        and not node.get("description", "").strip()
    ]
    assert missing == []


def _rules() -> list[tuple[str, Obj]]:
    return [
        (path, rule)
        for path, node in nodes(schema(crd()), "")
        for rule in node.get("x-kubernetes-validations", [])
    ]


def test_every_rule_has_a_message_naming_its_field() -> None:
    """The API server prefixes its error with the field path; the message names the field again
    so that it reads on its own (in a GitOps tool's summary, say)."""
    rules = _rules()
    assert len(rules) >= 20
    for path, rule in rules:
        assert set(rule) <= {"rule", "message", "fieldPath"}, path
        field = path + rule.get("fieldPath", "")
        assert rule["message"].startswith(field), (field, rule["message"])


def test_the_cross_field_rules_are_where_they_are_documented() -> None:
    """The one-source rule and the cross-field rules sit on the object holding both fields."""
    by_path: dict[str, list[str]] = {}
    for path, rule in _rules():
        by_path.setdefault(path + rule.get("fieldPath", ""), []).append(rule["message"])
    assert "spec.source" in by_path  # exactly one source
    assert "spec.source.type" in by_path  # the type names it
    for field in ("spec.maxAge", "spec.servedAs.type", "spec.servedAs.podValues"):
        assert field in by_path, field
    assert "spec.source.schedule.windows[].end" in by_path
    assert "spec.source.formula.inputs" in by_path


def _jsonpath_exists(root: Obj, jsonpath: str) -> bool:
    """Whether a printer column's path (`.a.b`, `.a[?(@.x=="y")].b`) names schema fields."""
    node = root
    for part in re.sub(r"\[[^\]]*\]", "[]", jsonpath).lstrip(".").split("."):
        name, _, selector = part.partition("[")
        if name == "metadata" and node is root:
            return True
        node = node.get("properties", {}).get(name)
        if node is None:
            return False
        if selector:
            node = node["items"]
    return True


def test_printer_columns_show_source_ready_value_and_age() -> None:
    columns = version(crd())["additionalPrinterColumns"]
    default = [c["name"] for c in columns if not c.get("priority")]
    assert default == ["Metric", "Source", "Ready", "Value", "Age"]
    for column in columns:
        assert _jsonpath_exists(schema(crd()), column["jsonPath"]), column
    assert not _jsonpath_exists(schema(crd()), ".status.lastVaule")


def test_the_failure_policy_has_the_backends_file_words() -> None:
    """absent, failure and maxAge mean what they mean on a route of the backends file."""
    spec = schema(crd())["properties"]["spec"]["properties"]
    for key in ("absent", "failure"):
        assert spec[key]["enum"] == list(get_args(PolicyAnswer))
        assert key in RouteEntry.model_fields
    assert RouteEntry.model_fields["max_age"].alias == "maxAge"
    assert "maxAge" in spec


def test_the_crd_matches_the_kubernetes_1_37_schemas() -> None:
    # The lint extra installs it (`make install`); the other checks here do not need it.
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    assert kubernetes_validate.latest_version().startswith("1.37")
    kubernetes_validate.validate(crd(), "1.37", strict=True)
    broken = copy.deepcopy(crd())
    broken["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "interval"
    ]["maxLenght"] = 32
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.37", strict=True)
