"""The pass-through reads an upstream's documents into our values: the wire shapes of the Go
reference (../shared/reference/custom-metrics-api.md, sections 2 and 4), verbatim, and what a
Go client tolerates (bare numbers, null lists, fractional timestamps)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from custom_metrics_server.api.wire import external_metric_value_list, metric_value_list
from custom_metrics_server.backends.passthrough import prefers_wildcard
from custom_metrics_server.backends.passthrough.decode import (
    _quantity,
    custom_listing,
    external_listing,
    external_samples,
    group_versions,
    samples_for,
)
from custom_metrics_server.cluster.in_memory import InMemoryCluster
from custom_metrics_server.domain import GroupResource, ItemShape, MetricInfo
from custom_metrics_server.machinery.quantity import Quantity
from tests.backends.passthrough.conftest import custom_request, external_request

# Section 2.2, verbatim.
V1BETA1 = """{"kind":"MetricValueList","apiVersion":"custom.metrics.k8s.io/v1beta1","metadata":{},
 "items":[{"describedObject":{"kind":"Pod","namespace":"default","name":"web-1","apiVersion":"/v1"},
           "metricName":"http_requests","timestamp":"2026-01-02T03:04:05Z","window":60,
           "value":"1500m","selector":null}]}"""
# Section 2.3, verbatim.
V1BETA2 = """{"kind":"MetricValueList","apiVersion":"custom.metrics.k8s.io/v1beta2","metadata":{},
 "items":[{"describedObject":{"kind":"Pod","namespace":"default","name":"web-1","apiVersion":"/v1"},
           "metric":{"name":"http_requests","selector":{"matchLabels":{"verb":"GET"}}},
           "timestamp":"2026-01-02T03:04:05Z","windowSeconds":60,"value":"1500m"}]}"""
# Section 2.4, verbatim.
EXTERNAL = """{"kind":"ExternalMetricValueList","apiVersion":"external.metrics.k8s.io/v1beta1","metadata":{},
 "items":[{"metricName":"queue_depth","metricLabels":{"queue":"jobs"},
           "timestamp":"2026-01-02T03:04:05Z","value":"42"}]}"""
# Section 4.3, verbatim.
RESOURCES = """{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"custom.metrics.k8s.io/v1beta2",
 "resources":[{"name":"pods/http_requests","singularName":"","namespaced":true,
               "kind":"MetricValueList","verbs":["get"]},
              {"name":"namespaces/queue_length","singularName":"","namespaced":false,
               "kind":"MetricValueList","verbs":["get"]}]}"""
STAMP = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC).timestamp()


def _cluster() -> InMemoryCluster:
    cluster = InMemoryCluster()
    cluster.add("pods", "web-1", namespace="default")
    return cluster


@pytest.mark.parametrize("body", [V1BETA1, V1BETA2], ids=["v1beta1", "v1beta2"])
def test_both_versions_read_into_one_sample_described_by_our_mapping(body: str) -> None:
    cluster = _cluster()
    request = custom_request(cluster, "pods", "http_requests", [("default", "web-1")])
    found: dict = {}
    decoded = samples_for(json.loads(body), request, {"web-1": ("default", "web-1")}, found)
    assert decoded.skipped == 0
    (sample,) = found.values()
    assert sample.value == Decimal("1.5")
    assert sample.timestamp == STAMP
    assert sample.window == 60
    # The Go adapters' "/v1" is not carried over: our REST mapping says "v1".
    assert (sample.described.kind, sample.described.api_version) == ("Pod", "v1")
    assert (sample.described.namespace, sample.described.name) == ("default", "web-1")
    # Our encoder writes it in either version, whatever the upstream spoke.
    v1beta1 = json.loads(
        metric_value_list(
            [sample],
            api_version="custom.metrics.k8s.io/v1beta1",
            shape=ItemShape.V1BETA1,
            metric_selector=request.metric_selector,
        )
    )
    assert v1beta1["items"][0]["metricName"] == "http_requests"
    assert v1beta1["items"][0]["value"] == "1500m"
    assert v1beta1["items"][0]["window"] == 60


def test_items_of_objects_not_asked_for_and_duplicates_are_dropped() -> None:
    cluster = _cluster()
    request = custom_request(cluster, "pods", "m", [("ns", "a")])
    document = {
        "kind": "MetricValueList",
        "items": [
            {"describedObject": {"name": "b"}, "value": "1", "timestamp": None},
            {"describedObject": {"name": "a"}, "value": "2", "timestamp": None},
            {"describedObject": {"name": "a"}, "value": "3", "timestamp": None},
        ],
    }
    found: dict = {}
    samples_for(document, request, {"a": ("ns", "a")}, found)
    assert [(key, s.value, s.timestamp) for key, s in found.items()] == [(("ns", "a"), 2, 0.0)]


def test_values_are_parsed_as_kubernetes_quantities_exactly() -> None:
    cluster = _cluster()
    request = custom_request(cluster, "pods", "m", [("ns", f"p{i}") for i in range(7)])
    raw = ["1Ki", "2k", "1.5", "7", 3, 0.25, "100n"]
    document = {
        "kind": "MetricValueList",
        "items": [
            {"describedObject": {"name": f"p{i}"}, "value": value, "timestamp": TIMESTAMPS[i]}
            for i, value in enumerate(raw)
        ],
    }
    found: dict = {}
    samples_for(document, request, {f"p{i}": ("ns", f"p{i}") for i in range(7)}, found)
    values = [found[("ns", f"p{i}")].value for i in range(7)]
    assert values == [1024, 2000, Decimal("1.5"), 7, 3, Decimal("0.25"), Decimal("1E-7")]
    stamps = [found[("ns", f"p{i}")].timestamp for i in range(7)]
    assert stamps[:3] == [STAMP, STAMP + 0.5, STAMP - 3600]


TIMESTAMPS = [
    "2026-01-02T03:04:05Z",
    "2026-01-02T03:04:05.5Z",
    "2026-01-02T03:04:05+01:00",
    "2026-01-02T03:04:05Z",
    "2026-01-02T03:04:05Z",
    "2026-01-02T03:04:05Z",
    "2026-01-02T03:04:05Z",
]


def test_unreadable_items_are_left_out_and_counted() -> None:
    cluster = _cluster()
    request = custom_request(cluster, "pods", "m", [("ns", "a"), ("ns", "b"), ("ns", "c")])
    document = {
        "kind": "MetricValueList",
        "items": [
            {"describedObject": {"name": "a"}, "value": "12 apples", "timestamp": None},
            {"describedObject": {"name": "b"}, "value": "1", "timestamp": "yesterday"},
            {"describedObject": {"name": "c"}, "value": "1", "timestamp": None},
        ],
    }
    found: dict = {}
    decoded = samples_for(document, request, {n: ("ns", n) for n in "abc"}, found)
    assert list(found) == [("ns", "c")]
    assert decoded.skipped == 2
    assert "12 apples" in decoded.problem


@pytest.mark.parametrize(
    "document",
    [
        {"kind": "Status", "message": "nope"},
        {"kind": "MetricValueList", "items": {"not": "a list"}},
        ["a", "list"],
    ],
)
def test_a_body_that_is_not_a_metric_value_list_is_an_error(document: object) -> None:
    cluster = _cluster()
    request = custom_request(cluster, "pods", "m", [("ns", "a")])
    with pytest.raises(ValueError, match="MetricValueList|not a list"):
        samples_for(document, request, {"a": ("ns", "a")}, {})


def test_a_null_list_is_no_items() -> None:
    cluster = _cluster()
    request = custom_request(cluster, "pods", "m", [("ns", "a")])
    found: dict = {}
    assert samples_for({"kind": "MetricValueList", "items": None}, request, {}, found).skipped == 0
    assert found == {}


def test_external_series_keep_their_labels_and_are_not_filtered_again() -> None:
    decoded = external_samples(json.loads(EXTERNAL), external_request("queue_depth"))
    (series,) = decoded.samples
    assert (series.metric, dict(series.labels), series.value) == (
        "queue_depth",
        {"queue": "jobs"},
        42,
    )
    # KEDA's items carry `metricLabels: null` whatever the selector: kept, as {}.
    keda = {
        "kind": "ExternalMetricValueList",
        "items": [
            {
                "metricName": "s0-rabbitmq-orders",
                "metricLabels": None,
                "timestamp": None,
                "value": "3",
            }
        ],
    }
    request = external_request("s0-rabbitmq-orders", selector="scaledobject.keda.sh/name=worker")
    (only,) = external_samples(keda, request).samples
    assert dict(only.labels) == {}
    assert json.loads(external_metric_value_list([only]))["items"][0]["value"] == "3"


def test_discovery_documents() -> None:
    assert custom_listing(json.loads(RESOURCES)) == {
        MetricInfo(GroupResource("", "pods"), True, "http_requests"),
        MetricInfo(GroupResource("", "namespaces"), False, "queue_length"),
    }
    placeholder = {"kind": "APIResourceList", "resources": [{"name": "/custommetrics"}]}
    assert custom_listing(placeholder) == frozenset()
    keda = {
        "kind": "APIResourceList",
        "resources": [{"name": "externalmetrics"}, {"name": "s0-cron"}],
    }
    assert external_listing(keda) == {"s0-cron"}
    deployments = {"resources": [{"name": "deployments.apps/hits", "namespaced": True}]}
    assert custom_listing(deployments) == {
        MetricInfo(GroupResource("apps", "deployments"), True, "hits")
    }
    # Section 4.1: the Go adapter's /apis has no apiVersion; section 4.2: v1beta1 only.
    apis = {
        "kind": "APIGroupList",
        "groups": [
            {
                "name": "custom.metrics.k8s.io",
                "versions": [
                    {"groupVersion": "custom.metrics.k8s.io/v1beta1", "version": "v1beta1"}
                ],
                "preferredVersion": {
                    "groupVersion": "custom.metrics.k8s.io/v1beta1",
                    "version": "v1beta1",
                },
            }
        ],
    }
    assert group_versions(apis, "custom.metrics.k8s.io") == (["v1beta1"], "v1beta1")
    assert group_versions(apis, "external.metrics.k8s.io") is None


def test_the_wildcard_is_chosen_by_cost() -> None:
    assert not prefers_wildcard(1, 1)
    assert not prefers_wildcard(2, 1000)  # 2 calls beat 1,000 items
    assert prefers_wildcard(2, 2)
    assert prefers_wildcard(30, 1000)
    assert not prefers_wildcard(10, 1000)


@pytest.mark.parametrize(
    "text",
    [
        "0",
        "-0",
        "1",
        "-1",
        "007",
        "+1",
        "1500m",
        "0m",
        "-0m",
        "-5m",
        "010m",
        "999999999999999",
        "999999999999999m",
        "9999999999999999",
        "1Ki",
        "2k",
        "1.5",
        "100n",
        "1e3",
        "0.0000000001",
    ],
)
def test_the_quantity_fast_path_is_the_parser_exactly(text: str) -> None:
    fast, parsed = _quantity(text), Quantity.parse(text).value
    assert fast == parsed
    assert str(Decimal(fast)) == str(parsed)  # the same digits and exponent, not just equal
    assert _quantity(text) is fast  # memoised
