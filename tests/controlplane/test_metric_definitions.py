"""The MetricDefinition CRD (manifests/crds, docs/metric-definitions.md) against a real
kube-apiserver: it installs and becomes Established; every example of the docs is accepted;
each invalid spec is refused with the message of the CEL rule about that field (as the API's
`Status` causes carry it); `kubectl explain` shows the descriptions; `kubectl get` shows the
printer columns; and the RBAC of manifests/base, folded into Kubernetes' own `admin`, `edit`
and `view` by the real clusterrole-aggregation controller (kube-controller-manager), lets a
namespace admin create definitions in that namespace only, a viewer read them, and the server's
ServiceAccount list, watch and write their status but never their spec.

The server's ServiceAccount is impersonated here (admin credentials, `Impersonate-User`), so
its audit trail, which tests/controlplane/test_deployment_files.py reads, holds only what the
server itself does.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.controlplane.cluster import ControlPlane
from tests.controlplane.deployment import ROOT, Obj, kustomize
from tests.controlplane.test_aggregation import kubectl_versions

pytestmark = pytest.mark.integration

GROUP = "metrics.custom-metrics-server.io"
VERSION = "v1alpha1"
CRD_NAME = f"metricdefinitions.{GROUP}"
CRD_DIR = ROOT / "manifests" / "crds"
DOC = ROOT / "docs" / "metric-definitions.md"
SERVER_SA = "system:serviceaccount:custom-metrics:custom-metrics-server"
SERVER_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:custom-metrics")


def collection(namespace: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/metricdefinitions"


def doc_examples() -> list[Obj]:
    """Every MetricDefinition in a YAML block of docs/metric-definitions.md."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    found = [yaml.safe_load(block) for block in blocks]
    return [d for d in found if isinstance(d, dict) and d.get("kind") == "MetricDefinition"]


def crd_messages() -> dict[str, list[str]]:
    """Each field's rule messages, from the CRD file (the field: where the rule sits, plus its
    fieldPath; list items as `[]`)."""
    document = yaml.safe_load(
        (CRD_DIR / "custom-resource-definition-metric-definitions.yaml").read_text()
    )
    found: dict[str, list[str]] = {}

    def walk(node: Obj, path: str) -> None:
        for rule in node.get("x-kubernetes-validations", []):
            found.setdefault(path + rule.get("fieldPath", ""), []).append(rule["message"])
        for name, child in node.get("properties", {}).items():
            walk(child, f"{path}.{name}" if path else name)
        if "items" in node:
            walk(node["items"], f"{path}[]")

    walk(document["spec"]["versions"][0]["schema"]["openAPIV3Schema"], "")
    return found


@pytest.fixture(scope="module")
def crd(control_plane: ControlPlane) -> Obj:
    """The CRD applied from manifests/crds (kubectl's own kustomize), once Established."""
    control_plane.kubectl("apply", "--server-side", "--field-manager=cms-tests", "-k", str(CRD_DIR))
    control_plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{CRD_NAME}")
    return control_plane.get_json(  # type: ignore[no-any-return]
        f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
    )


@pytest.fixture(scope="module")
def shop(control_plane: ControlPlane, crd: Obj) -> str:
    return control_plane.create_namespace("shop")


def in_namespace(obj: Obj, namespace: str, name: str | None = None) -> Obj:
    out = copy.deepcopy(obj)
    out["metadata"]["namespace"] = namespace
    if name is not None:
        out["metadata"]["name"] = name
    return out


def post(plane: ControlPlane, obj: Obj, headers: dict[str, str] | None = None) -> httpx.Response:
    namespace = obj["metadata"]["namespace"]
    with plane.admin_client() as client:
        return client.post(collection(namespace), json=obj, headers=headers or {})


def test_the_crd_installs_and_is_established(crd: Obj) -> None:
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions["Established"] == "True"
    assert conditions["NamesAccepted"] == "True"
    assert crd["status"]["acceptedNames"]["kind"] == "MetricDefinition"
    assert crd["status"]["acceptedNames"]["shortNames"] == ["mdef"]
    (version,) = crd["spec"]["versions"]
    assert version["name"] == VERSION
    assert version["subresources"] == {"status": {}}


def test_every_example_of_the_docs_is_accepted(control_plane: ControlPlane, shop: str) -> None:
    examples = doc_examples()
    assert {e["spec"]["source"]["type"] for e in examples} == {
        "Pods",
        "Prometheus",
        "Formula",
        "Schedule",
        "HTTP",
    }
    assert {e["spec"]["servedAs"]["type"] for e in examples} == {"External", "Pods", "Object"}
    for example in examples:
        response = post(control_plane, in_namespace(example, shop))
        assert response.status_code == 201, response.text
        stored = response.json()
        assert stored["spec"]["metricName"] == example["spec"]["metricName"]
        # The defaults the schema fills in.
        assert stored["spec"]["interval"] == example["spec"].get("interval", "30s")
        if "pods" in stored["spec"]["source"]:
            assert stored["spec"]["source"]["pods"]["path"].startswith("/")
            assert stored["spec"]["source"]["pods"]["type"] in {"gauge", "counter"}


BASE: Obj = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "MetricDefinition",
    "metadata": {"name": "bad"},
    "spec": {
        "metricName": "queue_depth",
        "servedAs": {"type": "External"},
        "source": {"type": "Prometheus", "prometheus": {"query": "up"}},
    },
}

Mutation = Callable[[Obj], None]


def setting(**fields: Any) -> Mutation:
    return lambda spec: spec.update(copy.deepcopy(fields))


def schedule(*windows: Obj, **extra: Any) -> Mutation:
    return setting(source={"type": "Schedule", "schedule": {"windows": list(windows), **extra}})


def formula(*inputs: Obj) -> Mutation:
    return setting(
        source={"type": "Formula", "formula": {"expression": "a", "inputs": list(inputs)}}
    )


def pods(**fields: Any) -> Mutation:
    pod_source = {"selector": {}, "port": 8080, "metric": "x", **fields}
    return setting(source={"type": "Pods", "pods": pod_source})


def http(**fields: Any) -> Mutation:
    http_source = {"service": "api", "port": 80, "path": "/stats", "valuePath": "a", **fields}
    return setting(source={"type": "HTTP", "http": http_source})


def two_sources(spec: Obj) -> None:
    spec["source"]["pods"] = {"selector": {}, "port": 8080, "metric": "x"}


def no_source(spec: Obj) -> None:
    del spec["source"]["prometheus"]


#: id -> (the change to a valid spec, the field the refusal names, a phrase of its rule's
#: message). The whole message is then taken from the CRD file and must be in the answer.
INVALID: dict[str, tuple[Mutation, str, str]] = {
    "two sources": (two_sources, "spec.source", "exactly one"),
    "no source": (no_source, "spec.source", "exactly one"),
    "type not the source set": (
        lambda spec: spec["source"].update(type="HTTP"),
        "spec.source.type",
        "must name",
    ),
    "name with a slash": (setting(metricName="a/b"), "spec.metricName", "path segment"),
    "name ..": (setting(metricName=".."), "spec.metricName", "path segment"),
    "name with %": (setting(metricName="a%2F"), "spec.metricName", "path segment"),
    "name with ?": (setting(metricName="a?b"), "spec.metricName", "path segment"),
    "interval too short": (setting(interval="1s"), "spec.interval", "from 5s to 1h"),
    "interval too long": (setting(interval="2h"), "spec.interval", "from 5s to 1h"),
    "interval not a duration": (setting(interval="soon"), "spec.interval", "from 5s to 1h"),
    "maxAge not a duration": (setting(maxAge="5x"), "spec.maxAge", "from 1s to 24h"),
    "maxAge under the interval": (
        setting(interval="1m", maxAge="30s"),
        "spec.maxAge",
        "at least spec.interval",
    ),
    "last-good without maxAge": (setting(failure="last-good"), "spec.maxAge", "last-good"),
    "Pods from a schedule": (
        setting(
            servedAs={"type": "Pods"},
            source={
                "type": "Schedule",
                "schedule": {"windows": [{"start": "08:00", "end": "09:00", "value": 1}]},
            },
        ),
        "spec.servedAs.type",
        "per-pod values",
    ),
    "Object without its object": (
        setting(servedAs={"type": "Object"}),
        "spec.servedAs",
        "describedObject is required",
    ),
    "External with an object": (
        setting(
            servedAs={
                "type": "External",
                "describedObject": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "w"},
            }
        ),
        "spec.servedAs",
        "describedObject is required",
    ),
    "a Job in apps/v1": (
        setting(
            servedAs={
                "type": "Object",
                "describedObject": {"apiVersion": "apps/v1", "kind": "Job", "name": "j"},
            },
            source={"type": "Pods", "pods": {"selector": {}, "port": 80, "metric": "x"}},
        ),
        "spec.servedAs.describedObject.apiVersion",
        "batch/v1",
    ),
    "podValues of a query": (
        setting(servedAs={"type": "External", "podValues": "sum"}),
        "spec.servedAs.podValues",
        "applies to",
    ),
    "window ending before it starts": (
        schedule({"start": "18:00", "end": "08:00", "value": 1}),
        "spec.source.schedule.windows[0].end",
        "after start",
    ),
    "empty window": (
        schedule({"start": "08:00", "end": "08:00", "value": 1}),
        "spec.source.schedule.windows[0].end",
        "after start",
    ),
    "window start 25:00": (
        schedule({"start": "25:00", "end": "23:00", "value": 1}),
        "spec.source.schedule.windows[0].start",
        "HH:MM",
    ),
    "window end 24:01": (
        schedule({"start": "08:00", "end": "24:01", "value": 1}),
        "spec.source.schedule.windows[0].end",
        "HH:MM",
    ),
    "time zone with a space": (
        schedule({"start": "08:00", "end": "09:00", "value": 1}, timeZone="Europe Paris"),
        "spec.source.schedule.timeZone",
        "IANA",
    ),
    "formula reading its own metric": (
        formula({"name": "a", "metricName": "queue_depth"}),
        "spec.source.formula.inputs",
        "own metric",
    ),
    "formula input named in": (
        formula({"name": "in", "metricName": "x"}),
        "spec.source.formula.inputs[0].name",
        "CEL identifier",
    ),
    "pods port 0": (pods(port=0), "spec.source.pods.port", "port number"),
    "pods port name too long": (
        pods(port="a-very-long-port-name"),
        "spec.source.pods.port",
        "port number",
    ),
    "pods metric starting with a digit": (
        pods(metric="1x"),
        "spec.source.pods.metric",
        "Prometheus metric name",
    ),
    "pods path without /": (pods(path="metrics"), "spec.source.pods.path", "absolute path"),
    "In without values": (
        pods(selector={"matchExpressions": [{"key": "a", "operator": "In"}]}),
        "spec.source.pods.selector.matchExpressions[0].values",
        "must hold a value",
    ),
    "label value not a label value": (
        pods(selector={"matchLabels": {"a": "-x"}}),
        "spec.source.pods.selector.matchLabels",
        "label values",
    ),
    "blank query": (
        lambda spec: spec["source"]["prometheus"].update(query="   "),
        "spec.source.prometheus.query",
        "blank",
    ),
    "server not a name": (
        lambda spec: spec["source"]["prometheus"].update(server="Main Prom"),
        "spec.source.prometheus.server",
        "DNS label",
    ),
    "service not a name": (http(service="1api"), "spec.source.http.service", "DNS-1035"),
    "path to another host": (http(path="//evil.example/x"), "spec.source.http.path", "one '/'"),
    "empty key in valuePath": (http(valuePath="a..b"), "spec.source.http.valuePath", "keys"),
}


def _rule_message(field: str, phrase: str) -> str:
    """The CRD's message for `field` (indexes as `[]`) that holds `phrase`."""
    generic = re.sub(r"\[\d+\]", "[]", field)
    (message,) = [m for m in crd_messages()[generic] if phrase in m]
    return message


@pytest.mark.parametrize("case", list(INVALID))
def test_an_invalid_spec_is_refused_with_the_rules_message(
    control_plane: ControlPlane, shop: str, case: str
) -> None:
    mutate, field, phrase = INVALID[case]
    obj = in_namespace(BASE, shop, name=f"bad-{list(INVALID).index(case)}")
    mutate(obj["spec"])
    response = post(control_plane, obj)
    assert response.status_code == 422, response.text
    status = response.json()
    assert status["reason"] == "Invalid"
    message = _rule_message(field, phrase)
    causes = [(c.get("field"), c["message"]) for c in status["details"]["causes"]]
    assert any(f == field and message in m for f, m in causes), (field, message, causes)
    # One refusal, not a cascade of the other rules tripping over the same mistake.
    assert len(causes) == 1, causes
    assert message in status["message"]


def test_kubectl_explain_shows_the_descriptions(control_plane: ControlPlane, crd: Obj) -> None:
    for label, binary in kubectl_versions(control_plane):
        spec = control_plane.kubectl("explain", "metricdefinition.spec", binary=binary).stdout
        assert "metricName\t<string> -required-" in spec, label
        assert "servedAs\t<Object> -required-" in spec, label
        assert "custom and external metrics APIs accept" in spec, label
        assert "enum: error, zero, last-good" in spec, label
        windows = control_plane.kubectl(
            "explain", "mdef.spec.source.schedule.windows", binary=binary
        ).stdout
        assert "A window that would cross midnight is two windows." in " ".join(windows.split())
        status = control_plane.kubectl("explain", "mdef.status.route", binary=binary).stdout
        assert "shadowedBy" in status, label


# --- RBAC -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rbac(control_plane_with_controllers: ControlPlane, crd: Obj) -> None:
    """manifests/base's ClusterRoles (the aggregated ones and the server's), its binding, its
    namespace and ServiceAccount, applied; returns once kube-controller-manager's aggregation
    has folded the rules into admin, edit and view."""
    plane = control_plane_with_controllers
    objects = [
        o
        for o in kustomize(plane, ROOT / "manifests" / "base")
        if o["kind"] in {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
        and (o["kind"] != "ClusterRoleBinding" or o["metadata"]["name"] == "custom-metrics-server")
    ]
    plane.apply(objects)

    def aggregated() -> bool:
        for role, verb in (("admin", "create"), ("edit", "delete"), ("view", "watch")):
            rules = plane.get_json(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}")
            if not any(
                GROUP in r.get("apiGroups", [])
                and "metricdefinitions" in r.get("resources", [])
                and verb in r.get("verbs", [])
                for r in rules.get("rules") or []
            ):
                return False
        return True

    plane.wait_until(aggregated, "admin, edit and view to aggregate the MetricDefinition rules")


def bind(plane: ControlPlane, namespace: str, role: str, user: str) -> None:
    plane.apply(
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": f"{user}-{role}", "namespace": namespace},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
                ],
            }
        ]
    )


def as_user(
    plane: ControlPlane, kubeconfig: Path, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    return plane.kubectl(*args, kubeconfig=kubeconfig, input=input, check=False)


def example(source: str) -> Obj:
    (found,) = [e for e in doc_examples() if e["spec"]["source"]["type"] == source][:1]
    return found


def test_a_namespace_admin_creates_definitions_there_and_nowhere_else(
    control_plane_with_controllers: ControlPlane, rbac: None, shop: str
) -> None:
    plane = control_plane_with_controllers
    elsewhere = plane.create_namespace("elsewhere")
    bind(plane, shop, "admin", "alice")
    alice = plane.user_kubeconfig("alice")
    mine = in_namespace(example("Prometheus"), shop, name="alice-queue")

    def created() -> bool:  # RBAC's informers see a new binding within moments
        result = as_user(plane, alice, "create", "-f", "-", input=json.dumps(mine))
        return result.returncode == 0 or "AlreadyExists" in result.stderr

    plane.wait_until(created, "alice, admin of the namespace, to create a definition")
    for verb_args in (["get"], ["delete", "--dry-run=server"]):
        result = as_user(plane, alice, *verb_args, "mdef", "alice-queue", "-n", shop)
        assert result.returncode == 0, result.stderr
    other = in_namespace(example("Prometheus"), elsewhere, name="alice-queue")
    refused = as_user(plane, alice, "create", "-f", "-", input=json.dumps(other))
    assert refused.returncode != 0
    assert "forbidden" in refused.stderr
    assert f'in the namespace "{elsewhere}"' in refused.stderr
    # The status is the server's to write, not the team's.
    status = as_user(
        plane, alice, "auth", "can-i", "update", f"metricdefinitions.{GROUP}",
        "--subresource=status", "-n", shop,
    )  # fmt: skip
    assert status.stdout.strip() == "no"


def test_a_namespace_viewer_reads_definitions_but_cannot_create_them(
    control_plane_with_controllers: ControlPlane, rbac: None, shop: str
) -> None:
    plane = control_plane_with_controllers
    bind(plane, shop, "view", "victor")
    victor = plane.user_kubeconfig("victor")
    plane.apply([in_namespace(example("Schedule"), shop, name="viewed")])

    def listed() -> bool:
        return as_user(plane, victor, "get", "mdef", "-n", shop).returncode == 0

    plane.wait_until(listed, "victor, viewer of the namespace, to list definitions")
    got = as_user(plane, victor, "get", "mdef", "viewed", "-n", shop, "-o", "json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["spec"]["source"]["type"] == "Schedule"
    mine = in_namespace(example("Schedule"), shop, name="victor-own")
    refused = as_user(plane, victor, "create", "-f", "-", input=json.dumps(mine))
    assert refused.returncode != 0
    assert "forbidden" in refused.stderr
    deleted = as_user(plane, victor, "delete", "mdef", "viewed", "-n", shop)
    assert "forbidden" in deleted.stderr


@pytest.fixture
def as_server(control_plane: ControlPlane) -> Iterator[httpx.Client]:
    """Admin credentials impersonating the server's ServiceAccount."""
    headers = [("Impersonate-User", SERVER_SA)] + [
        ("Impersonate-Group", group) for group in (*SERVER_GROUPS, "system:authenticated")
    ]
    with control_plane.admin_client(headers=headers) as client:
        yield client


def test_the_servers_account_lists_watches_and_writes_status_but_never_the_spec(
    control_plane: ControlPlane, rbac: None, shop: str, as_server: httpx.Client
) -> None:
    plane = control_plane
    plane.apply([in_namespace(example("Pods"), shop, name="served")])
    path = f"{collection(shop)}/served"
    everywhere = f"/apis/{GROUP}/{VERSION}/metricdefinitions"
    listing = as_server.get(everywhere)
    assert listing.status_code == 200, listing.text
    assert "served" in {i["metadata"]["name"] for i in listing.json()["items"]}
    version = listing.json()["metadata"]["resourceVersion"]
    watch = as_server.get(everywhere, params={"watch": "1", "resourceVersion": version,
                                              "timeoutSeconds": "1"})  # fmt: skip
    assert watch.status_code == 200, watch.text
    current = plane.get_json(path)
    current["status"] = {
        "observedGeneration": current["metadata"]["generation"],
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Serving",
                "message": "3 pods",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
        "lastValue": "12500m",
        "lastValueTime": "2026-01-01T00:00:00Z",
        "valueCount": 3,
    }
    written = as_server.put(f"{path}/status", json=current)
    assert written.status_code == 200, written.text
    # What the writer does not use is not granted: a merge patch of the status.
    patched = as_server.patch(
        f"{path}/status",
        json={"status": {"lastError": "pod web-2: timeout"}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert patched.status_code == 403, patched.text
    # The spec: through the status subresource it is ignored; directly it is forbidden.
    sneaky = copy.deepcopy(written.json())
    sneaky["spec"]["metricName"] = "hijacked"
    through_status = as_server.put(f"{path}/status", json=sneaky)
    assert through_status.status_code == 200
    assert through_status.json()["spec"]["metricName"] == "http_requests_per_second"
    for method in ("PUT", "PATCH", "DELETE"):
        response = as_server.request(
            method,
            path,
            json=sneaky if method != "PATCH" else {"spec": {"metricName": "hijacked"}},
            headers={"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {},
        )
        assert response.status_code == 403, (method, response.text)
    assert as_server.get(path).status_code == 403  # list and watch only: no get
    assert as_server.post(collection(shop), json=in_namespace(BASE, shop)).status_code == 403
    # An Event about it, through events.k8s.io (the writer's), not the core group.
    event = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "served.ready", "namespace": shop},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "custom-metrics-server.io/metric-definitions",
        "reportingInstance": "custom-metrics-server-0",
        "action": "Serve",
        "reason": "Ready",
        "type": "Normal",
        "note": "serving http_requests_per_second",
        "regarding": {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "MetricDefinition",
            "name": "served",
            "namespace": shop,
        },
    }
    created = as_server.post(f"/apis/events.k8s.io/v1/namespaces/{shop}/events", json=event)
    assert created.status_code == 201, created.text
    core = as_server.post(
        f"/api/v1/namespaces/{shop}/events",
        json={
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "served.ready-core", "namespace": shop},
            "involvedObject": event["regarding"],
            "reason": "Ready",
            "message": "serving",
            "type": "Normal",
        },
    )
    assert core.status_code == 403, core.text
    assert as_server.get(f"/api/v1/namespaces/{shop}/events").status_code == 403

    # What `kubectl get` shows of it: the printer columns.
    table = plane.kubectl("get", "metricdefinitions", "-n", shop).stdout.splitlines()
    assert table[0].split() == ["NAME", "METRIC", "SOURCE", "READY", "VALUE", "AGE"]
    (row,) = [line.split() for line in table[1:] if line.startswith("served ")]
    assert row[:5] == ["served", "http_requests_per_second", "Pods", "True", "12500m"]
    wide = plane.kubectl("get", "mdef", "served", "-n", shop, "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-3:] == ["SERVED-AS", "REASON", "SHADOWED-BY"]
    # SHADOWED-BY is blank: nothing answers for the name instead.
    assert wide[1].split()[-2:] == ["Pods", "Serving"]
