"""The upstream path truth table (contract section 10, C1-C24 and X1-X6) against the real
server process over TLS, for every custom-metrics version."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from custom_metrics_server.api import schemas
from custom_metrics_server.testing.server_process import ServerProcess as RunningServer
from tests import kubeproto

pytestmark = pytest.mark.integration

CUSTOM_VERSIONS = [
    "custom.metrics.k8s.io/v1beta2",
    "custom.metrics.k8s.io/v1beta1",
    "custom-metrics/v1alpha1",
]
E = "/apis/external.metrics.k8s.io/v1beta1"
NOT_FOUND = "the server could not find the requested resource"


@pytest.fixture(scope="module")
def client(contract_server: RunningServer) -> Iterator[httpx.Client]:
    with contract_server.client(headers={"Accept": "application/json"}) as client:
        yield client


@pytest.fixture(params=CUSTOM_VERSIONS)
def prefix(request: pytest.FixtureRequest) -> str:
    return f"/apis/{request.param}"


def status_of(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    schemas.Status.model_validate(body)
    assert body["kind"] == "Status"
    assert body["apiVersion"] == "v1"
    assert body["status"] == "Failure"
    assert body["code"] == response.status_code
    return dict(body)


def items_of(response: httpx.Response, prefix: str) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["kind"] == "MetricValueList"
    assert body["apiVersion"] == prefix.removeprefix("/apis/")
    assert body["metadata"] == {}
    model = (
        schemas.MetricValueListV1beta2
        if prefix.endswith("v1beta2")
        else schemas.MetricValueListV1beta1
    )
    model.model_validate(body)
    return list(body["items"])


def metric_name(item: dict[str, Any]) -> str:
    return str(item["metric"]["name"] if "metric" in item else item["metricName"])


def test_c1_long_prefix_path_is_not_found(
    client: httpx.Client, contract_server: RunningServer
) -> None:
    response = client.get(contract_server.url + "//apis/")
    assert response.status_code == 404
    assert client.get("/apis/").status_code == 200


@pytest.mark.parametrize(
    "path", ["/blah", "/nodes/foo", "/namespaces/ns/pods/bar"], ids=["one", "two", "four"]
)
def test_c2_paths_with_the_wrong_segment_count_are_status_404(
    client: httpx.Client, prefix: str, path: str
) -> None:
    response = client.get(prefix + path)
    assert response.status_code == 404
    body = status_of(response)
    assert body["reason"] == "NotFound"
    assert body["message"] == NOT_FOUND
    assert body["details"] == {}


def test_c3_root_wildcard_lists_every_node(client: httpx.Client, prefix: str) -> None:
    items = items_of(client.get(prefix + "/nodes/*/some-metric"), prefix)
    assert [i["describedObject"]["name"] for i in items] == ["foo", "node-1", "node-2", "node-3"]
    assert all(
        i["describedObject"]["kind"] == "Node" and "namespace" not in i["describedObject"]
        for i in items
    )
    assert {metric_name(i) for i in items} == {"some-metric"}


def test_c4_namespaced_wildcard_lists_the_namespace_pods(client: httpx.Client, prefix: str) -> None:
    items = items_of(client.get(prefix + "/namespaces/ns/pods/*/some-metric"), prefix)
    assert len(items) == 16
    assert {i["describedObject"]["namespace"] for i in items} == {"ns"}


def test_c5_namespace_metric_is_the_namespace_object(client: httpx.Client, prefix: str) -> None:
    items = items_of(client.get(prefix + "/namespaces/ns/metrics/some-metric"), prefix)
    assert [i["describedObject"] for i in items] == [
        {"kind": "Namespace", "name": "ns", "apiVersion": "v1"}
    ]
    assert items[0]["value"] == "1500m"


@pytest.mark.parametrize(
    ("path", "count"),
    [
        pytest.param("/nodes/*/some-metric?labelSelector=foo%3Dbar", 2, id="c6-nodes"),
        pytest.param("/namespaces/ns/pods/*/some-metric?labelSelector=foo%3Dbar", 8, id="c7-pods"),
        pytest.param("/nodes/foo/some-metric", 1, id="c8-node"),
        pytest.param("/namespaces/ns/pods/foo/some-metric", 1, id="c9-pod"),
        pytest.param(
            "/namespaces/ns/pods/foo/some-metric?labelSelector=foo%3Dnope",
            1,
            id="c9-selector-ignored",
        ),
        pytest.param(
            "/namespaces/ns/pods/*/some-metric?labelSelector=foo+in+%28bar%29,app",
            8,
            id="set-based",
        ),
        pytest.param(
            "/namespaces/ns/pods/*/some-metric?labelSelector=foo!%3Dbar", 8, id="not-equals"
        ),
        pytest.param(
            "/namespaces/ns/pods/*/some-metric?labelSelector=!foo", 0, id="does-not-exist"
        ),
    ],
)
def test_c6_to_c9_selectors_and_single_objects(
    client: httpx.Client, prefix: str, path: str, count: int
) -> None:
    items = items_of(client.get(prefix + path), prefix)
    assert len(items) == count


def test_c10_encoded_wildcard_and_trailing_slash_equal_the_plain_form(
    client: httpx.Client, prefix: str
) -> None:
    plain = client.get(prefix + "/namespaces/ns/pods/*/some-metric")
    encoded = client.get(prefix + "/namespaces/ns/pods/%2A/some-metric")
    slashed = client.get(prefix + "/namespaces/ns/pods/*/some-metric/")
    assert plain.content == encoded.content == slashed.content
    assert len(items_of(plain, prefix)) == 16


@pytest.mark.parametrize(
    "path", ["/namespaces/ns/foo", "/namespaces/ns/metrics"], ids=["c11", "c12"]
)
def test_c11_c12_too_few_parts_is_invalid_request_path(
    client: httpx.Client, prefix: str, path: str
) -> None:
    response = client.get(prefix + path)
    assert response.status_code == 400
    body = status_of(response)
    assert (body["reason"], body["message"]) == ("BadRequest", "invalid request path")


@pytest.mark.parametrize(
    ("query", "message"),
    [
        pytest.param(
            "labelSelector=%3Dbar",
            "found '=', expected: !, identifier, or 'end of string'",
            id="c13",
        ),
        pytest.param(
            "fieldSelector=spec.x%3D1",
            '"spec.x" is not a known field selector: only "metadata.name", "metadata.namespace"',
            id="c15",
        ),
        pytest.param(
            "metricLabelSelector=%3Dbar",
            "found '=', expected: !, identifier, or 'end of string'",
            id="c16",
        ),
    ],
)
def test_c13_c15_c16_bad_selectors_are_bad_requests(
    client: httpx.Client, prefix: str, query: str, message: str
) -> None:
    response = client.get(prefix + "/namespaces/ns/pods/*/m?" + query)
    assert response.status_code == 400
    body = status_of(response)
    assert (body["reason"], body["message"]) == ("BadRequest", message)


def test_c14_field_selector_naming_another_object_is_rejected(
    client: httpx.Client, prefix: str
) -> None:
    response = client.get(prefix + "/namespaces/ns/pods/foo/m?fieldSelector=metadata.name%3Dbar")
    assert response.status_code == 400
    assert (
        status_of(response)["message"] == "fieldSelector metadata.name doesn't match requested name"
    )
    matching = client.get(
        prefix + "/namespaces/ns/pods/*/some-metric?fieldSelector=metadata.name%3D%2A"
    )
    assert len(items_of(matching, prefix)) == 16


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_c17_other_methods_are_not_allowed(client: httpx.Client, prefix: str, method: str) -> None:
    response = client.request(method, prefix + "/namespaces/ns/pods/*/m")
    assert response.status_code == 405
    body = status_of(response)
    assert body["reason"] == "MethodNotAllowed"
    assert body["message"] == "the server does not allow this method on the requested resource"


def test_head_behaves_like_get_without_a_body(client: httpx.Client, prefix: str) -> None:
    path = prefix + "/namespaces/ns/pods/*/some-metric"
    head, get = client.head(path), client.get(path)
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["content-length"] == get.headers["content-length"]
    assert head.headers["content-type"] == "application/json"


@pytest.mark.parametrize("timeout", ["abc", "10", "1x", "-"])
def test_invalid_timeout_parameter_is_a_bad_request(
    client: httpx.Client, prefix: str, timeout: str
) -> None:
    response = client.get(prefix + "/namespaces/ns/pods/*/some-metric", params={"timeout": timeout})
    assert response.status_code == 400
    assert status_of(response)["message"] == (
        f'invalid timeout specified in the request URL - time: invalid duration "{timeout}"'
    )
    assert (
        client.get(
            prefix + "/namespaces/ns/pods/*/some-metric", params={"timeout": "1m30s"}
        ).status_code
        == 200
    )


def test_c18_group_qualified_resource_maps_to_kind_and_api_version(
    client: httpx.Client, prefix: str
) -> None:
    items = items_of(client.get(prefix + "/namespaces/ns/deployments.apps/web/m"), prefix)
    assert items[0]["describedObject"] == {
        "kind": "Deployment",
        "namespace": "ns",
        "name": "web",
        "apiVersion": "apps/v1",
    }
    assert items[0]["value"] == "2500m"


def test_c19_c20_missing_values_use_the_upstream_wordings(
    client: httpx.Client, prefix: str
) -> None:
    response = client.get(prefix + "/namespaces/default/services/kubernetes/test-metric")
    assert response.status_code == 404
    body = status_of(response)
    assert (
        body["message"]
        == "the server could not find the metric test-metric for services kubernetes"
    )
    # Upstream sends no details; ours carry only the hints (issue 14), the rest is upstream's.
    assert list(body["details"]) == ["causes"]
    assert body["details"]["causes"][0]["reason"] == "MetricNotServed"
    response = client.get(
        prefix + "/namespaces/default/services/kubernetes/test-metric?metricLabelSelector=foo%3Dbar"
    )
    assert status_of(response)["message"] == (
        "the server could not find the metric test-metric for services kubernetes with selector foo=bar"
    )
    response = client.get(
        prefix + "/namespaces/ns/pods/foo/some-metric?metricLabelSelector=verb%3DPOST"
    )
    assert status_of(response)["message"] == (
        "the server could not find the metric some-metric for pods foo with selector verb=POST"
    )
    response = client.get(prefix + "/namespaces/ns/widgets/*/some-metric")
    assert (
        status_of(response)["message"]
        == "the server could not find the metric some-metric for widgets"
    )


EXPECTED_V1BETA2 = (
    b'{"kind":"MetricValueList","apiVersion":"custom.metrics.k8s.io/v1beta2","metadata":{},"items":['
    b'{"describedObject":{"kind":"Pod","namespace":"ns","name":"foo","apiVersion":"v1"},'
    b'"metric":{"name":"some-metric","selector":null},"timestamp":"2026-01-02T03:04:05Z",'
    b'"windowSeconds":60,"value":"100"}]}\n'
)
EXPECTED_V1BETA1 = (
    b'{"kind":"MetricValueList","apiVersion":"custom.metrics.k8s.io/v1beta1","metadata":{},"items":['
    b'{"describedObject":{"kind":"Pod","namespace":"ns","name":"foo","apiVersion":"v1"},'
    b'"metricName":"some-metric","timestamp":"2026-01-02T03:04:05Z","window":60,"value":"100",'
    b'"selector":null}]}\n'
)


def test_c21_each_version_has_its_own_item_shape_byte_for_byte(client: httpx.Client) -> None:
    path = "/namespaces/ns/pods/foo/some-metric"
    assert client.get("/apis/custom.metrics.k8s.io/v1beta2" + path).content == EXPECTED_V1BETA2
    assert client.get("/apis/custom.metrics.k8s.io/v1beta1" + path).content == EXPECTED_V1BETA1
    legacy = client.get("/apis/custom-metrics/v1alpha1" + path).content
    assert legacy == EXPECTED_V1BETA1.replace(
        b"custom.metrics.k8s.io/v1beta1", b"custom-metrics/v1alpha1"
    )


def test_metric_selector_is_echoed_in_items(client: httpx.Client) -> None:
    response = client.get(
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns/pods/foo/some-metric?metricLabelSelector=verb%3DGET"
    )
    item = items_of(response, "/apis/custom.metrics.k8s.io/v1beta2")[0]
    assert item["metric"] == {"name": "some-metric", "selector": {"matchLabels": {"verb": "GET"}}}


@pytest.mark.parametrize("suffix", ["", "/"], ids=["plain", "slash"])
def test_c22_version_discovery_lists_metrics(
    client: httpx.Client, prefix: str, suffix: str
) -> None:
    response = client.get(prefix + suffix)
    assert response.status_code == 200
    body = response.json()
    schemas.APIResourceList.model_validate(body)
    assert body["kind"] == "APIResourceList"
    assert body["apiVersion"] == "v1"
    assert body["groupVersion"] == prefix.removeprefix("/apis/")
    entries = {r["name"]: r for r in body["resources"]}
    assert entries["pods/some-metric"] == {
        "name": "pods/some-metric",
        "singularName": "",
        "namespaced": True,
        "kind": "MetricValueList",
        "verbs": ["get"],
    }
    assert entries["nodes/some-metric"]["namespaced"] is False
    assert entries["namespaces/some-metric"]["namespaced"] is False
    assert "deployments.apps/m" in entries


def test_c23_hpa_protobuf_accept_gets_protobuf(client: httpx.Client, prefix: str) -> None:
    """The HPA's Accept: a Go adapter answers protobuf, and so do we (issue 7)."""
    response = client.get(
        prefix + "/namespaces/ns/pods/*/some-metric",
        headers={"Accept": "application/vnd.kubernetes.protobuf, */*"},
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/vnd.kubernetes.protobuf"
    json_answer = client.get(prefix + "/namespaces/ns/pods/*/some-metric").json()
    kubeproto.same_values(json_answer, response.content)


@pytest.mark.parametrize(
    "accept",
    [
        "application/xml",
        "application/yaml",
        "application/json;as=Table;g=meta.k8s.io;v=v1",
        "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1",
    ],
)
def test_c24_unacceptable_media_types_are_406(
    client: httpx.Client, prefix: str, accept: str
) -> None:
    response = client.get(prefix + "/namespaces/ns/pods/*/some-metric", headers={"Accept": accept})
    assert response.status_code == 406
    body = status_of(response)
    assert body["reason"] == "NotAcceptable"
    assert body["message"] == (
        "only the following media types are accepted: "
        "application/json, application/vnd.kubernetes.protobuf"
    )


@pytest.mark.parametrize(
    "path", ["/nonexistent-metric", "/namespaces/foo", "/namespaces/foo/group/metric"]
)
def test_x1_external_paths_outside_the_grammar_are_404(client: httpx.Client, path: str) -> None:
    response = client.get(E + path)
    assert response.status_code == 404
    assert status_of(response)["message"] == NOT_FOUND


def external_items(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    body = response.json()
    schemas.ExternalMetricValueList.model_validate(body)
    assert (body["kind"], body["apiVersion"], body["metadata"]) == (
        "ExternalMetricValueList",
        "external.metrics.k8s.io/v1beta1",
        {},
    )
    return list(body["items"])


def test_x2_external_metric_lists_every_series(client: httpx.Client) -> None:
    items = external_items(client.get(E + "/namespaces/default/my-external-metric"))
    assert [(i["metricLabels"], i["value"]) for i in items] == [
        ({"foo": "bar"}, "42"),
        ({"foo": "baz"}, "43"),
    ]


def test_x3_label_selector_selects_external_series(client: httpx.Client) -> None:
    items = external_items(
        client.get(E + "/namespaces/default/my-external-metric?labelSelector=foo%3Dbar")
    )
    assert items == [
        {
            "metricName": "my-external-metric",
            "metricLabels": {"foo": "bar"},
            "timestamp": "2026-01-02T03:04:05Z",
            "value": "42",
        }
    ]


def test_x4_unknown_external_metric_is_an_empty_list(client: httpx.Client) -> None:
    assert external_items(client.get(E + "/namespaces/foo/nonexistent-metric")) == []


def test_x5_watch_on_external_metrics_is_not_supported(client: httpx.Client) -> None:
    response = client.get(E + "/namespaces/default/my-external-metric?watch=true")
    assert response.status_code == 405
    body = status_of(response)
    assert (
        body["message"] == 'watch is not supported on resources of kind "*.external.metrics.k8s.io"'
    )
    assert body["details"] == {"group": "external.metrics.k8s.io", "kind": "*"}


def test_x6_external_discovery_lists_metrics(client: httpx.Client) -> None:
    body = client.get(E).json()
    assert body["groupVersion"] == "external.metrics.k8s.io/v1beta1"
    assert body["resources"] == [
        {
            "name": name,
            "singularName": "",
            "namespaced": True,
            "kind": "ExternalMetricValueList",
            "verbs": ["get"],
        }
        for name in ["my-external-metric", "other-external-metric"]
    ]


def test_root_and_group_discovery(client: httpx.Client) -> None:
    root = client.get("/apis", headers={"Accept": "application/json"})
    assert root.status_code == 200
    assert root.headers["content-type"] == "application/json"
    body = root.json()
    schemas.APIGroupList.model_validate(body)
    assert [g["name"] for g in body["groups"]] == [
        "custom.metrics.k8s.io",
        "custom-metrics",
        "external.metrics.k8s.io",
    ]
    # Issue 18: the aggregator's v2 question gets the aggregated document now (it used to get
    # the plain list, and fell back to one request per group version).
    v2 = "g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    aggregated = client.get("/apis", headers={"Accept": f"application/json;{v2}"})
    assert aggregated.headers["content-type"] == f"application/json;{v2}"
    assert [g["metadata"]["name"] for g in aggregated.json()["items"]] == [
        "custom-metrics",
        "custom.metrics.k8s.io",
        "external.metrics.k8s.io",
    ]
    group = client.get("/apis/custom.metrics.k8s.io").json()
    assert group["preferredVersion"] == {
        "groupVersion": "custom.metrics.k8s.io/v1beta2",
        "version": "v1beta2",
    }
    assert [v["version"] for v in group["versions"]] == ["v1beta2", "v1beta1"]


def test_paths_outside_served_groups_get_go_plain_404(client: httpx.Client) -> None:
    for path in ["/nope", "/apis/unknown.group/v1", "/apis/custom.metrics.k8s.io/v9/pods/*/m"]:
        response = client.get(path)
        assert response.status_code == 404
        assert response.text == "404 page not found\n"
        assert response.headers["content-type"].startswith("text/plain")
