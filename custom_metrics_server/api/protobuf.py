"""Kubernetes protobuf encoding (`application/vnd.kubernetes.protobuf`), by hand.

PURE: no I/O, no web framework, no protobuf runtime. A body is the 4-byte magic `k8s\\x00` and
then a `runtime.Unknown` message: `typeMeta` (1: `apiVersion` 1, `kind` 2), `raw` (2: the
object's own message), `contentEncoding` (3) and `contentType` (4), both empty
(`apimachinery/pkg/runtime/serializer/protobuf`, `runtime/types_proto.go`).

The bytes match what Go's gogo-generated `MarshalToSizedBuffer` writes, not just what a
decoder accepts: fields in ascending field-number order; non-pointer strings, bools, integers
and embedded messages always written, even when empty or zero (gogo does not skip zero
values of non-nullable fields); pointer fields (`*int64`, `*LabelSelector`, `*StatusDetails`)
only when set; map entries sorted by key, each entry carrying both key (1) and value (2);
`metav1.Time` as `{seconds 1, nanos 2}` and empty for the zero time; `resource.Quantity` as
`{string 1}` in its canonical form; `metav1.Duration` as `{duration 1}` in nanoseconds.

Two encoders:

* `encode_document`: schema-driven. Takes a document exactly as its JSON wire form (the
  dicts `wire.dumps` would write) and a `Message` table (JSON name -> field number, kind,
  sub-message). Used for discovery, `Status`, and the metrics.k8s.io kinds
  (`NodeMetrics(List)`, `PodMetrics(List)`). O(size of the document).
* `metric_value_list` / `external_metric_value_list`: the hot path, straight from domain
  samples. Each item is encoded once and cached on its sample (`Sample.cache`, keys distinct
  from the JSON fragments'), so a list is a join of cached fragments: O(items).

Times have second precision on the wire, as in the JSON form (which has no more), so both
representations of one answer decode to the same instant.
"""

from __future__ import annotations

import calendar
import enum
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final

import orjson

from custom_metrics_server.api import wire
from custom_metrics_server.domain import ExternalSample, ItemShape, ObjectRef, Sample, fragments
from custom_metrics_server.errors import StatusError
from custom_metrics_server.machinery.durations import parse_go_duration_ns
from custom_metrics_server.machinery.labels import Selector
from custom_metrics_server.machinery.quantity import format_quantity

#: Prefix of every body (`protobuf.go`: `protoEncodingPrefix`).
MAGIC: Final = b"k8s\x00"
# contentEncoding (3) and contentType (4) of the envelope: always written, always empty.
_ENVELOPE_TAIL: Final = b"\x1a\x00\x22\x00"
# An empty metav1.ListMeta: selfLink 1, resourceVersion 2, continue 3, all "".
_EMPTY_LIST_META: Final = b"\x0a\x00\x12\x00\x1a\x00"
# The `metadata` field (1) of a list holding an empty ListMeta.
_LIST_METADATA: Final = b"\x0a" + bytes([len(_EMPTY_LIST_META)]) + _EMPTY_LIST_META

_ONE_BYTE: Final = tuple(bytes([n]) for n in range(0x80))
_UINT64: Final = 1 << 64


# --- wire primitives -----------------------------------------------------------------------


def varint(value: int) -> bytes:
    """Base-128 varint. Negative numbers are written as Go writes `uint64(int64)`: ten bytes,
    two's complement. O(log value)."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if value < 0:
        value += _UINT64
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    """A field key: `number << 3 | wire_type` as a varint (wire type 0 varint, 2 length)."""
    return varint(number << 3 | wire_type)


#: Varints of 0..16383 (two bytes at most): every length prefix but the list's own.
_SMALL_VARINTS: Final = (
    *_ONE_BYTE,
    *(bytes([n & 0x7F | 0x80, n >> 7]) for n in range(0x80, 0x4000)),
)


def length_delimited(key: bytes, payload: bytes) -> bytes:
    """`key`, the payload's length, the payload. O(len(payload))."""
    size = len(payload)
    return key + (_SMALL_VARINTS[size] if size < 0x4000 else varint(size)) + payload


def _str(key: bytes, text: str) -> bytes:
    raw = text.encode()
    size = len(raw)
    return key + (_SMALL_VARINTS[size] if size < 0x4000 else varint(size)) + raw


@lru_cache(maxsize=64)
def _envelope_head(api_version: str, kind: str) -> bytes:
    # The magic and typeMeta: the same few per server, built once.
    type_meta = _str(b"\x0a", api_version) + _str(b"\x12", kind)
    return MAGIC + length_delimited(b"\x0a", type_meta) + b"\x12"


def envelope(api_version: str, kind: str, parts: Sequence[bytes]) -> bytes:
    """Magic + `runtime.Unknown{typeMeta, raw, contentEncoding, contentType}` around a message
    given as the parts of its encoding (joined once, so a large list is copied once)."""
    head = _envelope_head(api_version, kind) + varint(sum(map(len, parts)))
    return b"".join((head, *parts, _ENVELOPE_TAIL))


# --- metav1.Time, metav1.Duration ----------------------------------------------------------

_RFC3339: Final = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(?:\.(\d+))?(?:[Zz]|([+-])(\d\d):(\d\d))"
)


#: Unix seconds of Go's zero `time.Time` (0001-01-01T00:00:00Z): `IsZero()`, JSON null.
GO_ZERO_TIME: Final = -62135596800


def time_message(instant: tuple[int, int] | None) -> bytes:
    """A metav1.Time body from (seconds, nanos); the zero time (None, or 0001-01-01) is the
    empty message, as Go's `Time.MarshalToSizedBuffer` writes nothing for `IsZero()`. The
    Unix epoch is not the zero time: it is written as seconds 0, nanos 0."""
    if instant is None or instant == (GO_ZERO_TIME, 0):
        return b""
    seconds, nanos = instant
    return b"\x08" + varint(seconds) + b"\x10" + varint(nanos)


def _sample_time(timestamp: float) -> bytes:
    # The JSON form's instant: whole seconds, and the zero time (null) for <= 0.
    return b"" if timestamp <= 0 else b"\x08" + varint(int(timestamp)) + b"\x10\x00"


def parse_time(text: str | None) -> tuple[int, int] | None:
    """RFC 3339 (`metav1.Time` JSON) to (seconds, nanos); null or "" is the zero time (None)."""
    if not text:
        return None
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    if match.group(8):
        offset = int(match.group(9)) * 3600 + int(match.group(10)) * 60
        seconds -= offset if match.group(8) == "+" else -offset
    fraction = (match.group(7) or "")[:9]
    nanos = int(fraction.ljust(9, "0")) if fraction else 0
    return seconds, nanos


def duration_ns(text: str | None) -> int:
    """`metav1.Duration` JSON (`20.038s`) to nanoseconds; null or "" is zero."""
    return parse_go_duration_ns(text) if text else 0


# --- schema-driven encoder -----------------------------------------------------------------


class Kind(enum.Enum):
    """How a field's JSON value becomes bytes."""

    STRING = "string"
    BOOL = "bool"
    INT = "int"  # int32/int64 varint
    MESSAGE = "message"
    MESSAGES = "messages"  # repeated message
    STRINGS = "strings"  # repeated string
    STRING_MAP = "string_map"  # map<string, string>
    QUANTITY = "quantity"  # resource.Quantity {string 1}
    QUANTITY_MAP = "quantity_map"  # map<string, Quantity> (ResourceList)
    TIME = "time"  # metav1.Time from RFC 3339
    DURATION = "duration"  # metav1.Duration from a Go duration string
    VERBS = "verbs"  # metav1.Verbs: a message {repeated string items 1}
    RAW_JSON = "raw_json"  # metav1.FieldsV1 {bytes Raw 1}: the JSON value's compact bytes


Encoder = Callable[[Any], bytes]


@dataclass(frozen=True, slots=True)
class Field:
    """One field: its JSON name, protobuf number, kind and, for messages, the sub-message.

    `pointer` marks Go pointer (nullable) fields: written only when the JSON value is present
    and not null. Every other field is written always, with its zero value when absent.
    `encode` (built once, here) turns the field's JSON value into the field's bytes.
    """

    name: str
    number: int
    kind: Kind
    message: Message | None = None
    pointer: bool = False
    key: bytes = field(init=False, repr=False, compare=False)
    encode: Encoder = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        wire_type = 0 if self.kind in (Kind.BOOL, Kind.INT) else 2
        object.__setattr__(self, "key", tag(self.number, wire_type))
        encode = _field_encoder(self.key, self.kind, self.message)
        if self.pointer:
            present = encode

            def encode(value: Any) -> bytes:
                return b"" if value is None else present(value)

        object.__setattr__(self, "encode", encode)


@dataclass(frozen=True, slots=True)
class Message:
    """A protobuf message as a table of fields, sorted by number (the order Go writes).

    `encode(document)` gives the message's bytes from its JSON-shaped document (keys without
    a field are ignored). O(size of the document).
    """

    name: str
    fields: tuple[Field, ...]
    encode: Encoder = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        numbers = [f.number for f in self.fields]
        if numbers != sorted(set(numbers)):
            raise ValueError(f"{self.name}: field numbers must be unique and ascending")
        steps = tuple((f.name, f.encode) for f in self.fields)

        def encode(document: Mapping[str, Any]) -> bytes:
            get = document.get
            return b"".join([encode_field(get(name)) for name, encode_field in steps])

        object.__setattr__(self, "encode", encode)


def _quantity(text: str) -> bytes:
    return _str(b"\x0a", text)


@lru_cache(maxsize=4096)
def _time_body(text: str) -> bytes:
    # Cached: the items of one list mostly share a few timestamps.
    return time_message(parse_time(text))


@lru_cache(maxsize=1024)
def _duration_body(text: str) -> bytes:
    return b"\x08" + varint(duration_ns(text))


def _field_encoder(key: bytes, kind: Kind, message: Message | None) -> Encoder:
    """A closure per field, so encoding a document does no dispatch on kinds."""
    empty = key + b"\x00"  # a string, bytes, message or zero varint field with no content
    if kind is Kind.STRING:
        return lambda value: _str(key, value) if value else empty
    if kind is Kind.BOOL:
        true = key + b"\x01"
        return lambda value: true if value else empty
    if kind is Kind.INT:
        return lambda value: key + varint(int(value)) if value else empty
    if kind in (Kind.MESSAGE, Kind.MESSAGES):
        assert message is not None
        sub = message.encode
        if kind is Kind.MESSAGE:
            return lambda value: length_delimited(key, sub(value or {}))
        return lambda value: (
            b"".join([length_delimited(key, sub(item)) for item in value]) if value else b""
        )
    if kind is Kind.STRINGS:
        return lambda value: b"".join([_str(key, text) for text in value]) if value else b""
    if kind is Kind.STRING_MAP:
        return lambda value: (
            b"".join(
                [
                    length_delimited(key, _str(b"\x0a", name) + _str(b"\x12", value[name]))
                    for name in sorted(value)
                ]
            )
            if value
            else b""
        )
    if kind is Kind.QUANTITY:
        return lambda value: length_delimited(key, _quantity(value or "0"))
    if kind is Kind.QUANTITY_MAP:
        return lambda value: (
            b"".join(
                [
                    length_delimited(
                        key,
                        _str(b"\x0a", name) + length_delimited(b"\x12", _quantity(value[name])),
                    )
                    for name in sorted(value)
                ]
            )
            if value
            else b""
        )
    if kind is Kind.TIME:
        return lambda value: length_delimited(key, _time_body(value)) if value else empty
    if kind is Kind.DURATION:
        zero = length_delimited(key, b"\x08\x00")
        return lambda value: length_delimited(key, _duration_body(value)) if value else zero
    if kind is Kind.VERBS:
        # The pointer wrapper skips a nil Verbs; an empty one is an empty message.
        return lambda value: length_delimited(key, b"".join([_str(b"\x0a", v) for v in value]))
    if kind is Kind.RAW_JSON:
        return lambda value: length_delimited(key, length_delimited(b"\x0a", orjson.dumps(value)))
    raise AssertionError(kind)  # pragma: no cover - exhaustive


def encode_message(message: Message, document: Mapping[str, Any]) -> bytes:
    """The bytes of one message from its JSON-shaped document. O(size of the document)."""
    return message.encode(document)


def _message(name: str, *fields: Field) -> Message:
    return Message(name, fields)


# metav1 (apimachinery pkg/apis/meta/v1/generated.proto).
LIST_META: Final = _message(
    "ListMeta",
    Field("selfLink", 1, Kind.STRING),
    Field("resourceVersion", 2, Kind.STRING),
    Field("continue", 3, Kind.STRING),
    Field("remainingItemCount", 4, Kind.INT, pointer=True),
)
OWNER_REFERENCE: Final = _message(
    "OwnerReference",
    Field("kind", 1, Kind.STRING),
    Field("name", 3, Kind.STRING),
    Field("uid", 4, Kind.STRING),
    Field("apiVersion", 5, Kind.STRING),
    Field("controller", 6, Kind.BOOL, pointer=True),
    Field("blockOwnerDeletion", 7, Kind.BOOL, pointer=True),
)
MANAGED_FIELDS_ENTRY: Final = _message(
    "ManagedFieldsEntry",
    Field("manager", 1, Kind.STRING),
    Field("operation", 2, Kind.STRING),
    Field("apiVersion", 3, Kind.STRING),
    Field("time", 4, Kind.TIME, pointer=True),
    Field("fieldsType", 6, Kind.STRING),
    Field("fieldsV1", 7, Kind.RAW_JSON, pointer=True),
    Field("subresource", 8, Kind.STRING),
)
#: Current upstream ObjectMeta: field 15 (clusterName) is gone since Kubernetes 1.26.
OBJECT_META: Final = _message(
    "ObjectMeta",
    Field("name", 1, Kind.STRING),
    Field("generateName", 2, Kind.STRING),
    Field("namespace", 3, Kind.STRING),
    Field("selfLink", 4, Kind.STRING),
    Field("uid", 5, Kind.STRING),
    Field("resourceVersion", 6, Kind.STRING),
    Field("generation", 7, Kind.INT),
    Field("creationTimestamp", 8, Kind.TIME),
    Field("deletionTimestamp", 9, Kind.TIME, pointer=True),
    Field("deletionGracePeriodSeconds", 10, Kind.INT, pointer=True),
    Field("labels", 11, Kind.STRING_MAP),
    Field("annotations", 12, Kind.STRING_MAP),
    Field("ownerReferences", 13, Kind.MESSAGES, OWNER_REFERENCE),
    Field("finalizers", 14, Kind.STRINGS),
    Field("managedFields", 17, Kind.MESSAGES, MANAGED_FIELDS_ENTRY),
)
LABEL_SELECTOR_REQUIREMENT: Final = _message(
    "LabelSelectorRequirement",
    Field("key", 1, Kind.STRING),
    Field("operator", 2, Kind.STRING),
    Field("values", 3, Kind.STRINGS),
)
LABEL_SELECTOR: Final = _message(
    "LabelSelector",
    Field("matchLabels", 1, Kind.STRING_MAP),
    Field("matchExpressions", 2, Kind.MESSAGES, LABEL_SELECTOR_REQUIREMENT),
)
STATUS_CAUSE: Final = _message(
    "StatusCause",
    Field("reason", 1, Kind.STRING),
    Field("message", 2, Kind.STRING),
    Field("field", 3, Kind.STRING),
)
STATUS_DETAILS: Final = _message(
    "StatusDetails",
    Field("name", 1, Kind.STRING),
    Field("group", 2, Kind.STRING),
    Field("kind", 3, Kind.STRING),
    Field("causes", 4, Kind.MESSAGES, STATUS_CAUSE),
    Field("retryAfterSeconds", 5, Kind.INT),
    Field("uid", 6, Kind.STRING),
)
STATUS: Final = _message(
    "Status",
    Field("metadata", 1, Kind.MESSAGE, LIST_META),
    Field("status", 2, Kind.STRING),
    Field("message", 3, Kind.STRING),
    Field("reason", 4, Kind.STRING),
    Field("details", 5, Kind.MESSAGE, STATUS_DETAILS, pointer=True),
    Field("code", 6, Kind.INT),
)
GROUP_VERSION_FOR_DISCOVERY: Final = _message(
    "GroupVersionForDiscovery",
    Field("groupVersion", 1, Kind.STRING),
    Field("version", 2, Kind.STRING),
)
SERVER_ADDRESS_BY_CLIENT_CIDR: Final = _message(
    "ServerAddressByClientCIDR",
    Field("clientCIDR", 1, Kind.STRING),
    Field("serverAddress", 2, Kind.STRING),
)
API_GROUP: Final = _message(
    "APIGroup",
    Field("name", 1, Kind.STRING),
    Field("versions", 2, Kind.MESSAGES, GROUP_VERSION_FOR_DISCOVERY),
    Field("preferredVersion", 3, Kind.MESSAGE, GROUP_VERSION_FOR_DISCOVERY),
    Field("serverAddressByClientCIDRs", 4, Kind.MESSAGES, SERVER_ADDRESS_BY_CLIENT_CIDR),
)
API_GROUP_LIST: Final = _message("APIGroupList", Field("groups", 1, Kind.MESSAGES, API_GROUP))
API_RESOURCE: Final = _message(
    "APIResource",
    Field("name", 1, Kind.STRING),
    Field("namespaced", 2, Kind.BOOL),
    Field("kind", 3, Kind.STRING),
    Field("verbs", 4, Kind.VERBS, pointer=True),
    Field("shortNames", 5, Kind.STRINGS),
    Field("singularName", 6, Kind.STRING),
    Field("categories", 7, Kind.STRINGS),
    Field("group", 8, Kind.STRING),
    Field("version", 9, Kind.STRING),
    Field("storageVersionHash", 10, Kind.STRING),
)
API_RESOURCE_LIST: Final = _message(
    "APIResourceList",
    Field("groupVersion", 1, Kind.STRING),
    Field("resources", 2, Kind.MESSAGES, API_RESOURCE),
)

# core/v1 ObjectReference (k8s.io/api core/v1/generated.proto).
OBJECT_REFERENCE: Final = _message(
    "ObjectReference",
    Field("kind", 1, Kind.STRING),
    Field("namespace", 2, Kind.STRING),
    Field("name", 3, Kind.STRING),
    Field("uid", 4, Kind.STRING),
    Field("apiVersion", 5, Kind.STRING),
    Field("resourceVersion", 6, Kind.STRING),
    Field("fieldPath", 7, Kind.STRING),
)

# custom.metrics.k8s.io v1beta1 (also the legacy custom-metrics/v1alpha1 shape) and v1beta2.
METRIC_VALUE_V1BETA1: Final = _message(
    "MetricValue",
    Field("describedObject", 1, Kind.MESSAGE, OBJECT_REFERENCE),
    Field("metricName", 2, Kind.STRING),
    Field("timestamp", 3, Kind.TIME),
    Field("window", 4, Kind.INT, pointer=True),
    Field("value", 5, Kind.QUANTITY),
    Field("selector", 6, Kind.MESSAGE, LABEL_SELECTOR, pointer=True),
)
METRIC_VALUE_LIST_V1BETA1: Final = _message(
    "MetricValueList",
    Field("metadata", 1, Kind.MESSAGE, LIST_META),
    Field("items", 2, Kind.MESSAGES, METRIC_VALUE_V1BETA1),
)
METRIC_IDENTIFIER: Final = _message(
    "MetricIdentifier",
    Field("name", 1, Kind.STRING),
    Field("selector", 2, Kind.MESSAGE, LABEL_SELECTOR, pointer=True),
)
METRIC_VALUE_V1BETA2: Final = _message(
    "MetricValue",
    Field("describedObject", 1, Kind.MESSAGE, OBJECT_REFERENCE),
    Field("metric", 2, Kind.MESSAGE, METRIC_IDENTIFIER),
    Field("timestamp", 3, Kind.TIME),
    Field("windowSeconds", 4, Kind.INT, pointer=True),
    Field("value", 5, Kind.QUANTITY),
)
METRIC_VALUE_LIST_V1BETA2: Final = _message(
    "MetricValueList",
    Field("metadata", 1, Kind.MESSAGE, LIST_META),
    Field("items", 2, Kind.MESSAGES, METRIC_VALUE_V1BETA2),
)

# external.metrics.k8s.io v1beta1.
EXTERNAL_METRIC_VALUE: Final = _message(
    "ExternalMetricValue",
    Field("metricName", 1, Kind.STRING),
    Field("metricLabels", 2, Kind.STRING_MAP),
    Field("timestamp", 3, Kind.TIME),
    Field("window", 4, Kind.INT, pointer=True),
    Field("value", 5, Kind.QUANTITY),
)
EXTERNAL_METRIC_VALUE_LIST: Final = _message(
    "ExternalMetricValueList",
    Field("metadata", 1, Kind.MESSAGE, LIST_META),
    Field("items", 2, Kind.MESSAGES, EXTERNAL_METRIC_VALUE),
)

# metrics.k8s.io v1beta1.
CONTAINER_METRICS: Final = _message(
    "ContainerMetrics",
    Field("name", 1, Kind.STRING),
    Field("usage", 2, Kind.QUANTITY_MAP),
)
NODE_METRICS: Final = _message(
    "NodeMetrics",
    Field("metadata", 1, Kind.MESSAGE, OBJECT_META),
    Field("timestamp", 2, Kind.TIME),
    Field("window", 3, Kind.DURATION),
    Field("usage", 4, Kind.QUANTITY_MAP),
)
NODE_METRICS_LIST: Final = _message(
    "NodeMetricsList",
    Field("metadata", 1, Kind.MESSAGE, LIST_META),
    Field("items", 2, Kind.MESSAGES, NODE_METRICS),
)
POD_METRICS: Final = _message(
    "PodMetrics",
    Field("metadata", 1, Kind.MESSAGE, OBJECT_META),
    Field("timestamp", 2, Kind.TIME),
    Field("window", 3, Kind.DURATION),
    Field("containers", 4, Kind.MESSAGES, CONTAINER_METRICS),
)
POD_METRICS_LIST: Final = _message(
    "PodMetricsList",
    Field("metadata", 1, Kind.MESSAGE, LIST_META),
    Field("items", 2, Kind.MESSAGES, POD_METRICS),
)

#: Message of each top-level kind. MetricValueList differs by version, see `message_for`.
KINDS: Final[dict[str, Message]] = {
    "APIGroupList": API_GROUP_LIST,
    "APIGroup": API_GROUP,
    "APIResourceList": API_RESOURCE_LIST,
    "Status": STATUS,
    "ExternalMetricValueList": EXTERNAL_METRIC_VALUE_LIST,
    "NodeMetrics": NODE_METRICS,
    "NodeMetricsList": NODE_METRICS_LIST,
    "PodMetrics": POD_METRICS,
    "PodMetricsList": POD_METRICS_LIST,
}


def message_for(api_version: str, kind: str) -> Message:
    """The message of a top-level object. Raises KeyError for a kind we do not encode."""
    if kind == "MetricValueList":
        if api_version.endswith("/v1beta2"):
            return METRIC_VALUE_LIST_V1BETA2
        return METRIC_VALUE_LIST_V1BETA1  # v1beta1 and the legacy v1alpha1
    return KINDS[kind]


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
            _str(b"\x0a", ref.kind),
            _str(b"\x12", ref.namespace),
            _str(b"\x1a", ref.name),
            b"\x22\x00",
            _str(b"\x2a", ref.api_version),
            b"\x32\x00\x3a\x00",
        )
    )


def _item_v1beta2(sample: Sample, selector: bytes | None) -> bytes:
    identifier = _str(b"\x0a", sample.metric)
    if selector is not None:
        identifier += length_delimited(b"\x12", selector)
    body = b"".join(
        (
            length_delimited(b"\x0a", _object_reference(sample.described)),
            length_delimited(b"\x12", identifier),
            length_delimited(b"\x1a", _sample_time(sample.timestamp)),
            b"" if sample.window is None else b"\x20" + varint(sample.window),
            length_delimited(b"\x2a", _quantity(format_quantity(sample.value))),
        )
    )
    return length_delimited(b"\x12", body)  # an `items` entry of the list


def _item_v1beta1(sample: Sample, selector: bytes | None) -> bytes:
    body = b"".join(
        (
            length_delimited(b"\x0a", _object_reference(sample.described)),
            _str(b"\x12", sample.metric),
            length_delimited(b"\x1a", _sample_time(sample.timestamp)),
            b"" if sample.window is None else b"\x20" + varint(sample.window),
            length_delimited(b"\x2a", _quantity(format_quantity(sample.value))),
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
    items = fragments(samples, cache_key, lambda sample: encode(sample, selector))
    return envelope(api_version, "MetricValueList", [_LIST_METADATA, *items])


def _external_item(sample: ExternalSample) -> bytes:
    labels = sample.labels
    body = b"".join(
        (
            _str(b"\x0a", sample.metric),
            *(
                length_delimited(b"\x12", _str(b"\x0a", name) + _str(b"\x12", labels[name]))
                for name in sorted(labels)
            ),
            length_delimited(b"\x1a", _sample_time(sample.timestamp)),
            b"" if sample.window is None else b"\x20" + varint(sample.window),
            length_delimited(b"\x2a", _quantity(format_quantity(sample.value))),
        )
    )
    return length_delimited(b"\x12", body)


def external_metric_value_list(samples: Sequence[ExternalSample]) -> bytes:
    """An `ExternalMetricValueList` body; items cached per sample. O(items)."""
    items = fragments(samples, "pb|external", _external_item)
    return envelope(
        "external.metrics.k8s.io/v1beta1", "ExternalMetricValueList", [_LIST_METADATA, *items]
    )
