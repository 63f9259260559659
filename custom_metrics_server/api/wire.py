"""Domain values to the exact JSON bytes the Go reference server writes.

PURE: no I/O, no web framework. Field order follows the Go structs, `<`, `>`, `&` and U+2028/9
are escaped as Go's encoder escapes them, and every body ends with a newline. List items are
rendered once per sample and cached on it (`Sample.cache`), so a list response is a join of
byte fragments: O(items) with a small constant, no per-item dicts on the hot path.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from operator import is_not
from typing import Any, Final

import orjson

from custom_metrics_server.domain import ExternalSample, ItemShape, ObjectRef, Sample, fragments
from custom_metrics_server.errors import StatusError
from custom_metrics_server.machinery.labels import Selector
from custom_metrics_server.machinery.quantity import format_quantity
from custom_metrics_server.machinery.validation import SelectorError

JSON: Final = "application/json"

_GO_ESCAPES: Final = (
    (b"<", b"\\u003c"),
    (b">", b"\\u003e"),
    (b"&", b"\\u0026"),
    ("\u2028".encode(), b"\\u2028"),
    ("\u2029".encode(), b"\\u2029"),
)


def go_escape(body: bytes) -> bytes:
    """Apply the HTML-safe escaping of Go's `encoding/json` to an orjson encoding."""
    for raw, escaped in _GO_ESCAPES:
        if raw in body:
            body = body.replace(raw, escaped)
    return body


def dumps(document: Any) -> bytes:
    """Encode a document as the Go server would (compact, escaped, newline-terminated)."""
    return go_escape(orjson.dumps(document)) + b"\n"


def prettify(body: bytes) -> bytes:
    """Indented form for `?pretty=true` and curl-like user agents (2 spaces, as Go)."""
    return go_escape(orjson.dumps(orjson.loads(body), option=orjson.OPT_INDENT_2)) + b"\n"


def format_time(timestamp: float) -> str | None:
    """metav1.Time: RFC 3339 in UTC with second precision; the zero time is null."""
    if timestamp <= 0:
        return None
    return _format_second(int(timestamp))


@functools.lru_cache(maxsize=4096)
def _format_second(second: int) -> str:
    # Items of one answer mostly share their second (a Prometheus evaluation time, a scrape).
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))


def object_ref(ref: ObjectRef) -> dict[str, str]:
    """core/v1 ObjectReference with Go's field order and omitempty."""
    out: dict[str, str] = {"kind": ref.kind}
    if ref.namespace:
        out["namespace"] = ref.namespace
    out["name"] = ref.name
    if ref.api_version:
        out["apiVersion"] = ref.api_version
    return out


def label_selector_json(selector: Selector) -> dict[str, Any] | None:
    """The `selector` echoed in items: the metricLabelSelector as a metav1.LabelSelector.

    Unset (empty) is null. Operators a LabelSelector cannot express (`!=`, `>`, `<`) make
    the upstream providers fail; here they echo as null instead.
    """
    if selector.is_everything():
        return None
    try:
        return selector.to_label_selector()
    except SelectorError:
        return None


def _item_v1beta2(sample: Sample, selector: dict[str, Any] | None) -> dict[str, Any]:
    item: dict[str, Any] = {
        "describedObject": object_ref(sample.described),
        "metric": {"name": sample.metric, "selector": selector},
        "timestamp": format_time(sample.timestamp),
    }
    if sample.window is not None:
        item["windowSeconds"] = sample.window
    item["value"] = format_quantity(sample.value)
    return item


def _item_v1beta1(sample: Sample, selector: dict[str, Any] | None) -> dict[str, Any]:
    item: dict[str, Any] = {
        "describedObject": object_ref(sample.described),
        "metricName": sample.metric,
        "timestamp": format_time(sample.timestamp),
    }
    if sample.window is not None:
        item["window"] = sample.window
    item["value"] = format_quantity(sample.value)
    item["selector"] = selector
    return item


_ITEM_RENDERERS: Final = {ItemShape.V1BETA2: _item_v1beta2, ItemShape.V1BETA1: _item_v1beta1}

#: The last bodies of long answers, by (fragment key, head): (their samples, the body). A
#: `pods/*` answer over 3,000 pods polled faster than its nodes are scraped is the same list of
#: samples most of the time; comparing 3,000 references is ~15 us where joining the 840 KB
#: again is ~0.2 ms plus its page faults. Bounded: a few bodies, none over `_BODY_MAX` bytes.
_BODIES: dict[tuple[str, bytes], tuple[tuple[Sample, ...], bytes]] = {}
_BODIES_LIMIT: Final = 4
_BODY_MIN_ITEMS: Final = 64
_BODY_MAX: Final = 2 << 20


def metric_value_list(
    samples: Sequence[Sample],
    *,
    api_version: str,
    shape: ItemShape,
    metric_selector: Selector,
) -> bytes:
    """A `MetricValueList` body. O(len(samples)); cached fragments when no selector is echoed."""
    head = (
        b'{"kind":"MetricValueList","apiVersion":"'
        + api_version.encode()
        + b'","metadata":{},"items":['
    )
    render = _ITEM_RENDERERS[shape]
    selector = label_selector_json(metric_selector)
    if samples and not samples[0].reused:
        # Samples made for this answer alone (a Prometheus query's): one encoder call for the
        # whole list instead of one per item.
        body = go_escape(orjson.dumps([render(sample, selector) for sample in samples]))
        return head + body[1:] + b"}\n"
    # The fragment depends on the echoed selector too, so the selector is part of the key.
    cache_key = shape.value if selector is None else f"{shape.value}|{metric_selector}"
    long = len(samples) >= _BODY_MIN_ITEMS
    if long:
        last = _BODIES.get((cache_key, head))
        if (
            last is not None
            and len(last[0]) == len(samples)
            and not any(map(is_not, samples, last[0]))
        ):
            return last[1]
    items = fragments(
        samples, cache_key, lambda sample: go_escape(orjson.dumps(render(sample, selector)))
    )
    body = _joined(head, items, b"]}\n")
    if long and len(body) <= _BODY_MAX:
        _BODIES.pop((cache_key, head), None)
        if len(_BODIES) >= _BODIES_LIMIT:
            del _BODIES[next(iter(_BODIES))]  # the least recently written
        _BODIES[(cache_key, head)] = (tuple(samples), body)
    return body


def _joined(head: bytes, items: list[bytes], tail: bytes) -> bytes:
    """`head + b",".join(items) + tail`, copying the body once: a 3,000-item answer is
    ~840 kB, and each extra copy is a fresh large allocation (0.4 ms with its page faults,
    measured). `items` is the caller's own list (its ends are replaced)."""
    if not items:
        return head + tail
    items[0] = head + items[0]
    items[-1] += tail
    return b",".join(items)


def _external_item(sample: ExternalSample) -> bytes:
    item: dict[str, Any] = {
        "metricName": sample.metric,
        # Go sorts map keys when encoding.
        "metricLabels": dict(sorted(sample.labels.items())),
        "timestamp": format_time(sample.timestamp),
    }
    if sample.window is not None:
        item["window"] = sample.window
    item["value"] = format_quantity(sample.value)
    return go_escape(orjson.dumps(item))


def external_metric_value_list(samples: Sequence[ExternalSample]) -> bytes:
    """An `ExternalMetricValueList` body; items cached per sample like custom items."""
    items = fragments(samples, "external", _external_item)
    return _joined(
        b'{"kind":"ExternalMetricValueList","apiVersion":"external.metrics.k8s.io/v1beta1",'
        b'"metadata":{},"items":[',
        items,
        b"]}\n",
    )


def status_document(error: StatusError) -> dict[str, Any]:
    """A metav1 `Status` for a failure as a JSON-ready dict, field order as Go writes it."""
    document: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": error.message,
    }
    if error.reason:
        document["reason"] = error.reason
    if error.details is not None:
        document["details"] = error.details
    document["code"] = error.code
    return document


def status(error: StatusError) -> bytes:
    """A metav1 `Status` body for a failure."""
    return dumps(status_document(error))
