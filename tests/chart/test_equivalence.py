"""The chart and the kustomize manifests render the same deployment, so the two never drift.

Each chart render is compared object by object with the `kubectl kustomize` build it stands
for: the defaults with manifests/overlays/production, and each component and overlay with the
values that enable it. Objects are matched by kind, name and namespace; then compared whole,
after normalizing only what differs on purpose (docs/deployment.md, "What differs from the
kustomize manifests"):

* names: RENAMED (cluster-wide and node-agent names carry the release's full name);
* objects: KUSTOMIZE_ONLY (the Namespace) and CHART_ONLY (the generated CA's Secret); the
  chart's side also holds the CRDs of its `crds/` directory, which `helm install` creates
  before the templates (kustomize builds them from manifests/crds);
* labels and annotations: the chart's are a superset of kustomize's;
* label selectors: the chart's also hold app.kubernetes.io/instance; each must select the
  same pods (server or node agent) as kustomize's;
* the values of generated certificates (caBundle, Secret data): random on both sides, checked
  by test_tls.py;
* container args: compared as the real parser reads them, not as strings.

Anything else that differs fails, naming the object.
"""

from __future__ import annotations

import argparse
import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.conftest import (
    CHART,
    MANIFESTS,
    NAME,
    NAMESPACE,
    Obj,
    chart_crds,
    example,
    kustomize,
    one,
    render,
    subcommand_parser,
)
from tests.tools import missing

AGENT = "custom-metrics-node-agent"
CHART_AGENT = f"{NAME}-node-agent"
#: (kind, kustomize name) -> the chart's name for it.
RENAMED = {
    ("ClusterRoleBinding", "hpa-controller-custom-metrics"): f"{NAME}-hpa-controller",
    ("DaemonSet", AGENT): CHART_AGENT,
    ("ServiceAccount", AGENT): CHART_AGENT,
    ("NetworkPolicy", AGENT): CHART_AGENT,
}
#: The node agent's app.kubernetes.io/name label follows its object names.
RENAMED_LABELS = {AGENT: CHART_AGENT}
KUSTOMIZE_ONLY = {("Namespace", NAMESPACE, "")}
CHART_ONLY_GENERATED = {("Secret", f"{NAME}-tls-ca", NAMESPACE)}

SERVER_POD = "<server pods>"
AGENT_POD = "<node agent pods>"


# --- builds ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of manifests/ with the production overlay's certificates generated, and one
    overlay more per component: production plus that component."""
    if shutil.which("openssl") is None:
        missing("openssl", "generate-certs.sh needs it; .ci/run installs it")
    copy_dir = tmp_path_factory.mktemp("kustomize") / "manifests"
    shutil.copytree(MANIFESTS, copy_dir, ignore=shutil.ignore_patterns("certs"))
    result = subprocess.run(
        ["bash", str(copy_dir / "generate-certs.sh")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    production = copy_dir / "overlays" / "production"
    for component in ("prometheus", "resource-metrics", "node-agent"):
        overlay = copy_dir / "overlays" / f"production-{component}"
        shutil.copytree(production, overlay)
        kustomization = overlay / "kustomization.yaml"
        document = yaml.safe_load(kustomization.read_text())
        document["components"] = [f"../../components/{component}"]
        kustomization.write_text(yaml.safe_dump(document))
    return copy_dir


#: setup -> (the kustomize build it stands for, the chart's values files, --set)
PAIRS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "default": ("overlays/production", (), ()),
    "prometheus": ("overlays/production-prometheus", (), ("prometheus.enabled=true",)),
    "resource-metrics": ("overlays/production-resource-metrics", ("resource-metrics",), ()),
    "node-agent": ("overlays/production-node-agent", ("node-agent",), ()),
    "cert-manager": ("overlays/cert-manager", ("cert-manager",), ()),
}


def builds(manifests: Path, setup: str) -> tuple[list[Obj], list[Obj]]:
    directory, examples, sets = PAIRS[setup]
    ours = render(*(example(name) for name in examples), sets=sets) + chart_crds()
    return ours, kustomize(manifests / directory)


# --- normalization --------------------------------------------------------------------------------


def _key(obj: Obj) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace", "")


def _renamed(obj: Obj) -> tuple[str, str, str]:
    kind, name, namespace = _key(obj)
    return kind, RENAMED.get((kind, name), name), namespace


def _pods(labels: dict[str, str]) -> str:
    """Which pods a label selector means: the server's or the node agent's."""
    name = labels.get("app.kubernetes.io/name")
    name = RENAMED_LABELS.get(name, name)  # type: ignore[arg-type]
    if name == NAME:
        return SERVER_POD
    if name == CHART_AGENT:
        return AGENT_POD
    raise AssertionError(f"a selector for neither pods: {labels}")


def _replace_selectors(node: Any) -> Any:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "matchLabels":
                out[key] = _pods(value)
            else:
                out[key] = _replace_selectors(value)
        return out
    if isinstance(node, list):
        return [_replace_selectors(item) for item in node]
    return node


def _parsed_args(args: list[str]) -> dict[str, Any]:
    """The args as the server reads them. The node agent selector is a selector (see
    _replace_selectors); test_render.py checks it finds the agent pods."""
    name = args[0]
    parsed: argparse.Namespace = subcommand_parser(name).parse_args(args[1:])
    values = dict(vars(parsed))
    if name == "serve" and values["usage_source"] == "node-agent":
        selector = dict(pair.split("=", 1) for pair in values["node_agent_selector"].split(","))
        values["node_agent_selector"] = _pods(selector)
    return {"subcommand": name, **values}


def normalize(obj: Obj) -> Obj:
    """The object minus what differs on purpose (see the module docstring)."""
    # A CRD's schema describes label selectors (matchLabels) rather than holding one.
    crd = obj["kind"] == "CustomResourceDefinition"
    out: Obj = copy.deepcopy(obj) if crd else _replace_selectors(copy.deepcopy(obj))
    metadata = out["metadata"]
    metadata.pop("labels", None)
    metadata.pop("annotations", None)
    kind, metadata["name"], _ = _renamed(obj)
    if kind == "Service":
        out["spec"]["selector"] = _pods(obj["spec"]["selector"])
    if kind in {"Deployment", "DaemonSet"}:
        template = out["spec"]["template"]
        template["metadata"] = {}  # its labels: _pods() of the selector must match them (below)
        account = template["spec"]["serviceAccountName"]
        template["spec"]["serviceAccountName"] = RENAMED.get(("ServiceAccount", account), account)
        for container in template["spec"]["containers"]:
            container["args"] = _parsed_args(container["args"])
    if kind == "APIService" and "caBundle" in out["spec"]:
        out["spec"]["caBundle"] = "<a CA>"
    if kind == "Secret":
        out["data"] = dict.fromkeys(obj["data"], "<generated>")
    return out


def _label_subset(kustomize_meta: dict[str, Any], chart_meta: dict[str, Any], what: str) -> None:
    theirs = {
        key: RENAMED_LABELS.get(value, value) for key, value in kustomize_meta.get(what, {}).items()
    }
    ours = chart_meta.get(what, {})
    missing = {k: v for k, v in theirs.items() if ours.get(k) != v}
    assert not missing, f"{what} of kustomize missing from the chart: {missing}"


def assert_equivalent(
    ours: list[Obj], theirs: list[Obj], chart_only: set[tuple[str, str, str]]
) -> None:
    by_key = {_key(o): o for o in ours}
    assert len(by_key) == len(ours), "the chart renders an object twice"
    mapped = {_renamed(o): o for o in theirs}
    assert set(mapped) - KUSTOMIZE_ONLY == set(by_key) - chart_only, (
        f"only kustomize: {sorted(set(mapped) - KUSTOMIZE_ONLY - set(by_key))}; "
        f"only the chart: {sorted(set(by_key) - chart_only - set(mapped))}"
    )
    for key, kustomize_obj in mapped.items():
        if key in KUSTOMIZE_ONLY:
            continue
        chart_obj = by_key[key]
        assert normalize(chart_obj) == normalize(kustomize_obj), f"{key} differs"
        _label_subset(kustomize_obj["metadata"], chart_obj["metadata"], "labels")
        _label_subset(kustomize_obj["metadata"], chart_obj["metadata"], "annotations")
        if key[0] in {"Deployment", "DaemonSet"}:
            selector = chart_obj["spec"]["selector"]["matchLabels"]
            labels = chart_obj["spec"]["template"]["metadata"]["labels"]
            assert selector.items() <= labels.items()
            _label_subset(
                kustomize_obj["spec"]["template"]["metadata"],
                chart_obj["spec"]["template"]["metadata"],
                "labels",
            )


# --- tests ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("setup", list(PAIRS))
def test_chart_renders_what_kustomize_builds(manifests: Path, setup: str) -> None:
    ours, theirs = builds(manifests, setup)
    chart_only = CHART_ONLY_GENERATED if setup != "cert-manager" else set()
    assert_equivalent(ours, theirs, chart_only)


def test_the_default_render_is_the_production_overlay_in_kinds_names_rbac_and_api_services(
    manifests: Path,
) -> None:
    """The issue's four points, spelled out (test_chart_renders_what_kustomize_builds compares
    whole objects; this says what matters most in as many words)."""
    ours, theirs = builds(manifests, "default")
    assert sorted({o["kind"] for o in ours}) == sorted({o["kind"] for o in theirs} - {"Namespace"})
    assert {_key(o) for o in ours} - CHART_ONLY_GENERATED == {
        _renamed(o) for o in theirs
    } - KUSTOMIZE_ONLY
    for kind in ("ClusterRole", "Role"):
        assert {o["metadata"]["name"]: o["rules"] for o in ours if o["kind"] == kind} == {
            _renamed(o)[1]: o["rules"] for o in theirs if o["kind"] == kind
        }
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        assert {
            o["metadata"]["name"]: (o["roleRef"], o["subjects"]) for o in ours if o["kind"] == kind
        } == {_renamed(o)[1]: (o["roleRef"], o["subjects"]) for o in theirs if o["kind"] == kind}

    def api_services(objects: list[Obj]) -> dict[str, Obj]:
        return {
            o["metadata"]["name"]: {k: v for k, v in o["spec"].items() if k != "caBundle"}
            for o in objects
            if o["kind"] == "APIService"
        }

    assert api_services(ours) == api_services(theirs)
    assert len(api_services(ours)) == 3


def test_a_difference_is_caught(manifests: Path) -> None:
    """The comparison fails on a change in any field (here: one verb, one flag, one port, one
    required field of the CRD's schema)."""
    ours, theirs = builds(manifests, "default")
    chart_only = CHART_ONLY_GENERATED
    changed = copy.deepcopy(ours)
    one(changed, "ClusterRole", NAME)["rules"][1]["verbs"].append("list")
    with pytest.raises(AssertionError, match="ClusterRole"):
        assert_equivalent(changed, theirs, chart_only)
    changed = copy.deepcopy(ours)
    one(changed, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"].append(
        "--metric-resolution=30s"
    )
    with pytest.raises(AssertionError, match="Deployment"):
        assert_equivalent(changed, theirs, chart_only)
    changed = copy.deepcopy(ours)
    one(changed, "Service")["spec"]["ports"][0]["port"] = 8443
    with pytest.raises(AssertionError, match="Service"):
        assert_equivalent(changed, theirs, chart_only)
    changed = copy.deepcopy(ours)
    crd = one(changed, "CustomResourceDefinition")
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "required"
    ].remove("servedAs")
    with pytest.raises(AssertionError, match="CustomResourceDefinition"):
        assert_equivalent(changed, theirs, chart_only)
    with pytest.raises(AssertionError, match="only kustomize"):
        assert_equivalent(
            [o for o in ours if o["kind"] != "PodDisruptionBudget"], theirs, chart_only
        )


def test_the_per_metric_rbac_example_is_manifests_examples() -> None:
    ours = render(example("metric-reader-rbac"))
    theirs = kustomize(MANIFESTS / "examples")
    for kustomize_obj in theirs:
        chart_obj = one(ours, kustomize_obj["kind"], kustomize_obj["metadata"]["name"])
        assert normalize(chart_obj) == normalize(kustomize_obj)
    # Opt-in: nothing of it in the defaults.
    assert not [o for o in render() if o["metadata"].get("namespace") == "default"]


def test_the_starter_rules_are_the_components_rules() -> None:
    ours = (CHART / "files" / "prometheus-rules.yaml").read_bytes()
    assert ours == (MANIFESTS / "components" / "prometheus" / "rules.yaml").read_bytes()
