"""The hand-written Kubernetes protobuf encoder (api.protowire, api.protobuf_messages,
api.protobuf), checked three ways: known bytes (wire primitives and small objects worked out
from the gogo-generated Go marshal code), an independent decoder built from the `.proto`
definitions (tests/kubeproto.py), and the hot path against the schema-driven encoder of the
JSON answer."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custom_metrics_server import errors
from custom_metrics_server.api import discovery, protobuf, protobuf_messages, protowire, wire
from custom_metrics_server.domain import (
    ExternalSample,
    GroupResource,
    ItemShape,
    MetricInfo,
    ObjectRef,
    Sample,
)
from custom_metrics_server.machinery.label_parser import parse_selector
from custom_metrics_server.machinery.labels import EVERYTHING
from tests import kubeproto

POD = ObjectRef(kind="Pod", namespace="default", name="web-1", api_version="v1")
TS = 1767323045.9  # 2026-01-02T03:04:05.9Z: sub-second precision is dropped, as in JSON
V1BETA2 = "custom.metrics.k8s.io/v1beta2"
V1BETA1 = "custom.metrics.k8s.io/v1beta1"


def sample(**overrides: Any) -> Sample:
    fields: dict[str, Any] = {
        "described": POD,
        "metric": "http_requests",
        "value": Decimal("1.5"),
        "timestamp": TS,
        "window": 60,
    }
    fields.update(overrides)
    return Sample(**fields)


# --- wire primitives -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "8001"),
        (150, "9601"),  # the protobuf encoding guide's example
        (300, "ac02"),
        (16383, "ff7f"),
        (16384, "808001"),
        (2**63 - 1, "ffffffffffffffff7f"),
        # Go writes a negative int64 as uint64: ten bytes.
        (-1, "ffffffffffffffffff01"),
        (-(2**63), "80808080808080808001"),
    ],
)
def test_varint(value: int, encoded: str) -> None:
    assert protowire.varint(value).hex() == encoded


def test_tags_and_length_prefixes() -> None:
    assert protowire.tag(1, 2) == b"\x0a"
    assert protowire.tag(6, 0) == b"\x30"
    assert protowire.tag(17, 2) == b"\x8a\x01"  # ObjectMeta.managedFields, as gogo writes it
    assert protowire.length_delimited(b"\x0a", b"") == b"\x0a\x00"
    assert protowire.length_delimited(b"\x0a", b"x" * 200)[:3] == b"\x0a\xc8\x01"


def test_envelope_is_the_magic_and_a_runtime_unknown() -> None:
    body = protowire.envelope("v1", "Status", [b"\x10\x00", b"\x18\x01"])
    assert (
        body
        == (
            b"k8s\x00"
            b"\x0a\x0c" + b"\x0a\x02v1" + b"\x12\x06Status"  # typeMeta {apiVersion 1, kind 2}
            b"\x12\x04\x10\x00\x18\x01"  # raw
            b"\x1a\x00"  # contentEncoding, always written
            b"\x22\x00"  # contentType, always written
        )
    )


def test_status_bytes_match_the_go_marshal_order() -> None:
    """metav1.Status as `Status.MarshalToSizedBuffer` writes it: metadata (ListMeta with its
    three strings), status, message, reason, details (set: `details: {}` in JSON), code."""
    raw = (
        b"\x0a\x06\x0a\x00\x12\x00\x1a\x00"
        b"\x12\x07Failure"
        b"\x1a\x30the server could not find the requested resource"
        b"\x22\x08NotFound"
        # StatusDetails: name 1, group 2, kind 3, (no causes), retryAfterSeconds 5, uid 6.
        b"\x2a\x0a\x0a\x00\x12\x00\x1a\x00\x28\x00\x32\x00"
        b"\x30\x94\x03"
    )
    assert protobuf.status(errors.route_not_found()) == protowire.envelope("v1", "Status", [raw])


def test_status_without_details_omits_the_pointer_field() -> None:
    body = protobuf.status(errors.BadRequest("invalid request path"))
    _, _, decoded, raw = kubeproto.decode(body)
    assert not decoded.HasField("details")  # type: ignore[attr-defined]
    assert raw.endswith(b"\x22\x0aBadRequest\x30\x90\x03")


def test_one_item_v1beta2_list_bytes() -> None:
    body = protobuf.metric_value_list(
        [sample(value=2)], api_version=V1BETA2, shape=ItemShape.V1BETA2, metric_selector=EVERYTHING
    )
    ref = b"\x0a\x03Pod\x12\x07default\x1a\x05web-1\x22\x00\x2a\x02v1\x32\x00\x3a\x00"  # 7 strings
    item = (
        b"\x0a" + bytes([len(ref)]) + ref
        + b"\x12\x0f\x0a\x0dhttp_requests"  # metric {name}, no selector
        + b"\x1a\x08\x08" + protowire.varint(1767323045) + b"\x10\x00"  # Time {seconds, nanos}
        + b"\x20\x3c"  # windowSeconds 60
        + b"\x2a\x03\x0a\x012"  # Quantity {string "2"}
    )  # fmt: skip
    raw = b"\x0a\x06\x0a\x00\x12\x00\x1a\x00" + b"\x12" + bytes([len(item)]) + item
    assert body == protowire.envelope(V1BETA2, "MetricValueList", [raw])


# --- the independent decoder: protobuf and JSON answers hold the same values ---------------


@pytest.mark.parametrize("shape", [ItemShape.V1BETA1, ItemShape.V1BETA2])
@pytest.mark.parametrize("selector", ["", "verb=GET", "verb in (GET,PUT),!canary,tier"])
def test_metric_value_lists_decode_to_the_json_values(shape: ItemShape, selector: str) -> None:
    node = ObjectRef(kind="Node", namespace="", name="n1", api_version="v1")
    deployment = ObjectRef(kind="Deployment", namespace="ns", name="web", api_version="apps/v1")
    samples = [
        sample(),
        sample(described=node, window=None, value=Decimal("0.001")),
        sample(described=deployment, value=10**12, timestamp=0),  # zero time: null / empty
        sample(value=Decimal("-3.5"), window=0),
        sample(metric="x&<>\u2028", value=1.25),  # Go escapes HTML characters in JSON only
    ]
    api_version = V1BETA2 if shape is ItemShape.V1BETA2 else V1BETA1
    metric_selector = parse_selector(selector)
    json_body = wire.metric_value_list(
        samples, api_version=api_version, shape=shape, metric_selector=metric_selector
    )
    proto_body = protobuf.metric_value_list(
        samples, api_version=api_version, shape=shape, metric_selector=metric_selector
    )
    decoded = kubeproto.same_values(orjson.loads(json_body), proto_body)
    assert len(decoded["items"]) == len(samples)


def test_external_metric_value_list_decodes_to_the_json_values() -> None:
    samples = [
        ExternalSample(metric="queue", labels={"b": "2", "a": "1"}, value=42, timestamp=TS),
        ExternalSample(metric="queue", labels={}, value=Decimal("0.5"), timestamp=TS, window=30),
    ]
    json_document = orjson.loads(wire.external_metric_value_list(samples))
    decoded = kubeproto.same_values(json_document, protobuf.external_metric_value_list(samples))
    assert decoded["items"][0]["metricLabels"] == {"a": "1", "b": "2"}


STATUS_ERRORS = [
    errors.route_not_found(),
    errors.metric_not_found(resource="pods", metric="m", name="p", selector="a=b"),
    errors.invalid_request_path(),
    errors.method_not_allowed(),
    errors.watch_not_supported(),
    errors.not_acceptable(("application/json",)),
    errors.too_many_requests(3),
    errors.request_timeout(),
    errors.internal_error(),
    errors.uri_too_long(20000),
    errors.Forbidden(
        'pods.custom.metrics.k8s.io "*" is forbidden: User "bob" cannot get resource',
        details={"name": "*", "group": "custom.metrics.k8s.io", "kind": "pods"},
    ),
    errors.InternalError(
        "Internal error occurred: boom",
        details={"causes": [{"message": "boom"}, {"reason": "X", "field": "f"}], "uid": "u"},
    ),
]


@pytest.mark.parametrize("error", STATUS_ERRORS, ids=lambda e: type(e).__name__)
def test_status_decodes_to_the_json_values(error: errors.StatusError) -> None:
    kubeproto.same_values(orjson.loads(wire.status(error)), protobuf.status(error))


def _discovery_documents() -> list[dict[str, Any]]:
    metrics = [
        MetricInfo(GroupResource("", "pods"), True, "http_requests"),
        MetricInfo(GroupResource("apps", "deployments"), True, "queue"),
        MetricInfo(GroupResource("", "nodes"), False, "temperature"),
    ]
    return [
        discovery.api_group_list("10.0.0.1:6443"),
        discovery.api_group("custom.metrics.k8s.io"),
        discovery.api_group("external.metrics.k8s.io"),
        discovery.custom_resource_list("custom.metrics.k8s.io", "v1beta2", metrics),
        discovery.custom_resource_list("custom.metrics.k8s.io", "v1beta1", []),
        discovery.external_resource_list(["queue", "lag"]),
        {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": "x/v1",
            "resources": [
                {
                    "name": "things",
                    "singularName": "thing",
                    "namespaced": True,
                    "group": "g",
                    "version": "v2",
                    "kind": "Thing",
                    "verbs": [],
                    "shortNames": ["th", "t"],
                    "categories": ["all"],
                    "storageVersionHash": "abc=",
                }
            ],
        },
    ]


@pytest.mark.parametrize("document", _discovery_documents(), ids=lambda d: d["kind"])
def test_discovery_documents_decode_to_the_json_values(document: dict[str, Any]) -> None:
    json_document = orjson.loads(wire.dumps(document))
    kubeproto.same_values(json_document, protobuf.encode_document(document))


def test_apis_root_keeps_the_stripped_version_and_verbs_are_a_message() -> None:
    api_version, kind, _, _ = kubeproto.decode(
        protobuf.encode_document(discovery.api_group_list("h:1"))
    )
    assert (api_version, kind) == ("", "APIGroupList")
    document = discovery.external_resource_list([])
    _, _, decoded, _ = kubeproto.decode(protobuf.encode_document(document))
    resource: Any = decoded.resources[0]  # type: ignore[attr-defined]
    assert resource.HasField("verbs")
    assert list(resource.verbs.items) == ["get"]
    # A nil Verbs (JSON null) is not written; an empty list is an empty message.
    for verbs, present in ((None, False), ([], True)):
        entry = {**document["resources"][0], "verbs": verbs}
        body = protobuf.encode_document({**document, "resources": [entry]})
        _, _, decoded, _ = kubeproto.decode(body)
        assert decoded.resources[0].HasField("verbs") is present  # type: ignore[attr-defined]


# --- metrics.k8s.io: the JSON-shaped documents the metrics.k8s.io endpoints build -----------

POD_METRICS_LIST: dict[str, Any] = {
    "kind": "PodMetricsList",
    "apiVersion": "metrics.k8s.io/v1beta1",
    "metadata": {},
    "items": [
        {
            "metadata": {
                "name": "web-1",
                "namespace": "default",
                "creationTimestamp": "2026-01-02T03:04:06Z",
                "labels": {"app": "web", "pod-template-hash": "5d78f"},
            },
            "timestamp": "2026-01-02T03:04:05Z",
            "window": "20.038s",
            "containers": [
                {"name": "app", "usage": {"cpu": "250m", "memory": "128Mi"}},
                {"name": "sidecar", "usage": {"memory": "24572Ki", "cpu": "1203114n"}},
            ],
        },
        {
            "metadata": {
                "name": "idle",
                "namespace": "kube-system",
                "creationTimestamp": "2026-01-02T03:04:06Z",
            },
            "timestamp": "2026-01-02T03:04:00Z",
            "window": "1m0.5s",
            "containers": [],
        },
    ],
}
NODE_METRICS_LIST: dict[str, Any] = {
    "kind": "NodeMetricsList",
    "apiVersion": "metrics.k8s.io/v1beta1",
    "metadata": {},
    "items": [
        {
            "metadata": {
                "name": "node-1",
                "creationTimestamp": "2026-01-02T03:04:06Z",
                "labels": {"kubernetes.io/hostname": "node-1", "kubernetes.io/os": "linux"},
            },
            "timestamp": "2026-01-02T03:04:05Z",
            "window": "10.5s",
            "usage": {"cpu": "1503m", "memory": "3882344Ki"},
        },
        {
            "metadata": {"name": "node-2", "creationTimestamp": "2026-01-02T03:04:06Z"},
            "timestamp": "2026-01-02T03:04:05Z",
            "window": "500ms",
            "usage": {},
        },
    ],
}


def _single(list_document: dict[str, Any], kind: str) -> dict[str, Any]:
    item = copy.deepcopy(list_document["items"][0])
    return {"kind": kind, "apiVersion": "metrics.k8s.io/v1beta1", **item}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (POD_METRICS_LIST, protobuf_messages.POD_METRICS_LIST),
        (NODE_METRICS_LIST, protobuf_messages.NODE_METRICS_LIST),
        (_single(POD_METRICS_LIST, "PodMetrics"), protobuf_messages.POD_METRICS),
        (_single(NODE_METRICS_LIST, "NodeMetrics"), protobuf_messages.NODE_METRICS),
        ({**POD_METRICS_LIST, "items": []}, protobuf_messages.POD_METRICS_LIST),
    ],
    ids=["PodMetricsList", "NodeMetricsList", "PodMetrics", "NodeMetrics", "empty"],
)
def test_metrics_k8s_io_documents_decode_to_the_json_values(
    document: dict[str, Any], message: Any
) -> None:
    body = protobuf.encode_document(document, message)
    assert body == protobuf.encode_document(document)  # the kind picks the same message
    kubeproto.same_values(orjson.loads(wire.dumps(document)), body)


def test_window_is_a_duration_in_nanoseconds() -> None:
    _, _, decoded, _ = kubeproto.decode(protobuf.encode_document(POD_METRICS_LIST))
    items: Any = decoded.items  # type: ignore[attr-defined]
    assert items[0].window.duration == 20_038_000_000
    assert items[1].window.duration == 60_500_000_000
    assert items[0].metadata.creationTimestamp.seconds == kubeproto.parse_rfc3339(
        "2026-01-02T03:04:06Z"
    )


def test_full_object_meta_round_trips() -> None:
    metadata = {
        "name": "n",
        "generateName": "n-",
        "namespace": "ns",
        "uid": "0b9c",
        "resourceVersion": "42",
        "generation": 3,
        "creationTimestamp": "2026-01-02T03:04:06Z",
        "deletionTimestamp": "2026-01-02T03:05:06Z",
        "deletionGracePeriodSeconds": 30,
        "labels": {"b": "2", "a": "1"},
        "annotations": {"note": "x"},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "rs",
                "uid": "u1",
                "controller": True,
                "blockOwnerDeletion": False,
            }
        ],
        "finalizers": ["f1", "f2"],
        "managedFields": [
            {
                "manager": "kubelet",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2026-01-02T03:04:06Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {}}},
                "subresource": "status",
            }
        ],
    }
    document = {**_single(NODE_METRICS_LIST, "NodeMetrics"), "metadata": metadata}
    body = protobuf.encode_document(document)
    decoded = kubeproto.same_values(orjson.loads(wire.dumps(document)), body)
    # A pointer bool set to false is still written (normalisation would hide it).
    assert decoded["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] is False
    assert b"\x8a\x01" in body  # managedFields (17)


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        ("0s", 0),
        ("1ns", 1),
        ("1.5\u00b5s", 1_500),
        ("999ms", 999_000_000),
        ("20.038s", 20_038_000_000),
        ("1m0s", 60_000_000_000),
        ("1h2m3.004s", 3_723_004_000_000),
        ("-1.5s", -1_500_000_000),
    ],
)
def test_go_durations(text: str, nanos: int) -> None:
    assert protowire.duration_ns(text) == nanos
    assert kubeproto.go_duration(nanos) == text


@pytest.mark.parametrize("text", ["", "s", "1", "1x", "1.s.", "--1s"])
def test_bad_durations_are_rejected(text: str) -> None:
    if text == "":
        assert protowire.duration_ns(text) == 0
        return
    with pytest.raises(ValueError, match="not a Go duration"):
        protowire.duration_ns(text)


def test_times() -> None:
    assert protowire.parse_time("2026-01-02T03:04:05Z") == (1767323045, 0)
    assert protowire.parse_time("2026-01-02T04:04:05.25+01:00") == (1767323045, 250_000_000)
    assert protowire.parse_time(None) is None
    assert protowire.time_message(None) == b""
    assert protowire.time_message(protowire.parse_time("0001-01-01T00:00:00Z")) == b""
    assert (
        protowire.time_message(protowire.parse_time("1970-01-01T00:00:00Z")) == b"\x08\x00\x10\x00"
    )
    with pytest.raises(ValueError, match="RFC 3339"):
        protowire.parse_time("yesterday")


# --- the hot path agrees with the schema-driven encoder of the JSON answer ------------------

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
samples_strategy = st.lists(
    st.builds(
        Sample,
        described=st.builds(
            ObjectRef,
            kind=st.sampled_from(["Pod", "Node", "Deployment"]),
            namespace=st.sampled_from(["", "ns", "kube-system"]),
            name=names,
            api_version=st.sampled_from(["v1", "apps/v1", ""]),
        ),
        metric=names,
        value=st.one_of(
            st.integers(-(10**15), 10**15),
            st.decimals(allow_nan=False, allow_infinity=False, places=3, max_value=10**9),
        ),
        timestamp=st.one_of(st.just(0.0), st.floats(1.0, 4e9)),
        window=st.one_of(st.none(), st.integers(-(2**40), 2**40)),
    ),
    max_size=5,
)


@settings(max_examples=300, deadline=None)
@given(
    samples=samples_strategy,
    shape=st.sampled_from(list(ItemShape)),
    selector=st.sampled_from(["", "a=b", "x in (1,2),!y"]),
)
def test_hot_path_equals_the_schema_encoding_of_the_json_answer(
    samples: list[Sample], shape: ItemShape, selector: str
) -> None:
    api_version = V1BETA2 if shape is ItemShape.V1BETA2 else "custom-metrics/v1alpha1"
    metric_selector = parse_selector(selector)
    kwargs: dict[str, Any] = {
        "api_version": api_version,
        "shape": shape,
        "metric_selector": metric_selector,
    }
    proto_body = protobuf.metric_value_list(samples, **kwargs)
    json_document = orjson.loads(wire.metric_value_list(samples, **kwargs))
    assert proto_body == protobuf.encode_document(json_document)
    kubeproto.same_values(json_document, proto_body)


@settings(max_examples=200, deadline=None)
@given(
    series=st.lists(
        st.builds(
            ExternalSample,
            metric=names,
            labels=st.dictionaries(names, names, max_size=3),
            value=st.integers(-(10**6), 10**6),
            timestamp=st.floats(0.0, 4e9),
            window=st.one_of(st.none(), st.integers(0, 3600)),
        ),
        max_size=4,
    )
)
def test_external_hot_path_equals_the_schema_encoding(series: list[ExternalSample]) -> None:
    json_document = orjson.loads(wire.external_metric_value_list(series))
    proto_body = protobuf.external_metric_value_list(series)
    assert proto_body == protobuf.encode_document(json_document)
    kubeproto.same_values(json_document, proto_body)


def test_items_are_encoded_once_and_cached_apart_from_json() -> None:
    item = sample()
    kwargs: dict[str, Any] = {
        "api_version": V1BETA2,
        "shape": ItemShape.V1BETA2,
        "metric_selector": EVERYTHING,
    }
    json_body = wire.metric_value_list([item], **kwargs)
    first = protobuf.metric_value_list([item], **kwargs)
    assert set(item.cache) == {"v1beta2", "pb|v1beta2"}
    assert protobuf.metric_value_list([item], **kwargs) == first
    item.cache["pb|v1beta2"] = b"<cached>"  # the cached fragment is what is sent
    assert b"<cached>" in protobuf.metric_value_list([item], **kwargs)
    assert wire.metric_value_list([item], **kwargs) == json_body
    selected = {**kwargs, "metric_selector": parse_selector("a=b")}
    protobuf.metric_value_list([item], **selected)
    assert "pb|v1beta2|a=b" in item.cache
    external = ExternalSample(metric="m", labels={}, value=1, timestamp=TS)
    protobuf.external_metric_value_list([external])
    wire.external_metric_value_list([external])
    assert set(external.cache) == {"external", "pb|external"}


def test_the_canonical_check_catches_misordered_and_incomplete_encodings() -> None:
    ok = protowire.encode_message(protobuf_messages.OBJECT_REFERENCE, {"kind": "Pod", "name": "p"})
    cls = kubeproto.message_class("k8s.io.api.core.v1.ObjectReference")
    decoded = cls.FromString(ok)
    assert kubeproto.canonical(decoded, ok)
    swapped = b"\x1a\x01p" + ok.replace(b"\x1a\x01p", b"")  # name (3) before kind (1)
    with pytest.raises(AssertionError, match="field 1 after 3"):
        kubeproto.canonical(cls.FromString(swapped), swapped)
    missing = ok.replace(b"\x22\x00", b"", 1)  # uid "" not written: not what gogo writes
    with pytest.raises(AssertionError, match="ObjectReference.uid not written"):
        kubeproto.canonical(cls.FromString(missing), missing)
    labels = {"b": "1", "a": "2"}
    selector = protowire.encode_message(protobuf_messages.LABEL_SELECTOR, {"matchLabels": labels})
    assert len(selector) == 16  # two entries of 8 bytes: a, b
    reordered = selector[8:] + selector[:8]  # entry "b" before entry "a"
    selector_cls = kubeproto.message_class(f"{kubeproto.META}.LabelSelector")
    with pytest.raises(AssertionError, match="map keys out of order"):
        kubeproto.canonical(selector_cls.FromString(reordered), reordered)


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(KeyError):
        protobuf.encode_document({"kind": "Pod", "apiVersion": "v1"})


def test_message_tables_are_sorted() -> None:
    with pytest.raises(ValueError, match="ascending"):
        protowire.Message(
            "Bad",
            (
                protowire.Field("b", 2, protowire.Kind.STRING),
                protowire.Field("a", 1, protowire.Kind.STRING),
            ),
        )
