"""Kubernetes protobuf bodies (`application/vnd.kubernetes.protobuf`), by hand.

PURE: no I/O, no web framework, no protobuf runtime. A body is the 4-byte magic `k8s\\x00` and
then a `runtime.Unknown` message: `typeMeta` (1: `apiVersion` 1, `kind` 2), `raw` (2: the
object's own message), `contentEncoding` (3) and `contentType` (4), both empty
(`apimachinery/pkg/runtime/serializer/protobuf`, `runtime/types_proto.go`). The bytes match
what Go's gogo-generated code writes; how is `protowire`, the message tables
`protobuf_messages`.

This module owns the bodies, with two encoders:

* `encode_document` (and `status`): schema-driven. Takes a document exactly as its JSON wire
  form (the dicts `wire.dumps` would write) and encodes it with its kind's `Message` table.
  Used for discovery, `Status`, and the metrics.k8s.io kinds (`NodeMetrics(List)`,
  `PodMetrics(List)`). O(size of the document).
* `metric_value_list` / `external_metric_value_list`: the hot path, straight from domain
  samples. Each item is encoded once and kept by the render caches (`api.render_cache`, keys
  distinct from the JSON fragments'), so a list is a join of fragments: O(items).

Times have second precision on the wire, as in the JSON form (which has no more), so both
representations of one answer decode to the same instant. It must not choose the
representation (content negotiation does) or build documents (the APIs do).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from custom_metrics_server.api import render_cache, wire
from custom_metrics_server.api.protobuf_messages import LABEL_SELECTOR, STATUS, message_for
from custom_metrics_server.api.protowire import (
    Message,
    encode_message,
    envelope,
    length_delimited,
    quantity_message,
    sample_time,
    string_field,
    varint,
)
from custom_metrics_server.domain import ExternalSample, ItemShape, ObjectRef, Sample
from custom_metrics_server.errors import StatusError
from custom_metrics_server.machinery.labels import Selector
from custom_metrics_server.machinery.quantity import format_quantity

__all__ = ["encode_document", "external_metric_value_list", "metric_value_list", "status"]

# An empty metav1.ListMeta: selfLink 1, resourceVersion 2, continue 3, all "".
_EMPTY_LIST_META: Final = b"\x0a\x00\x12\x00\x1a\x00"
# The `metadata` field (1) of a list holding an empty ListMeta.
_LIST_METADATA: Final = b"\x0a" + bytes([len(_EMPTY_LIST_META)]) + _EMPTY_LIST_META


def encode_document(document: Mapping[str, Any], message: Message | None = None) -> bytes:
    """A complete protobuf body from a JSON-shaped document: `typeMeta` from its `apiVersion`
    (absent: "", as the version-stripped `/apis` list) and `kind`; the message from `KINDS`
    unless given. O(size of the document).

    For metrics.k8s.io the documents are exactly the JSON wire form, for example
    `{"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "metadata": {},
    "items": [{"metadata": {"name", "namespace", "creationTimestamp", "labels"},
    "timestamp": "<RFC 3339>", "window": "20.038s", "containers": [{"name": ...,
    "usage": {"cpu": "<quantity>", "memory": "<quantity>"}}]}]}`; node items carry `usage`
    instead of `containers`.
    """
    api_version = document.get("apiVersion") or ""
    kind = document["kind"]
    if message is None:
        message = message_for(api_version, kind)
    return envelope(api_version, kind, (encode_message(message, document),))


def status(error: StatusError) -> bytes:
    """A metav1 `Status` body for a failure: the same document `wire.status` writes."""
    return encode_document(wire.status_document(error), STATUS)


# --- hot path: MetricValueList and ExternalMetricValueList from samples ---------------------


def _object_reference(ref: ObjectRef) -> bytes:
    # kind 1, namespace 2, name 3, uid 4 "", apiVersion 5, resourceVersion 6 "", fieldPath 7 "".
    return b"".join(
        (
            string_field(b"\x0a", ref.kind),
            string_field(b"\x12", ref.namespace),
            string_field(b"\x1a", ref.name),
            b"\x22\x00",
            string_field(b"\x2a", ref.api_version),
            b"\x32\x00\x3a\x00",
        )
    )


def _item_v1beta2(sample: Sample, selector: bytes | None) -> bytes:
    identifier = string_field(b"\x0a", sample.metric)
    if selector is not None:
        identifier += length_delimited(b"\x12", selector)
    body = b"".join(
        (
            length_delimited(b"\x0a", _object_reference(sample.described)),
            length_delimited(b"\x12", identifier),
            length_delimited(b"\x1a", sample_time(sample.timestamp)),
            b"" if sample.window is None else b"\x20" + varint(sample.window),
            length_delimited(b"\x2a", quantity_message(format_quantity(sample.value))),
        )
    )
    return length_delimited(b"\x12", body)  # an `items` entry of the list


def _item_v1beta1(sample: Sample, selector: bytes | None) -> bytes:
    body = b"".join(
        (
            length_delimited(b"\x0a", _object_reference(sample.described)),
            string_field(b"\x12", sample.metric),
            length_delimited(b"\x1a", sample_time(sample.timestamp)),
            b"" if sample.window is None else b"\x20" + varint(sample.window),
            length_delimited(b"\x2a", quantity_message(format_quantity(sample.value))),
            b"" if selector is None else length_delimited(b"\x32", selector),
        )
    )
    return length_delimited(b"\x12", body)


_ITEM_ENCODERS: Final = {ItemShape.V1BETA2: _item_v1beta2, ItemShape.V1BETA1: _item_v1beta1}
_CACHE_KEYS: Final = {ItemShape.V1BETA2: "pb|v1beta2", ItemShape.V1BETA1: "pb|v1beta1"}


def metric_value_list(
    samples: Sequence[Sample],
    *,
    api_version: str,
    shape: ItemShape,
    metric_selector: Selector,
) -> bytes:
    """A `MetricValueList` body, the protobuf twin of `wire.metric_value_list` (same items,
    same echoed selector). O(len(samples)); cached per-sample fragments."""
    selector_json = wire.label_selector_json(metric_selector)
    selector = None if selector_json is None else encode_message(LABEL_SELECTOR, selector_json)
    base_key = _CACHE_KEYS[shape]
    # As in wire: the echoed selector is part of the fragment, so of the key.
    cache_key = base_key if selector is None else f"{base_key}|{metric_selector}"
    encode = _ITEM_ENCODERS[shape]
    items = render_cache.fragments(samples, cache_key, lambda sample: encode(sample, selector))
    return envelope(api_version, "MetricValueList", [_LIST_METADATA, *items])


def _external_item(sample: ExternalSample) -> bytes:
    labels = sample.labels
    body = b"".join(
        (
            string_field(b"\x0a", sample.metric),
            *(
                length_delimited(
                    b"\x12", string_field(b"\x0a", name) + string_field(b"\x12", labels[name])
                )
                for name in sorted(labels)
            ),
            length_delimited(b"\x1a", sample_time(sample.timestamp)),
            b"" if sample.window is None else b"\x20" + varint(sample.window),
            length_delimited(b"\x2a", quantity_message(format_quantity(sample.value))),
        )
    )
    return length_delimited(b"\x12", body)


def external_metric_value_list(samples: Sequence[ExternalSample]) -> bytes:
    """An `ExternalMetricValueList` body; items cached per sample. O(items)."""
    items = render_cache.fragments(samples, "pb|external", _external_item)
    return envelope(
        "external.metrics.k8s.io/v1beta1", "ExternalMetricValueList", [_LIST_METADATA, *items]
    )
