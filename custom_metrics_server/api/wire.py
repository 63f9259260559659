"""Domain values to the exact JSON bytes the Go reference server writes.

PURE: no I/O, no web framework, no state. Field order follows the Go structs, `<`, `>`, `&`
and U+2028/9 are escaped as Go's encoder escapes them, and every body ends with a newline. A
list response is a join of one byte fragment per item: O(items) with a small constant. The
fragments, long answers' bodies and the seconds' text are kept between requests by the render
caches (`api.render_cache`); samples made for one answer are encoded in one call instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import orjson

from custom_metrics_server.api import render_cache
from custom_metrics_server.domain import ExternalSample, ItemShape, ObjectRef, Sample
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
    return render_cache.rfc3339_second(int(timestamp))


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
    if not selector.requirements:  # selects everything (read without a call: hot path)
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


def metric_value_list(
    samples: Sequence[Sample],
    *,
    api_version: str,
    shape: ItemShape,
    metric_selector: Selector,
) -> bytes:
    """A `MetricValueList` body. O(len(samples)); the items' fragments and long answers'
    bodies come from the render caches unless the samples are single-use."""
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
    remembered = render_cache.remembered_body(cache_key, head, samples)
    if remembered is not None:
        return remembered
    items = render_cache.fragments(
        samples, cache_key, lambda sample: go_escape(orjson.dumps(render(sample, selector)))
    )
    body = _joined(head, items, b"]}\n")
    render_cache.remember_body(cache_key, head, samples, body)
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
    """An `ExternalMetricValueList` body; items from the render caches like custom items."""
    items = render_cache.fragments(samples, "external", _external_item)
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
