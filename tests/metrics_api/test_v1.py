"""metrics.k8s.io/v1 (KEP-5207, GA in Kubernetes 1.37) beside v1beta1: the same PodMetrics and
NodeMetrics for every get and list, selector and representation (JSON, protobuf, Table), only
`apiVersion` told apart; discovery prefers v1; other versions are 404s as upstream.

The upstream v1 types differ from v1beta1 in their Go package only (field names, JSON names,
protobuf numbers and kinds are the same: k8s.io/metrics pkg/apis/metrics/v1/types.go and
generated.proto), so every v1 answer must be its v1beta1 twin with the version swapped, and the
v1 protobuf must decode with the v1 `.proto` (tests/fixtures/proto/metrics_v1.proto).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from custom_metrics_server.api import openapi, schemas
from custom_metrics_server.api.grammar import parse_query
from custom_metrics_server.metrics_api import request as metrics_request
from custom_metrics_server.security.requestinfo import request_attributes
from tests import kubeproto
from tests.asgi import Reply, call, scope_for
from tests.metrics_api.test_responses import TABLE_V1, app

V1 = "/apis/metrics.k8s.io/v1"
V1BETA1 = "/apis/metrics.k8s.io/v1beta1"
PROTOBUF = "application/vnd.kubernetes.protobuf"
#: Every object and list route, with the selectors kubectl and the HPA send.
ROUTES = [
    ("/pods", ""),
    ("/namespaces/ns/pods", ""),
    ("/namespaces/ns/pods", "labelSelector=app%3Dweb"),
    ("/namespaces/ns/pods", "labelSelector=tier+notin+%28front%29"),
    ("/pods", "fieldSelector=metadata.namespace%3Dother"),
    ("/namespaces/ns/pods/web-a", ""),
    ("/namespaces/other/pods/db", ""),
    ("/nodes", ""),
    ("/nodes", "labelSelector=zone%3Da"),
    ("/nodes", "fieldSelector=metadata.name%3Dn2"),
    ("/nodes/n1", ""),
]


async def fetch(served: Any, path: str, query: str = "", accept: str | None = None) -> Reply:
    headers = [(b"accept", accept.encode())] if accept is not None else []
    return await call(served, scope_for("GET", path.encode(), query.encode(), headers))


def with_version(document: Any, version: str) -> Any:
    """The document with every metrics.k8s.io apiVersion set to `version`."""
    if isinstance(document, dict):
        return {
            key: (
                f"metrics.k8s.io/{version}"
                if key == "apiVersion" and str(value).startswith("metrics.k8s.io/")
                else with_version(value, version)
            )
            for key, value in document.items()
        }
    if isinstance(document, list):
        return [with_version(item, version) for item in document]
    return document


@pytest.mark.parametrize(("route", "query"), ROUTES)
async def test_v1_answers_are_the_v1beta1_answers_with_their_version(
    route: str, query: str
) -> None:
    served = app()
    v1 = await fetch(served, V1 + route, query)
    v1beta1 = await fetch(served, V1BETA1 + route, query)
    assert v1.status == v1beta1.status == 200
    assert v1.headers["content-type"] == "application/json"
    document = json.loads(v1.body)
    assert document["apiVersion"] == "metrics.k8s.io/v1"
    assert document == with_version(json.loads(v1beta1.body), "v1")
    # Byte for byte too: only the version string differs (the Go encoder's field order).
    assert v1.body == v1beta1.body.replace(b'"metrics.k8s.io/v1beta1"', b'"metrics.k8s.io/v1"')
    if route.endswith("/pods") or route == "/nodes":
        assert document["items"], "the route lists something"


@pytest.mark.parametrize(("route", "query"), ROUTES)
async def test_v1_protobuf_decodes_with_the_v1_messages(route: str, query: str) -> None:
    served = app()
    as_json = await fetch(served, V1 + route, query)
    for accept in (PROTOBUF, f"{PROTOBUF}, */*"):
        as_protobuf = await fetch(served, V1 + route, query, accept)
        assert as_protobuf.headers["content-type"] == PROTOBUF
        api_version, kind, message, _ = kubeproto.decode(as_protobuf.body)
        assert api_version == "metrics.k8s.io/v1"
        assert message.DESCRIPTOR.full_name == f"k8s.io.metrics.pkg.apis.metrics.v1.{kind}"
        kubeproto.same_values(json.loads(as_json.body), as_protobuf.body)
    # The v1beta1 body differs only in its typeMeta: the same raw message.
    v1beta1 = await fetch(served, V1BETA1 + route, query, PROTOBUF)
    v1 = await fetch(served, V1 + route, query, PROTOBUF)
    assert kubeproto.decode(v1.body)[3] == kubeproto.decode(v1beta1.body)[3]


async def test_v1_tables_carry_the_v1_objects() -> None:
    served = app()
    table = json.loads(
        (await fetch(served, f"{V1}/namespaces/ns/pods", "includeObject=Object", TABLE_V1)).body
    )
    assert table["kind"] == "Table"
    assert [row["cells"][0] for row in table["rows"]] == ["web-a", "web-b"]
    assert {row["object"]["apiVersion"] for row in table["rows"]} == {"metrics.k8s.io/v1"}
    assert {row["object"]["kind"] for row in table["rows"]} == {"PodMetrics"}
    old = json.loads(
        (
            await fetch(served, f"{V1BETA1}/namespaces/ns/pods", "includeObject=Object", TABLE_V1)
        ).body
    )
    assert table == with_version(old, "v1")


async def test_discovery_prefers_v1_and_lists_the_same_resources() -> None:
    served = app()
    group = json.loads((await fetch(served, "/apis/metrics.k8s.io")).body)
    v1 = {"groupVersion": "metrics.k8s.io/v1", "version": "v1"}
    v1beta1 = {"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"}
    assert (group["versions"], group["preferredVersion"]) == ([v1, v1beta1], v1)
    root = json.loads((await fetch(served, "/apis")).body)
    (listed,) = [g for g in root["groups"] if g["name"] == "metrics.k8s.io"]
    assert (listed["versions"], listed["preferredVersion"]) == ([v1, v1beta1], v1)
    new = json.loads((await fetch(served, V1)).body)
    old = json.loads((await fetch(served, V1BETA1)).body)
    assert new["groupVersion"] == "metrics.k8s.io/v1"
    assert new["resources"] == old["resources"]
    assert [r["name"] for r in new["resources"]] == ["nodes", "pods"]
    # Discovery documents are negotiated as upstream's: only the plain kinds, no Table.
    refused = await fetch(served, V1, accept=TABLE_V1.split(",")[0])
    assert refused.status == 406
    assert json.loads(refused.body)["reason"] == "NotAcceptable"
    proto = await fetch(served, V1, accept=PROTOBUF)
    kubeproto.same_values(new, proto.body)


@pytest.mark.parametrize("version", ["v1alpha1", "v2", "v1beta2", "V1", "v1beta1x"])
async def test_a_version_we_do_not_serve_is_a_404_as_upstream(version: str) -> None:
    """A v1-only client of an old server, or any client of a version nobody serves: Go's
    plain 404, for the version's discovery document and for its objects alike."""
    served = app()
    for suffix in ("", "/pods", "/nodes/n1", "/namespaces/ns/pods/web-a"):
        reply = await fetch(served, f"/apis/metrics.k8s.io/{version}{suffix}")
        assert reply.status == 404
        assert reply.body == b"404 page not found\n"
        assert reply.headers["content-type"] == "text/plain; charset=utf-8"
    assert metrics_request.parse_request(f"/apis/metrics.k8s.io/{version}", parse_query("")) is None


@pytest.mark.parametrize(
    ("route", "query", "status", "reason"),
    [
        ("/pods", "watch=true", 405, "MethodNotAllowed"),
        ("/pods", "labelSelector=%3D%3D", 400, "BadRequest"),
        ("/nodes", "fieldSelector=spec.x%3Dy", 400, "BadRequest"),
        ("/nodes/nope", "", 404, "NotFound"),
        ("/namespaces/ns/pods/young", "", 404, "NotFound"),
        ("/namespaces/ns/nodes", "", 404, "NotFound"),
        ("/pods", "includeObject=All", 400, "BadRequest"),
    ],
)
async def test_bad_input_is_the_same_status_in_both_versions(
    route: str, query: str, status: int, reason: str
) -> None:
    served = app()
    v1 = await fetch(served, V1 + route, query)
    v1beta1 = await fetch(served, V1BETA1 + route, query)
    assert v1.status == v1beta1.status == status
    assert json.loads(v1.body)["reason"] == reason
    assert json.loads(v1.body) == json.loads(v1beta1.body)


def test_requests_are_authorized_with_their_version() -> None:
    attributes = request_attributes("GET", f"{V1}/namespaces/ns/pods/web-a", b"")
    assert (attributes.group, attributes.version, attributes.resource, attributes.verb) == (
        "metrics.k8s.io",
        "v1",
        "pods",
        "get",
    )


async def test_v1_answers_validate_against_the_v1_openapi_models() -> None:
    served = app()
    v1_models = schemas.METRICS_API_MODELS["v1"]
    pod, pod_list, node, node_list = v1_models
    pod_list.model_validate_json((await fetch(served, f"{V1}/pods")).body)
    pod.model_validate_json((await fetch(served, f"{V1}/namespaces/ns/pods/web-a")).body)
    node_list.model_validate_json((await fetch(served, f"{V1}/nodes")).body)
    node.model_validate_json((await fetch(served, f"{V1}/nodes/n1")).body)
    assert set(v1_models).isdisjoint(schemas.METRICS_API_MODELS["v1beta1"])


async def test_self_metrics_count_requests_under_their_version() -> None:
    served = app()
    await fetch(served, f"{V1}/nodes")
    await fetch(served, f"{V1BETA1}/nodes")
    exposition = (await call(served, scope_for("GET", b"/metrics"))).body.decode()
    requests = [
        line
        for line in exposition.splitlines()
        if line.startswith("apiserver_request_total") and 'group="metrics.k8s.io"' in line
    ]
    assert any('version="v1"' in line for line in requests), requests
    assert any('version="v1beta1"' in line for line in requests), requests


async def test_openapi_describes_both_versions_with_their_own_definitions() -> None:
    assert openapi.METRICS_VERSIONS == metrics_request.VERSIONS
    root = json.loads((await call(app(), scope_for("GET", b"/openapi/v3"))).body)
    assert {"apis/metrics.k8s.io/v1", "apis/metrics.k8s.io/v1beta1"} <= set(root["paths"])
    documents = openapi.build_v3(metrics_api=True)
    new = documents["apis/metrics.k8s.io/v1"]
    old = documents["apis/metrics.k8s.io/v1beta1"]
    prefix = "io.k8s.metrics.pkg.apis.metrics."
    assert {n for n in new["components"]["schemas"] if n.startswith(prefix)} == {
        f"{prefix}v1.{kind}"
        for kind in (
            "ContainerMetrics",
            "NodeMetrics",
            "NodeMetricsList",
            "PodMetrics",
            "PodMetricsList",
        )
    }
    # The same schemas and paths but for the version in names, refs and descriptions.
    as_old = json.loads(
        json.dumps(new)
        .replace(f"{prefix}v1.", f"{prefix}v1beta1.")
        .replace("metrics.k8s.io/v1 ", "metrics.k8s.io/v1beta1 ")
        .replace("/apis/metrics.k8s.io/v1/", "/apis/metrics.k8s.io/v1beta1/")
        .replace("MetricsK8sIoV1", "MetricsK8sIoV1beta1")
    )
    assert as_old == old
