"""Accept negotiation as kube-apiserver does it, for a JSON-only server."""

from __future__ import annotations

import pytest

from custom_metrics_server.errors import NotAcceptable
from custom_metrics_server.negotiation import Representation, negotiate, pretty_user_agent


@pytest.mark.parametrize(
    "accept",
    [
        "",
        "application/json",
        "*/*",
        "application/*",
        "application/vnd.kubernetes.protobuf, */*",
        "application/json;as=Table;v=v1;g=meta.k8s.io, application/json",
        "text/html, application/json;q=0.1",
        "APPLICATION/JSON",
        "application/json; charset=utf-8",
        "application/json;q=bogus",
    ],
)
def test_json_is_chosen_when_any_clause_allows_it(accept: str) -> None:
    assert negotiate(accept) == Representation("application/json", pretty=False)


@pytest.mark.parametrize(
    "accept",
    [
        "application/vnd.kubernetes.protobuf",
        "application/xml",
        "application/json;q=0",
        "application/json;as=Table;v=v1;g=meta.k8s.io",
        "application/json;stream=watch",
        "text/*",
    ],
)
def test_nothing_acceptable_is_406(accept: str) -> None:
    result = negotiate(accept)
    assert isinstance(result, NotAcceptable)
    assert result.message == "only the following media types are accepted: application/json"


def test_discovery_root_never_answers_406() -> None:
    aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    assert negotiate(aggregated, discovery_root=True) == Representation(
        "application/json", pretty=False
    )
    assert negotiate("application/xml", discovery_root=True) == Representation(
        "application/json", pretty=False
    )
    assert isinstance(negotiate(aggregated), NotAcceptable)


def test_pretty_parameter_and_user_agents() -> None:
    assert negotiate("application/json;pretty=1").pretty
    assert pretty_user_agent("curl/8.0")
    assert pretty_user_agent("Mozilla/5.0 (X11)")
    assert not pretty_user_agent("kubectl/v1.32.4 (linux/amd64)")
