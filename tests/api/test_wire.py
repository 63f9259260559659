"""Wire rendering: exact bytes per version, Go escaping, caching, Status objects."""

from __future__ import annotations

import tracemalloc
from decimal import Decimal

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from custom_metrics_server.api import schemas, wire
from custom_metrics_server.domain import ExternalSample, ItemShape, ObjectRef, Sample
from custom_metrics_server.errors import (
    BadRequest,
    metric_not_found,
    route_not_found,
    watch_not_supported,
)
from custom_metrics_server.machinery.label_parser import parse_selector
from custom_metrics_server.machinery.labels import EVERYTHING

POD = ObjectRef(kind="Pod", namespace="default", name="web-1", api_version="v1")
TS = 1767323045.9  # 2026-01-02T03:04:05.9Z: sub-second precision is dropped


def sample(**overrides: object) -> Sample:
    fields: dict[str, object] = {
        "described": POD,
        "metric": "http_requests",
        "value": Decimal("1.5"),
        "timestamp": TS,
        "window": 60,
    }
    fields.update(overrides)
    return Sample(**fields)  # type: ignore[arg-type]


def test_v1beta1_list_matches_the_contract_example_byte_for_byte() -> None:
    body = wire.metric_value_list(
        [sample()],
        api_version="custom.metrics.k8s.io/v1beta1",
        shape=ItemShape.V1BETA1,
        metric_selector=EVERYTHING,
    )
    assert body == (
        b'{"kind":"MetricValueList","apiVersion":"custom.metrics.k8s.io/v1beta1","metadata":{},'
        b'"items":[{"describedObject":{"kind":"Pod","namespace":"default","name":"web-1","apiVersion":"v1"},'
        b'"metricName":"http_requests","timestamp":"2026-01-02T03:04:05Z","window":60,'
        b'"value":"1500m","selector":null}]}\n'
    )


def test_v1beta2_list_with_echoed_selector_matches_the_contract_example() -> None:
    body = wire.metric_value_list(
        [sample()],
        api_version="custom.metrics.k8s.io/v1beta2",
        shape=ItemShape.V1BETA2,
        metric_selector=parse_selector("verb=GET"),
    )
    assert body == (
        b'{"kind":"MetricValueList","apiVersion":"custom.metrics.k8s.io/v1beta2","metadata":{},'
        b'"items":[{"describedObject":{"kind":"Pod","namespace":"default","name":"web-1","apiVersion":"v1"},'
        b'"metric":{"name":"http_requests","selector":{"matchLabels":{"verb":"GET"}}},'
        b'"timestamp":"2026-01-02T03:04:05Z","windowSeconds":60,"value":"1500m"}]}\n'
    )
    schemas.MetricValueListV1beta2.model_validate_json(body)


def test_window_is_omitted_when_unknown_and_namespace_when_cluster_scoped() -> None:
    node = ObjectRef(kind="Node", namespace="", name="n1", api_version="v1")
    body = wire.metric_value_list(
        [sample(described=node, window=None)],
        api_version="x/v1beta2",
        shape=ItemShape.V1BETA2,
        metric_selector=EVERYTHING,
    )
    item = orjson.loads(body)["items"][0]
    assert "windowSeconds" not in item
    assert item["describedObject"] == {"kind": "Node", "name": "n1", "apiVersion": "v1"}


def test_empty_list_has_an_empty_items_array_not_null() -> None:
    body = wire.metric_value_list(
        [],
        api_version="custom.metrics.k8s.io/v1beta2",
        shape=ItemShape.V1BETA2,
        metric_selector=EVERYTHING,
    )
    assert orjson.loads(body)["items"] == []


def test_fragments_are_rendered_once_and_reused() -> None:
    one = sample()
    first = wire.metric_value_list(
        [one], api_version="g/v1beta2", shape=ItemShape.V1BETA2, metric_selector=EVERYTHING
    )
    assert "v1beta2" in one.cache
    one.cache["v1beta2"] = b'{"cached":true}'
    second = wire.metric_value_list(
        [one], api_version="g/v1beta2", shape=ItemShape.V1BETA2, metric_selector=EVERYTHING
    )
    assert second != first
    assert b'{"cached":true}' in second


def test_memoised_fragments_hold_their_length_not_the_encoders_buffer() -> None:
    """orjson returns a 300-byte item in a buffer of 4 KiB or more; kept as is, one fragment
    per pod asked about held ~300 MiB at 150,000 pods."""
    samples = [
        sample(
            described=ObjectRef(kind="Pod", namespace="default", name=f"web-{i}", api_version="v1")
        )
        for i in range(1000)
    ]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        wire.metric_value_list(
            samples, api_version="g/v1beta2", shape=ItemShape.V1BETA2, metric_selector=EVERYTHING
        )
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    lengths = sum(len(s.cache["v1beta2"]) for s in samples)
    # the fragments, their cache dicts' tables and slack: well under 2x, not 10x
    assert kept < 2 * lengths + 1000 * 400, (kept, lengths)


def test_selector_echo_is_cached_per_selector() -> None:
    one = sample()
    get, put = parse_selector("verb=GET"), parse_selector("verb=PUT")
    first = wire.metric_value_list(
        [one], api_version="g/v1beta2", shape=ItemShape.V1BETA2, metric_selector=get
    )
    other = wire.metric_value_list(
        [one], api_version="g/v1beta2", shape=ItemShape.V1BETA2, metric_selector=put
    )
    assert b'"verb":"GET"' in first
    assert b'"verb":"PUT"' in other
    assert set(one.cache) == {"v1beta2|verb=GET", "v1beta2|verb=PUT"}


def test_unrepresentable_metric_selector_echoes_null() -> None:
    assert wire.label_selector_json(parse_selector("a!=b")) is None
    assert wire.label_selector_json(parse_selector("a in (x,y),!b")) == {
        "matchExpressions": [
            {"key": "a", "operator": "In", "values": ["x", "y"]},
            {"key": "b", "operator": "DoesNotExist"},
        ]
    }


def test_go_html_escaping_is_applied() -> None:
    ref = ObjectRef(kind="Pod", namespace="ns", name="a<b>&c\u2028", api_version="v1")
    body = wire.metric_value_list(
        [sample(described=ref)],
        api_version="g/v1beta1",
        shape=ItemShape.V1BETA1,
        metric_selector=EVERYTHING,
    )
    assert b'"name":"a\\u003cb\\u003e\\u0026c\\u2028"' in body
    assert orjson.loads(body)["items"][0]["describedObject"]["name"] == "a<b>&c\u2028"


def test_external_labels_are_sorted_like_go_maps() -> None:
    item = ExternalSample(metric="q", labels={"z": "1", "a": "2"}, value=42, timestamp=TS)
    body = wire.external_metric_value_list([item])
    assert body == (
        b'{"kind":"ExternalMetricValueList","apiVersion":"external.metrics.k8s.io/v1beta1","metadata":{},'
        b'"items":[{"metricName":"q","metricLabels":{"a":"2","z":"1"},"timestamp":"2026-01-02T03:04:05Z","value":"42"}]}\n'
    )


def test_zero_time_is_null() -> None:
    assert wire.format_time(0) is None
    assert wire.format_time(1) == "1970-01-01T00:00:01Z"


def test_status_matches_the_contract_shape() -> None:
    assert wire.status(route_not_found()) == (
        b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        b'"message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}\n'
    )
    body = orjson.loads(
        wire.status(metric_not_found(resource="pods", metric="m", name="x", selector="a=b"))
    )
    assert "details" not in body
    assert body["message"] == "the server could not find the metric m for pods x with selector a=b"
    assert orjson.loads(wire.status(watch_not_supported()))["details"] == {
        "group": "external.metrics.k8s.io",
        "kind": "*",
    }
    schemas.Status.model_validate_json(wire.status(BadRequest("x")))


def test_pretty_indents_with_two_spaces_and_keeps_escaping() -> None:
    assert (
        wire.prettify(b'{"a":["<"],"b":{}}\n')
        == b'{\n  "a": [\n    "\\u003c"\n  ],\n  "b": {}\n}\n'
    )


@given(st.text(), st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3))
def test_any_text_round_trips_through_go_escaping(name: str, labels: dict[str, str]) -> None:
    item = ExternalSample(metric=name, labels=labels, value=1, timestamp=TS)
    decoded = orjson.loads(wire.external_metric_value_list([item]))["items"][0]
    assert decoded["metricName"] == name
    assert decoded["metricLabels"] == labels


@pytest.mark.parametrize(
    ("value", "text"),
    [(0, "0"), (1500, "1500"), (2000, "2k"), (0.25, "250m"), (Decimal("1e-9"), "1n"), (-3, "-3")],
)
def test_values_are_canonical_quantities(value: object, text: str) -> None:
    body = wire.metric_value_list(
        [sample(value=value)],
        api_version="g/v1beta2",
        shape=ItemShape.V1BETA2,
        metric_selector=EVERYTHING,
    )
    assert orjson.loads(body)["items"][0]["value"] == text


@given(
    values=st.lists(
        st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=-1e6, max_value=1e9),
        max_size=6,
    ),
    names=st.lists(st.text(min_size=1, max_size=8), min_size=6, max_size=6),
    window=st.none() | st.integers(min_value=1, max_value=3600),
    shape=st.sampled_from(list(ItemShape)),
    selector=st.sampled_from(["", "verb=GET", "a in (x,y)"]),
)
def test_one_off_samples_render_the_same_bytes_in_one_call(
    values: list[Decimal], names: list[str], window: int | None, shape: ItemShape, selector: str
) -> None:
    """Samples made for one answer (`reused=False`, the Prometheus backend's) are encoded in
    one call instead of per cached fragment; the body must not change by a byte."""

    def made(reused: bool) -> list[Sample]:
        return [
            sample(
                described=ObjectRef("Pod", "ns", name, "v1"),
                value=value,
                window=window,
                reused=reused,
            )
            for value, name in zip(values, names, strict=False)
        ]

    kwargs = {
        "api_version": f"custom.metrics.k8s.io/{shape.value}",
        "shape": shape,
        "metric_selector": parse_selector(selector),
    }
    once = wire.metric_value_list(made(False), **kwargs)  # type: ignore[arg-type]
    assert once == wire.metric_value_list(made(True), **kwargs)  # type: ignore[arg-type]
    orjson.loads(once)
