"""The URL grammar, unit by unit: route forms, RequestInfo rewrites, name checks, queries."""

from __future__ import annotations

import pytest

from custom_metrics_server.api.grammar import (
    GroupDiscovery,
    QueryParams,
    RootDiscovery,
    VersionDiscovery,
    parse,
    parse_query,
)
from custom_metrics_server.domain import ExternalMetricRequest, MetricRequest
from custom_metrics_server.errors import BadRequest, MethodNotAllowed, NotFound

P = "/apis/custom.metrics.k8s.io/v1beta2"
E = "/apis/external.metrics.k8s.io/v1beta1"
NO_QUERY = QueryParams()


def metric(path: str, query: QueryParams = NO_QUERY) -> MetricRequest:
    parsed = parse(path, query)
    assert isinstance(parsed, MetricRequest)
    return parsed


@pytest.mark.parametrize(
    ("path", "namespace", "resource", "name", "metric_name"),
    [
        pytest.param(P + "/nodes/*/cpu", None, "nodes", "*", "cpu", id="r1-wildcard"),
        pytest.param(P + "/nodes/n1/cpu", None, "nodes", "n1", "cpu", id="r1-named"),
        pytest.param(P + "/namespaces/ns/pods/*/rps", "ns", "pods", "*", "rps", id="r2-wildcard"),
        pytest.param(
            P + "/namespaces/ns/deployments.apps/web/rps",
            "ns",
            "deployments.apps",
            "web",
            "rps",
            id="r2-group",
        ),
        pytest.param(
            P + "/namespaces/ns/metrics/queue", None, "namespaces", "ns", "queue", id="r3"
        ),
        pytest.param(
            P + "/namespaces/*/metrics/queue", None, "namespaces", "*", "queue", id="r3-wildcard"
        ),
        pytest.param(
            P + "/namespaces/ns/metrics/queue/extra",
            None,
            "namespaces",
            "ns",
            "queue",
            id="r3-extra-ignored",
        ),
        pytest.param(
            P + "/namespaces/ns/status",
            None,
            "namespaces",
            "ns",
            "status",
            id="namespace-subresource",
        ),
        pytest.param(P + "/pods/*/rps/", None, "pods", "*", "rps", id="trailing-slash"),
        pytest.param(
            P + "/namespaces/ns/pods/web.1/http.requests",
            "ns",
            "pods",
            "web.1",
            "http.requests",
            id="dots",
        ),
    ],
)
def test_metric_routes(
    path: str, namespace: str | None, resource: str, name: str, metric_name: str
) -> None:
    parsed = metric(path)
    assert (parsed.namespace, parsed.resource, parsed.name, parsed.metric) == (
        namespace,
        resource,
        name,
        metric_name,
    )
    assert parsed.version == "v1beta2"


@pytest.mark.parametrize(
    "path",
    [
        P + "/blah",
        P + "/nodes/foo",
        P + "/namespaces/ns/pods/bar",
        P + "/a/b/c/d",
        P + "/namespaces/ns",
        P + "/namespaces/ns/pods/x/m/extra",
        P + "/namespaces//pods/x/m",
        P + "//nodes/x/m",
        P + "/nodes/x//m",
    ],
)
def test_paths_without_a_route_are_not_found(path: str) -> None:
    with pytest.raises(NotFound, match="the server could not find the requested resource"):
        parse(path, NO_QUERY)


@pytest.mark.parametrize("path", [P + "/namespaces/ns/foo", P + "/namespaces/ns/metrics"])
def test_too_few_parts_after_the_namespace_is_invalid_request_path(path: str) -> None:
    with pytest.raises(BadRequest, match="^invalid request path$"):
        parse(path, NO_QUERY)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (P + "/nodes/x/..", "invalid metric name \"..\": may not be '..'"),
        (P + "/nodes/x/.", "invalid metric name \".\": may not be '.'"),
        (P + "/nodes/x/a%b", "invalid metric name \"a%b\": may not contain '%'"),
        (P + "/nodes/x/a?b", "invalid metric name \"a?b\": may not contain '?'"),
        (P + "/nodes/../m", "invalid object name \"..\": may not be '..'"),
        (P + "/namespaces/../pods/x/m", "invalid namespace name \"..\": may not be '..'"),
        (E + "/namespaces/ns/..", "invalid metric name \"..\": may not be '..'"),
    ],
)
def test_unsafe_names_are_rejected(path: str, message: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse(path, NO_QUERY)
    assert caught.value.message == message


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/apis", RootDiscovery()),
        ("/apis/", RootDiscovery()),
        ("/apis/custom.metrics.k8s.io", GroupDiscovery("custom.metrics.k8s.io")),
        ("/apis/custom-metrics/", GroupDiscovery("custom-metrics")),
        (P, VersionDiscovery("custom.metrics.k8s.io", "v1beta2")),
        (E + "/", VersionDiscovery("external.metrics.k8s.io", "v1beta1")),
        ("/apis/custom-metrics/v1alpha1", VersionDiscovery("custom-metrics", "v1alpha1")),
    ],
)
def test_discovery_routes(path: str, expected: object) -> None:
    assert parse(path, NO_QUERY) == expected


@pytest.mark.parametrize(
    "path",
    ["/api", "/apis2", "/apis/apps/v1", "/apis/custom.metrics.k8s.io/v1", "/healthz", "//apis/"],
)
def test_paths_outside_the_served_groups_are_not_ours(path: str) -> None:
    assert parse(path, NO_QUERY) is None


def test_external_route_takes_the_label_selector_as_metric_selector() -> None:
    parsed = parse(
        E + "/namespaces/default/queue_depth", parse_query(b"labelSelector=queue%3Djobs")
    )
    assert isinstance(parsed, ExternalMetricRequest)
    assert (parsed.namespace, parsed.metric, str(parsed.metric_selector)) == (
        "default",
        "queue_depth",
        "queue=jobs",
    )


def test_external_metric_named_status_is_served_unlike_go() -> None:
    parsed = parse(E + "/namespaces/default/status", NO_QUERY)
    assert isinstance(parsed, ExternalMetricRequest)
    assert parsed.metric == "status"


def test_watch_on_external_is_method_not_allowed() -> None:
    with pytest.raises(MethodNotAllowed):
        parse(E + "/namespaces/default/q", parse_query(b"watch=1"))
    assert isinstance(
        parse(E + "/namespaces/default/q", parse_query(b"watch=false")), ExternalMetricRequest
    )


def test_query_first_value_wins_and_plus_is_space() -> None:
    query = parse_query(
        b"labelSelector=a%3Db&labelSelector=c%3Dd&metricLabelSelector=x+in+(y)&pretty=true&other=1"
    )
    assert query == QueryParams(label_selector="a=b", metric_label_selector="x in (y)", pretty=True)


def test_query_absent_pretty_is_undecided() -> None:
    assert parse_query(b"").pretty is None
    assert parse_query(b"pretty=0").pretty is False


def test_selectors_are_parsed_and_errors_are_bad_requests() -> None:
    parsed = metric(
        P + "/namespaces/ns/pods/*/m", parse_query(b"labelSelector=app+in+(web,api),tier!%3Ddb")
    )
    assert str(parsed.label_selector) == "app in (api,web),tier!=db"
    with pytest.raises(BadRequest, match="found '=', expected"):
        parse(P + "/namespaces/ns/pods/*/m", parse_query(b"metricLabelSelector=%3Dx"))


def test_label_selector_of_a_single_object_is_still_validated() -> None:
    with pytest.raises(BadRequest):
        parse(P + "/namespaces/ns/pods/one/m", parse_query(b"labelSelector=%3D"))


@pytest.mark.parametrize(
    ("path", "field_selector", "ok"),
    [
        (P + "/namespaces/ns/pods/foo/m", "metadata.name=foo", True),
        (P + "/namespaces/ns/pods/foo/m", "metadata.name==foo", True),
        (P + "/namespaces/ns/pods/foo/m", "metadata.name=bar", False),
        (P + "/namespaces/ns/pods/*/m", "metadata.name=*", True),
        (P + "/namespaces/ns/pods/foo/m", "metadata.namespace=ns", False),
        (E + "/namespaces/ns/q", "metadata.namespace=ns", True),
    ],
)
def test_field_selector_must_name_the_requested_object(
    path: str, field_selector: str, ok: bool
) -> None:
    query = QueryParams(field_selector=field_selector)
    if ok:
        assert parse(path, query) is not None
    else:
        with pytest.raises(
            BadRequest, match="fieldSelector metadata.name doesn't match requested name"
        ):
            parse(path, query)
