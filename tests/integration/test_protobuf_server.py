"""Issue 7 acceptance against the real server process over TLS: for every kind it serves,
the protobuf and JSON answers of the same request decode to the same values; protobuf alone
in Accept gets protobuf; an unknown media type gets 406."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from custom_metrics_server.testing.server_process import ServerProcess as RunningServer
from tests import kubeproto

pytestmark = pytest.mark.integration

PROTOBUF = "application/vnd.kubernetes.protobuf"
P2 = "/apis/custom.metrics.k8s.io/v1beta2"
P1 = "/apis/custom.metrics.k8s.io/v1beta1"
E = "/apis/external.metrics.k8s.io/v1beta1"


@pytest.fixture(scope="module")
def client(contract_server: RunningServer) -> Iterator[httpx.Client]:
    with contract_server.client() as client:
        yield client


@pytest.mark.parametrize(
    ("path", "kind", "code"),
    [
        (
            f"{P2}/namespaces/ns/pods/*/some-metric?metricLabelSelector=verb%3DGET",
            "MetricValueList",
            200,
        ),
        (f"{P1}/namespaces/ns/pods/*/some-metric", "MetricValueList", 200),
        ("/apis/custom-metrics/v1alpha1/nodes/foo/some-metric", "MetricValueList", 200),
        (f"{E}/namespaces/default/my-external-metric", "ExternalMetricValueList", 200),
        (P2, "APIResourceList", 200),
        (E, "APIResourceList", 200),
        ("/apis/custom.metrics.k8s.io", "APIGroup", 200),
        ("/apis", "APIGroupList", 200),
        (f"{P2}/namespaces/ns/pods/foo/unknown-metric", "Status", 404),
        (f"{E}/namespaces/default/m?watch=true", "Status", 405),
    ],
)
def test_protobuf_and_json_answers_hold_the_same_values(
    client: httpx.Client, path: str, kind: str, code: int
) -> None:
    as_json = client.get(path, headers={"Accept": "application/json"})
    as_protobuf = client.get(path, headers={"Accept": PROTOBUF})
    assert as_json.status_code == as_protobuf.status_code == code
    assert as_protobuf.headers["content-type"] == PROTOBUF
    assert as_json.json()["kind"] == kind
    kubeproto.same_values(as_json.json(), as_protobuf.content)


def test_hpa_accept_gets_protobuf(client: httpx.Client) -> None:
    response = client.get(
        f"{P2}/namespaces/ns/pods/*/some-metric",
        headers={"Accept": "application/vnd.kubernetes.protobuf, */*"},
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == PROTOBUF
    _, kind, decoded, _ = kubeproto.decode(response.content)
    assert kind == "MetricValueList"
    assert len(decoded.items) == 16  # type: ignore[attr-defined]


def test_unknown_media_type_gets_406(client: httpx.Client) -> None:
    response = client.get(P2, headers={"Accept": "application/x-yaml"})
    assert response.status_code == 406
    assert response.headers["content-type"] == "application/json"
    assert response.json()["message"] == (
        "only the following media types are accepted: "
        "application/json, application/vnd.kubernetes.protobuf"
    )
