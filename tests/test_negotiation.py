"""Accept negotiation as kube-apiserver does it, for a JSON and protobuf server."""

from __future__ import annotations

import pytest

from custom_metrics_server.api.negotiation import (
    JSON,
    PROTOBUF,
    Representation,
    negotiate,
    pretty_user_agent,
)
from custom_metrics_server.errors import NotAcceptable

PLAIN = Representation(JSON, pretty=False)
PROTO = Representation(PROTOBUF, pretty=False)


@pytest.mark.parametrize(
    "accept",
    [
        "",
        "application/json",
        "*/*",
        "application/*",
        "application/json;as=Table;v=v1;g=meta.k8s.io, application/json",
        "text/html, application/json;q=0.1",
        "APPLICATION/JSON",
        "application/json; charset=utf-8",
        "application/json;q=bogus",
        # At equal q the first written of two exact types wins.
        "application/json, application/vnd.kubernetes.protobuf",
        "application/vnd.kubernetes.protobuf;q=0.5, application/json",
        "application/vnd.kubernetes.protobuf;q=0.5, */*",
        "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1, */*",
    ],
)
def test_json_is_chosen(accept: str) -> None:
    assert negotiate(accept) == PLAIN


@pytest.mark.parametrize(
    "accept",
    [
        "application/vnd.kubernetes.protobuf",
        # The HPA (kube-controller-manager's client-go): exact type beats the wildcard.
        "application/vnd.kubernetes.protobuf, */*",
        "*/*, application/vnd.kubernetes.protobuf",
        "application/*, application/vnd.kubernetes.protobuf",
        "application/json;q=0.5, application/vnd.kubernetes.protobuf",
        "application/vnd.kubernetes.protobuf, application/json",
        "APPLICATION/VND.KUBERNETES.PROTOBUF;pretty=1",
        "application/json;as=Table;v=v1;g=meta.k8s.io, application/vnd.kubernetes.protobuf",
        "text/html, application/vnd.kubernetes.protobuf;q=0.1",
    ],
)
def test_protobuf_is_chosen(accept: str) -> None:
    assert negotiate(accept) == PROTO
    assert negotiate(accept).protobuf


@pytest.mark.parametrize(
    "accept",
    [
        "application/xml",
        "application/yaml",
        "application/json;q=0",
        "application/vnd.kubernetes.protobuf;q=0",
        "application/json;as=Table;v=v1;g=meta.k8s.io",
        "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io",
        "application/json;stream=watch",
        "application/vnd.kubernetes.protobuf;stream=watch",
        "text/*",
    ],
)
def test_nothing_acceptable_is_406(accept: str) -> None:
    result = negotiate(accept)
    assert isinstance(result, NotAcceptable)
    assert result.message == (
        "only the following media types are accepted: "
        "application/json, application/vnd.kubernetes.protobuf"
    )


def test_discovery_root_never_answers_406() -> None:
    aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    assert negotiate(aggregated, discovery_root=True) == PLAIN
    assert negotiate("application/xml", discovery_root=True) == PLAIN
    assert isinstance(negotiate(aggregated), NotAcceptable)
    # client-go's discovery Accept: the v2 clauses are skipped, the plain one is served.
    kubectl = (
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
        "application/json"
    )
    assert negotiate(kubectl, discovery_root=True) == PLAIN
    protobuf_v2 = (
        "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
        "application/vnd.kubernetes.protobuf"
    )
    assert negotiate(protobuf_v2, discovery_root=True) == PROTO


def test_pretty_parameter_and_user_agents() -> None:
    chosen = negotiate("application/json;pretty=1")
    assert isinstance(chosen, Representation)
    assert chosen.pretty
    assert pretty_user_agent("curl/8.0")
    assert pretty_user_agent("Mozilla/5.0 (X11)")
    assert not pretty_user_agent("kubectl/v1.32.4 (linux/amd64)")
