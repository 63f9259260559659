"""Kubernetes protobuf by hand: the wire primitives, metav1 time and duration, and the
schema-driven message encoder.

PURE: no I/O, no web framework, no protobuf runtime. This module owns how bytes are written,
as Go's gogo-generated `MarshalToSizedBuffer` writes them, not just what a decoder accepts:
varints (negative numbers as `uint64(int64)`), field keys, length-delimited fields, the
`runtime.Unknown` envelope behind the magic `k8s\\x00`, `metav1.Time` as `{seconds 1, nanos 2}`
(empty for the zero time), `metav1.Duration` as `{duration 1}` in nanoseconds, and `Message`
tables (JSON name -> field number, kind, sub-message) whose `encode` turns a JSON-shaped
document into a message: fields in ascending number order; non-pointer fields always written,
even when empty or zero; pointer fields only when set; map entries sorted by key, each with
key (1) and value (2). It must not know any Kubernetes kind: the tables are
`protobuf_messages`, the bodies `protobuf`.

Cost: every primitive is O(its output); a message is O(size of the document), with no
dispatch on kinds at encoding time (a closure per field, built once).
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

from custom_metrics_server.machinery.durations import parse_go_duration_ns

__all__ = [
    "GO_ZERO_TIME",
    "MAGIC",
    "Encoder",
    "Field",
    "Kind",
    "Message",
    "duration_ns",
    "encode_message",
    "envelope",
    "length_delimited",
    "parse_time",
    "quantity_message",
    "sample_time",
    "string_field",
    "tag",
    "time_message",
    "varint",
]

#: Prefix of every body (`protobuf.go`: `protoEncodingPrefix`).
MAGIC: Final = b"k8s\x00"
# contentEncoding (3) and contentType (4) of the envelope: always written, always empty.
_ENVELOPE_TAIL: Final = b"\x1a\x00\x22\x00"

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


def string_field(key: bytes, text: str) -> bytes:
    """A string field: `key`, the UTF-8 length, the UTF-8 bytes. O(len(text))."""
    raw = text.encode()
    size = len(raw)
    return key + (_SMALL_VARINTS[size] if size < 0x4000 else varint(size)) + raw


@lru_cache(maxsize=64)
def _envelope_head(api_version: str, kind: str) -> bytes:
    # The magic and typeMeta: the same few per server, built once.
    type_meta = string_field(b"\x0a", api_version) + string_field(b"\x12", kind)
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


def sample_time(timestamp: float) -> bytes:
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


def quantity_message(text: str) -> bytes:
    """A `resource.Quantity` message body: `{string 1}` (the canonical text)."""
    return string_field(b"\x0a", text)


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
        return lambda value: string_field(key, value) if value else empty
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
        return lambda value: b"".join([string_field(key, text) for text in value]) if value else b""
    if kind is Kind.STRING_MAP:
        return lambda value: (
            b"".join(
                [
                    length_delimited(
                        key, string_field(b"\x0a", name) + string_field(b"\x12", value[name])
                    )
                    for name in sorted(value)
                ]
            )
            if value
            else b""
        )
    if kind is Kind.QUANTITY:
        return lambda value: length_delimited(key, quantity_message(value or "0"))
    if kind is Kind.QUANTITY_MAP:
        return lambda value: (
            b"".join(
                [
                    length_delimited(
                        key,
                        string_field(b"\x0a", name)
                        + length_delimited(b"\x12", quantity_message(value[name])),
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
        return lambda value: length_delimited(
            key, b"".join([string_field(b"\x0a", v) for v in value])
        )
    if kind is Kind.RAW_JSON:
        return lambda value: length_delimited(key, length_delimited(b"\x0a", orjson.dumps(value)))
    raise AssertionError(kind)  # pragma: no cover - exhaustive


def encode_message(message: Message, document: Mapping[str, Any]) -> bytes:
    """The bytes of one message from its JSON-shaped document. O(size of the document)."""
    return message.encode(document)
