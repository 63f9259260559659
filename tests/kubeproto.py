"""An independent decoder of Kubernetes protobuf bodies, for the tests.

The `.proto` files in tests/fixtures/proto (written from the upstream definitions) are parsed
by a small subset parser into descriptors for the `protobuf` runtime (upb), whose decoder then
reads the server's bytes. Nothing here is shared with `custom_metrics_server.api.protobuf` but the
field numbers, so a wrong number, type or nesting on either side fails the comparison.

`to_json_shape` turns a decoded message into the JSON wire form (Time as RFC 3339, Quantity as
its string, Duration as Go prints it, Verbs as a list) and `normalised` drops empty values, so
a protobuf answer compares field by field with the JSON answer of the same request.
"""

from __future__ import annotations

import calendar
import json
import re
import time
from functools import cache
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

PROTO_DIR = Path(__file__).parent / "fixtures" / "proto"
#: In dependency order.
FILES = (
    "runtime.proto",
    "resource.proto",
    "core_v1.proto",
    "meta_v1.proto",
    "custom_metrics_v1beta1.proto",
    "custom_metrics_v1beta2.proto",
    "external_metrics_v1beta1.proto",
    "metrics_v1beta1.proto",
    "metrics_v1.proto",
    "apidiscovery_v2.proto",
)
MAGIC = b"k8s\x00"
_LENGTH_DELIMITED = (
    FieldDescriptor.TYPE_STRING,
    FieldDescriptor.TYPE_BYTES,
    FieldDescriptor.TYPE_MESSAGE,
)
META = "k8s.io.apimachinery.pkg.apis.meta.v1"
METRICS = "k8s.io.metrics.pkg.apis"

_SCALARS = {
    "string": FieldDescriptor.TYPE_STRING,
    "bytes": FieldDescriptor.TYPE_BYTES,
    "bool": FieldDescriptor.TYPE_BOOL,
    "int32": FieldDescriptor.TYPE_INT32,
    "int64": FieldDescriptor.TYPE_INT64,
}
_COMMENT = re.compile(r"//[^\n]*")
_MESSAGE = re.compile(r"message\s+(\w+)\s*\{([^}]*)\}")
_FIELD = re.compile(r"(optional|repeated)\s+([\w.]+)\s+(\w+)\s*=\s*(\d+)\s*;")
_MAP = re.compile(r"map\s*<\s*(\w+)\s*,\s*([\w.]+)\s*>\s+(\w+)\s*=\s*(\d+)\s*;")


def _type(fd: descriptor_pb2.FieldDescriptorProto, name: str, package: str) -> None:
    if name in _SCALARS:
        fd.type = _SCALARS[name]  # type: ignore[assignment]
        return
    fd.type = FieldDescriptor.TYPE_MESSAGE  # type: ignore[assignment]
    if name.startswith("."):
        fd.type_name = name
    elif "." in name:
        fd.type_name = "." + name
    else:
        fd.type_name = f".{package}.{name}"


def parse_proto(path: Path) -> descriptor_pb2.FileDescriptorProto:
    """The subset of proto2 our definition files use, as a FileDescriptorProto."""
    text = _COMMENT.sub("", path.read_text())
    package_match = re.search(r"package\s+([\w.]+)\s*;", text)
    assert package_match is not None, path
    package = package_match.group(1)
    proto = descriptor_pb2.FileDescriptorProto(name=path.name, package=package, syntax="proto2")
    proto.dependency.extend(re.findall(r'import\s+"([^"]+)"\s*;', text))
    for name, body in _MESSAGE.findall(text):
        message = proto.message_type.add(name=name)
        for label, type_name, field_name, number in _FIELD.findall(body):
            fd = message.field.add(name=field_name, number=int(number), json_name=field_name)
            fd.label = (  # type: ignore[assignment]
                FieldDescriptor.LABEL_REPEATED
                if label == "repeated"
                else FieldDescriptor.LABEL_OPTIONAL
            )
            _type(fd, type_name, package)
        for key_type, value_type, field_name, number in _MAP.findall(body):
            entry_name = field_name[0].upper() + field_name[1:] + "Entry"
            entry = message.nested_type.add(name=entry_name)
            entry.options.map_entry = True
            for entry_field, entry_number, entry_type in (
                ("key", 1, key_type),
                ("value", 2, value_type),
            ):
                efd = entry.field.add(name=entry_field, number=entry_number, json_name=entry_field)
                efd.label = FieldDescriptor.LABEL_OPTIONAL  # type: ignore[assignment]
                _type(efd, entry_type, package)
            fd = message.field.add(name=field_name, number=int(number), json_name=field_name)
            fd.label = FieldDescriptor.LABEL_REPEATED  # type: ignore[assignment]
            fd.type = FieldDescriptor.TYPE_MESSAGE  # type: ignore[assignment]
            fd.type_name = f".{package}.{name}.{entry_name}"
    return proto


@cache
def pool() -> descriptor_pool.DescriptorPool:
    """Every definition file, loaded into a fresh pool."""
    result = descriptor_pool.DescriptorPool()
    for name in FILES:
        result.Add(parse_proto(PROTO_DIR / name))
    return result


def message_class(full_name: str) -> type[Message]:
    """The generated class of a message, e.g. `k8s.io.api.core.v1.ObjectReference`."""
    return message_factory.GetMessageClass(pool().FindMessageTypeByName(full_name))


def top_level_message(api_version: str, kind: str) -> str:
    """Which message a typeMeta names."""
    if kind == "MetricValueList":
        version = "v1beta2" if api_version.endswith("v1beta2") else "v1beta1"
        return f"{METRICS}.custom_metrics.{version}.MetricValueList"
    if kind == "ExternalMetricValueList":
        return f"{METRICS}.external_metrics.v1beta1.ExternalMetricValueList"
    if kind in ("NodeMetrics", "NodeMetricsList", "PodMetrics", "PodMetricsList"):
        version = api_version.rpartition("/")[2]
        assert version in ("v1", "v1beta1"), api_version
        return f"{METRICS}.metrics.{version}.{kind}"
    if kind == "APIGroupDiscoveryList":
        assert api_version == "apidiscovery.k8s.io/v2", api_version
        return f"k8s.io.api.apidiscovery.v2.{kind}"
    return f"{META}.{kind}"


def decode(body: bytes) -> tuple[str, str, Message, bytes]:
    """A protobuf body: (apiVersion, kind, decoded object, raw bytes of the object).

    Checks the magic and that the envelope is exactly what upstream writes around the raw
    message (re-serialising the envelope gives the same bytes).
    """
    assert body[:4] == MAGIC, body[:8]
    envelope = message_class("k8s.io.apimachinery.pkg.runtime.Unknown")()
    envelope.ParseFromString(body[4:])
    unknown: Any = envelope
    assert unknown.contentEncoding == ""
    assert unknown.contentType == ""
    assert unknown.HasField("contentEncoding")
    assert unknown.HasField("contentType")
    assert envelope.SerializeToString(deterministic=True) == body[4:]  # no maps: upb's order
    api_version = unknown.typeMeta.apiVersion
    kind = unknown.typeMeta.kind
    obj = message_class(top_level_message(api_version, kind))()
    obj.ParseFromString(unknown.raw)
    return api_version, kind, obj, bytes(unknown.raw)


#: Go pointer (nullable) fields, read from the upstream `generated.pb.go` marshal code (each
#: is written under `if m.X != nil`). gogo writes every other singular field, empty or not.
POINTER_FIELDS = frozenset(
    {
        "ListMeta.remainingItemCount",
        "ObjectMeta.deletionTimestamp",
        "ObjectMeta.deletionGracePeriodSeconds",
        "OwnerReference.controller",
        "OwnerReference.blockOwnerDeletion",
        "ManagedFieldsEntry.time",
        "ManagedFieldsEntry.fieldsV1",
        "FieldsV1.Raw",
        "APIResource.verbs",
        "Status.details",
        "MetricValue.window",  # v1beta1
        "MetricValue.windowSeconds",  # v1beta2
        "MetricValue.selector",
        "MetricIdentifier.selector",
        "ExternalMetricValue.window",
        "APIResourceDiscovery.responseKind",
        "APISubresourceDiscovery.responseKind",
        # metav1.Time has its own marshaller: nothing at all for the zero time.
        "Time.seconds",
        "Time.nanos",
    }
)


def _varint(data: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, position


def _walk(descriptor: Descriptor, data: bytes) -> None:
    """Fields in ascending number order with the declared wire types; every singular field
    that is not a Go pointer written; map entries with both key and value, keys in Go's order
    (`sort.Strings`: by bytes) and unique."""
    position = 0
    last = 0
    keys: dict[int, list[bytes]] = {}
    seen: set[int] = set()
    while position < len(data):
        key, position = _varint(data, position)
        number, wire_type = key >> 3, key & 7
        assert number >= last, f"{descriptor.name}: field {number} after {last}"
        last = number
        seen.add(number)
        field = descriptor.fields_by_number[number]
        if field.type in _LENGTH_DELIMITED:
            assert wire_type == 2, f"{descriptor.name}.{field.name}"
        else:
            assert wire_type == 0, f"{descriptor.name}.{field.name}"
        if wire_type == 0:
            _, position = _varint(data, position)
            continue
        size, position = _varint(data, position)
        payload = data[position : position + size]
        assert len(payload) == size
        position += size
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        entry = field.message_type
        if entry.GetOptions().map_entry:
            key_size, at = _varint(payload, 1)
            assert payload[0] == 0x0A, "map entry without its key"
            key_bytes = payload[at : at + key_size]
            assert payload[at + key_size] == 0x12, "map entry without its value"
            keys.setdefault(number, []).append(key_bytes)
        _walk(entry, payload)
    for found in keys.values():
        assert found == sorted(set(found)), f"{descriptor.name}: map keys out of order"
    if descriptor.GetOptions().map_entry:
        return
    for field in descriptor.fields:
        if field.is_repeated or f"{descriptor.name}.{field.name}" in POINTER_FIELDS:
            continue
        assert field.number in seen, f"{descriptor.name}.{field.name} not written"


def canonical(message: Message, raw: bytes) -> bool:
    """Whether `raw` is byte for byte what gogo writes for the message it decodes to: fields
    in number order, every non-pointer field written, map entries sorted as Go sorts them,
    and every field the decoder saw set written once (upb re-encodes it in as many bytes). upb's own
    deterministic map order is not Go's (it puts a key after its extensions: "00" < "0"), so
    the order is checked by walking the bytes rather than by comparing a re-encoding."""
    _walk(message.DESCRIPTOR, raw)
    return len(message.SerializeToString()) == len(raw)


def go_duration(nanos: int) -> str:
    """Go's `time.Duration.String()`."""
    if nanos == 0:
        return "0s"
    sign = "-" if nanos < 0 else ""
    u = abs(nanos)

    def fmt(value: int, scale: int) -> str:
        whole, frac = divmod(value, scale)
        digits = str(frac).rjust(len(str(scale)) - 1, "0").rstrip("0") if frac else ""
        return f"{whole}.{digits}" if digits else str(whole)

    if u < 1_000:
        return f"{sign}{u}ns"
    if u < 1_000_000:
        return f"{sign}{fmt(u, 1_000)}\u00b5s"
    if u < 1_000_000_000:
        return f"{sign}{fmt(u, 1_000_000)}ms"
    seconds = u // 1_000_000_000
    text = fmt(u % 60_000_000_000, 1_000_000_000) + "s"
    if seconds >= 60:
        text = f"{(seconds // 60) % 60}m{text}"
    if seconds >= 3600:
        text = f"{seconds // 3600}h{text}"
    return sign + text


def rfc3339(seconds: int, nanos: int) -> str:
    """metav1.Time's JSON form."""
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    if nanos:
        text += "." + str(nanos).rjust(9, "0").rstrip("0")
    return text + "Z"


def parse_rfc3339(text: str) -> int:
    """Seconds of an RFC 3339 UTC time with no fraction (what the JSON answers carry)."""
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))


def _value(field: FieldDescriptor, value: Any) -> Any:
    if field.type != FieldDescriptor.TYPE_MESSAGE:
        return value
    return to_json_shape(value)


def to_json_shape(message: Message) -> Any:
    """A decoded message in its JSON wire form (set fields only)."""
    descriptor: Descriptor = message.DESCRIPTOR
    name = descriptor.full_name
    m: Any = message
    if name == f"{META}.Time":
        # Go writes nothing for the zero time (JSON null); the epoch has its fields.
        if not (m.HasField("seconds") or m.HasField("nanos")):
            return None
        return rfc3339(m.seconds, m.nanos)
    if name == f"{META}.Duration":
        return go_duration(m.duration)
    if name == f"{META}.Verbs":
        return list(m.items)
    if name == f"{META}.FieldsV1":
        return json.loads(m.Raw)
    if name == "k8s.io.apimachinery.pkg.api.resource.Quantity":
        return m.string
    out: dict[str, Any] = {}
    for field in descriptor.fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {k: _value(value_field, v) for k, v in value.items()}
        elif field.is_repeated:
            out[field.name] = [_value(field, v) for v in value]
        elif message.HasField(field.name):
            out[field.name] = _value(field, value)
    return out


def normalised(value: Any) -> Any:
    """Drop null, empty and zero values recursively: gogo writes every non-pointer field,
    JSON omits the empty ones, and both mean the zero value."""
    if isinstance(value, dict):
        items = {k: normalised(v) for k, v in value.items()}
        return {k: v for k, v in items.items() if v not in (None, "", 0, False, [], {})}
    if isinstance(value, list):
        return [normalised(v) for v in value]
    return value


def same_values(json_document: dict[str, Any], body: bytes) -> Any:
    """Decode a protobuf body and check it against the JSON document of the same answer:
    typeMeta equals the JSON `apiVersion`/`kind`, the object's fields equal the JSON fields
    (after `normalised`) and the bytes are canonical. Returns the JSON-shaped decode."""
    api_version, kind, obj, raw = decode(body)
    assert kind == json_document["kind"]
    assert api_version == json_document.get("apiVersion", "")
    assert canonical(obj, raw), "not the canonical encoding"
    decoded = to_json_shape(obj)
    expected = {k: v for k, v in json_document.items() if k not in ("kind", "apiVersion")}
    assert normalised(decoded) == normalised(expected)
    return decoded
