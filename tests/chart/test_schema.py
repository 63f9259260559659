"""values.schema.json: a typo fails `helm template`, `helm lint` and `helm install` naming the
key; every object with fixed keys is closed; insecure TLS towards the aggregator cannot be
expressed; the defaults and every example are valid."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.chart.conftest import CHART, EXAMPLES, NAMESPACE, RELEASE, helm, render, render_fails

# jsonschema comes with kubernetes-validate (the lint extra, `make install`).
jsonschema = pytest.importorskip("jsonschema")

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())

#: Objects whose keys are not the chart's: Kubernetes objects passed through as they are
#: (checked by the API server, and by the kubernetes-validate tests for the examples) and
#: documents of the server's own formats (checked by the server when it loads them).
FREE_FORM = {
    "global",  # a parent chart's values; Helm adds the key to every subchart
    "affinity",
    "podSecurityContext",
    "securityContext",
    "startupProbe",
    "livenessProbe",
    "readinessProbe",
    "lifecycle",
    "prometheus.config",  # prometheus-adapter's rules file
    "backends.config",  # the server's backends file
    "nodeAgent.affinity",
    "nodeAgent.updateStrategy",
    "nodeAgent.podSecurityContext",
    "nodeAgent.securityContext",
    "serviceMonitor.tlsConfig",  # a Prometheus Operator TLSConfig
    "serviceMonitor.authorization",  # a Prometheus Operator SafeAuthorization
    # list items that are Kubernetes or Prometheus Operator objects
    "imagePullSecrets[]",
    "tolerations[]",
    "extraEnv[]",
    "extraVolumes[]",
    "extraVolumeMounts[]",
    "resources.claims[]",
    "nodeAgent.extraEnv[]",
    "nodeAgent.tolerations[]",
    "nodeAgent.resources.claims[]",
    "serviceMonitor.relabelings[]",
    "serviceMonitor.metricRelabelings[]",
}


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    target = _resolve(SCHEMA["definitions"][ref.removeprefix("#/definitions/")])
    return {**target, **{k: v for k, v in node.items() if k != "$ref"}}


def _object_nodes(node: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    """Every schema node that can hold an object, with its dotted path ([] for list items)."""
    node = _resolve(node)
    found = []
    kinds = node.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "object" in kinds:
        found.append((path, node))
    for key, child in node.get("properties", {}).items():
        found += _object_nodes(child, f"{path}.{key}" if path else key)
    if isinstance(node.get("items"), dict):
        found += _object_nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        found += _object_nodes(node["additionalProperties"], f"{path}.*")
    return found


# --- typos --------------------------------------------------------------------------------------

TYPOS = [
    # (--set or --set-json, where the schema reports it, the misspelled key)
    (("--set", "replica=3"), "''", "replica"),
    (("--set", "tls.mdoe=certManager"), "'/tls'", "mdoe"),
    (("--set", "nodeAgent.networkPolicy.enable=false"), "'/nodeAgent/networkPolicy'", "enable"),
    (("--set", "resources.limit.cpu=1"), "'/resources'", "limit"),
    (("--set", "serviceMonitor.intervall=1m"), "'/serviceMonitor'", "intervall"),
    (
        (
            "--set-json",
            'rbac.metricReaders=[{"name": "r", "namespace": "default", "resources": ["pods/m"],'
            ' "subjects": [{"kind": "User", "name": "jane"}], "verb": ["get"]}]',
        ),
        "'/rbac/metricReaders/0'",
        "verb",
    ),
]


@pytest.mark.parametrize("command", ["template", "lint", "install"])
@pytest.mark.parametrize(("assignment", "where", "key"), TYPOS, ids=[t[2] for t in TYPOS])
def test_a_misspelled_key_fails_and_the_error_names_it(
    command: str, assignment: tuple[str, str], where: str, key: str
) -> None:
    args = {
        "template": ["template", RELEASE, str(CHART)],
        "lint": ["lint", str(CHART), "--strict"],
        # --dry-run=client needs no cluster, and checks the values as a real install does.
        "install": ["install", RELEASE, str(CHART), "--dry-run=client"],
    }[command]
    result = helm(*args, "--namespace", NAMESPACE, *assignment, check=False)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert f"at {where}: additional properties '{key}' not allowed" in output, output


@pytest.mark.parametrize(
    "assignment",
    [
        "insecureSkipTLSVerify=true",
        "apiServices.insecureSkipTLSVerify=true",
        "tls.insecureSkipTLSVerify=true",
        "tls.generate.insecureSkipTLSVerify=true",
        "tls.certManager.insecureSkipTLSVerify=true",
        "tls.existingSecret.insecureSkipTLSVerify=true",
        "service.insecureSkipTLSVerify=true",
    ],
)
def test_no_value_can_make_an_api_service_skip_verification(assignment: str) -> None:
    stderr = render_fails(sets=(assignment,))
    assert "additional properties 'insecureSkipTLSVerify' not allowed" in stderr


def test_the_schema_has_no_way_to_skip_the_aggregators_verification() -> None:
    text = json.dumps(SCHEMA).lower()
    assert "insecureskiptlsverify" not in text.replace("never insecureskiptlsverify", "")
    for path, _ in _object_nodes(SCHEMA, ""):
        assert not path.startswith(("apiServices.", "tls.")) or "insecure" not in path.lower()


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("replicas=two", "at '/replicas': got string, want integer"),
        ("replicas=0", "at '/replicas': minimum"),
        ("tls.mode=insecure", "at '/tls/mode': value must be one of"),
        ("kubelet.source=tunnel", "at '/kubelet/source': value must be one of 'proxy', 'direct'"),
        ("metricsApi.versions={v2}", "at '/metricsApi/versions/0': value must be one of"),
        ("image.digest=latest", "at '/image/digest'"),
        ("backendTimeout=soon", "at '/backendTimeout'"),
        ("prometheus.url=prometheus:9090", "at '/prometheus/url'"),
        ("tls.existingSecret.caBundle=abc", "at '/tls/existingSecret/caBundle'"),
        ("podDisruptionBudget.minAvailable=half", "at '/podDisruptionBudget/minAvailable'"),
    ],
)
def test_a_wrong_value_fails_with_its_path(assignment: str, message: str) -> None:
    assert message in render_fails(sets=(assignment,))


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        (("tls.mode=existingSecret",), "tls.mode=existingSecret needs tls.existingSecret.caBundle"),
        (("tls.secretName=",), "tls.secretName is required with tls.mode existingSecret"),
        (("serviceAccount.create=false",), "serviceAccount.name is required"),
    ],
)
def test_settings_that_span_keys_fail_with_what_to_set(
    assignment: tuple[str, ...], message: str
) -> None:
    # The existing-secret example names a Secret and its CA; each line takes one away.
    files = (
        [EXAMPLES / "existing-secret.yaml"] if assignment[0].startswith("tls.secretName") else []
    )
    assert message in render_fails(*files, sets=assignment)


def test_a_parent_charts_global_values_are_accepted() -> None:
    assert render(sets=("global.imageRegistry=registry.example.com",))


# --- the schema's shape -------------------------------------------------------------------------


def test_the_schema_is_valid_draft_07_with_local_references_only() -> None:
    assert SCHEMA["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    refs = [
        value
        for value in json.dumps(SCHEMA).split('"$ref": ')[1:]
        if not value.startswith('"#/definitions/')
    ]
    assert refs == [], "a remote $ref would make Helm fetch it at install"


def test_every_object_with_fixed_keys_is_closed() -> None:
    free = []
    for path, node in _object_nodes(SCHEMA, ""):
        additional = node.get("additionalProperties", True)
        if additional is False:
            assert node.get("properties"), path
            continue
        if isinstance(additional, dict):
            assert "properties" not in node, f"{path}: fixed keys and a map at once"
            continue  # a map: labels, annotations, headers, requests/limits
        free.append(path)
    assert sorted(free) == sorted(FREE_FORM)


def test_every_value_is_described_and_every_default_is_in_the_schema() -> None:
    def walk(schema: dict[str, Any], values: Any, path: str) -> None:
        # Keys may be left out of a Kubernetes ResourceRequirements (requests/limits/claims) and
        # of an object that is empty by default (tls.certManager.issuerRef).
        optional = schema.get("$ref") == "#/definitions/resources" or values == {}
        schema = _resolve(schema)
        properties = schema.get("properties")
        if properties and schema.get("additionalProperties") is False:
            assert isinstance(values, dict), path
            assert set(values) <= set(properties), f"{path}: {set(values) - set(properties)}"
            for key, child in properties.items():
                child_path = f"{path}.{key}" if path else key
                if key != "global" and not (optional and key not in values):
                    assert key in values, f"{child_path} has no default in values.yaml"
                walk(child, values.get(key), child_path)
            return
        assert schema.get("description"), f"{path} has no description"

    walk(SCHEMA, VALUES, "")


@pytest.mark.parametrize("name", ["values", *sorted(p.stem for p in EXAMPLES.glob("*.yaml"))])
def test_defaults_and_examples_are_valid(name: str) -> None:
    """jsonschema's own check, beside Helm's: two implementations agree."""
    document = (
        VALUES if name == "values" else yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    )
    jsonschema.Draft7Validator(SCHEMA).validate(document)


def test_python_and_helm_agree_on_a_typo() -> None:
    with pytest.raises(jsonschema.ValidationError, match="'replica' was unexpected"):
        jsonschema.Draft7Validator(SCHEMA).validate({**VALUES, "replica": 3})
