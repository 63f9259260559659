"""Protobuf through the whole app: every kind the server answers, asked for in JSON and in
protobuf, decodes to the same values (in process, through ASGI; the real server over TLS is
in tests/integration/test_protobuf_server.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from custom_metrics_server.errors import Forbidden, StatusError, Unauthorized
from custom_metrics_server.server.app import Server
from tests import kubeproto
from tests.asgi import Reply, call, scope_for
from tests.conftest import contract_app

PROTOBUF = "application/vnd.kubernetes.protobuf"
HPA_ACCEPT = "application/vnd.kubernetes.protobuf, */*"
CUSTOM = [
    "/apis/custom.metrics.k8s.io/v1beta2",
    "/apis/custom.metrics.k8s.io/v1beta1",
    "/apis/custom-metrics/v1alpha1",
]
E = "/apis/external.metrics.k8s.io/v1beta1"

OK_PATHS = [
    *(
        prefix + suffix
        for prefix in CUSTOM
        for suffix in (
            "/namespaces/ns/pods/*/some-metric",
            "/namespaces/ns/pods/foo/some-metric",
            "/nodes/*/some-metric",
            "/namespaces/ns/metrics/some-metric",
            "",
        )
    ),
    "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns/pods/*/some-metric"
    "?labelSelector=foo%3Dbar&metricLabelSelector=verb%3DGET",
    "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns/pods/*/some-metric"
    "?metricLabelSelector=verb+in+%28GET%2CPUT%29",
    f"{E}/namespaces/default/my-external-metric",
    f"{E}/namespaces/default/my-external-metric?labelSelector=foo%3Dbar",
    f"{E}/namespaces/default/unknown-metric",
    E,
    "/apis/custom.metrics.k8s.io",
    "/apis/external.metrics.k8s.io",
    "/apis",
]
ERROR_PATHS = [
    ("GET", "/apis/custom.metrics.k8s.io/v1beta2/blah"),  # 404 route, details {}
    ("GET", "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns/pods/foo/unknown"),  # 404 metric
    ("GET", "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns/foo"),  # 400
    ("GET", "/apis/custom.metrics.k8s.io/v1beta2/nodes/*/m?labelSelector=%3D%3D"),  # 400
    ("POST", "/apis/custom.metrics.k8s.io/v1beta2/nodes/*/some-metric"),  # 405
    ("GET", f"{E}/namespaces/default/m?watch=true"),  # 405 with details
]


@pytest.fixture(scope="module")
def app() -> Server:
    return contract_app()


def get(app: Any, path: str, accept: str | None, method: str = "GET") -> Reply:
    raw, _, query = path.partition("?")
    headers = [(b"accept", accept.encode())] if accept is not None else []
    return asyncio.run(call(app, scope_for(method, raw.encode(), query.encode(), headers)))


@pytest.mark.parametrize("accept", [PROTOBUF, HPA_ACCEPT])
@pytest.mark.parametrize("path", OK_PATHS)
def test_every_answer_decodes_to_the_json_values(app: Server, path: str, accept: str) -> None:
    json_reply = get(app, path, "application/json")
    proto_reply = get(app, path, accept)
    assert json_reply.status == proto_reply.status == 200, json_reply.body
    assert json_reply.headers["content-type"] == "application/json"
    assert proto_reply.headers["content-type"] == PROTOBUF
    assert proto_reply.headers["content-length"] == str(len(proto_reply.body))
    assert proto_reply.headers["cache-control"] == "no-cache, private"
    kubeproto.same_values(orjson.loads(json_reply.body), proto_reply.body)


@pytest.mark.parametrize(("method", "path"), ERROR_PATHS)
def test_errors_are_protobuf_status_when_protobuf_is_asked(
    app: Server, method: str, path: str
) -> None:
    json_reply = get(app, path, "application/json", method)
    proto_reply = get(app, path, PROTOBUF, method)
    assert json_reply.status == proto_reply.status >= 400
    assert proto_reply.headers["content-type"] == PROTOBUF
    decoded = kubeproto.same_values(orjson.loads(json_reply.body), proto_reply.body)
    assert decoded["code"] == proto_reply.status


def test_unknown_media_type_is_406_json_listing_both_types(app: Server) -> None:
    reply = get(app, f"{CUSTOM[0]}/namespaces/ns/pods/*/some-metric", "application/xml")
    assert reply.status == 406
    assert reply.headers["content-type"] == "application/json"
    status = orjson.loads(reply.body)
    assert status["reason"] == "NotAcceptable"
    assert status["message"] == (
        "only the following media types are accepted: "
        "application/json, application/vnd.kubernetes.protobuf"
    )


def test_pretty_does_not_apply_to_protobuf(app: Server) -> None:
    path = f"{CUSTOM[0]}/nodes/*/some-metric"
    plain = get(app, path, PROTOBUF)
    pretty = get(app, path + "?pretty=true", PROTOBUF)
    assert pretty.status == 200
    assert pretty.body[:4] == b"k8s\x00"
    # Same values (timestamps are fixed by the fixture) in the same bytes.
    assert pretty.body == plain.body


def test_head_gets_the_protobuf_headers(app: Server) -> None:
    reply = get(app, f"{CUSTOM[0]}/nodes/*/some-metric", PROTOBUF, method="HEAD")
    assert reply.status == 200
    assert reply.headers["content-type"] == PROTOBUF


def test_discovery_root_answers_the_aggregated_document_when_asked(app: Server) -> None:
    v2 = "g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    # The first v2 clause wins, here the JSON one (goautoneg keeps the written order at equal q).
    reply = get(app, "/apis", f"application/json;{v2},{PROTOBUF}")
    assert reply.headers["content-type"] == f"application/json;{v2}"
    proto = get(app, "/apis", f"{PROTOBUF};{v2},application/json")
    assert proto.headers["content-type"] == f"{PROTOBUF};{v2}"
    kubeproto.same_values(orjson.loads(reply.body), proto.body)
    # Without a v2 clause: the plain list, in the media type asked for.
    plain = get(app, "/apis", PROTOBUF)
    assert plain.headers["content-type"] == PROTOBUF
    assert kubeproto.decode(plain.body)[:2] == ("", "APIGroupList")


class _RejectingGate:
    def __init__(self, error: StatusError) -> None:
        self.error = error

    async def check(self, scope: Any) -> StatusError | None:
        return self.error


@pytest.mark.parametrize(
    "error",
    [
        Unauthorized("Unauthorized"),
        Forbidden(
            'pods.custom.metrics.k8s.io "*" is forbidden: User "system:anonymous" cannot get '
            'resource "pods/some-metric" in API group "custom.metrics.k8s.io"',
            details={"name": "*", "group": "custom.metrics.k8s.io", "kind": "pods"},
        ),
    ],
)
def test_gate_rejections_are_negotiated(error: StatusError) -> None:
    app = contract_app(gate=_RejectingGate(error))
    path = f"{CUSTOM[0]}/nodes/*/some-metric"
    proto_reply = get(app, path, HPA_ACCEPT)
    json_reply = get(app, path, None)
    assert proto_reply.status == json_reply.status == error.code
    assert proto_reply.headers["content-type"] == PROTOBUF
    assert json_reply.headers["content-type"] == "application/json"
    kubeproto.same_values(orjson.loads(json_reply.body), proto_reply.body)
