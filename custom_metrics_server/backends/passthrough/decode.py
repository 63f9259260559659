"""An upstream's JSON documents read into our values: its discovery documents into the versions
it serves and the metrics it lists, its `MetricValueList` / `ExternalMetricValueList` items into
`Sample`s / `ExternalSample`s, which our encoders then write in whatever version our client
asked for.

What is accepted, as a Go client accepts it:

* values: a Kubernetes quantity string, parsed by `machinery.quantity` exactly as
  `ParseQuantity` does (`"1500m"`, `"2k"`, `"1Ki"`, `"1.5"`), or a bare JSON number;
* timestamps: RFC 3339 (`Z` or an offset, fractional seconds or not); `null` (Go's zero time)
  stays the zero time, which we write as `null` again;
* v1beta1 items (`metricName`, `window`) and v1beta2 items (`metric.name`, `windowSeconds`);
* `describedObject` as the Go adapters write it, `"apiVersion": "/v1"` included: only its
  `namespace` and `name` are read; kind and apiVersion come from our own REST mapping, so our
  answer carries the correct form (`v1`);
* `items: null` (a nil list) and `metricLabels: null`.

An item that cannot be read (no name, a value that is not a quantity) is left out and counted in
`Decoded.skipped`; a body that is not the list kind asked for is a `ValueError`.

PURE: no I/O. Cost: O(items); a timestamp string is parsed once per distinct value (cached).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from types import MappingProxyType
from typing import Any, Final

from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalSample,
    GroupResource,
    MetricInfo,
    ObjectKey,
    ObjectRef,
    Sample,
)
from custom_metrics_server.machinery.quantity import Quantity

__all__ = [
    "CUSTOM_GROUP",
    "EXTERNAL_GROUP",
    "Decoded",
    "custom_listing",
    "external_listing",
    "external_samples",
    "group_versions",
    "samples_for",
]

CUSTOM_GROUP: Final = "custom.metrics.k8s.io"
EXTERNAL_GROUP: Final = "external.metrics.k8s.io"
#: custom-metrics-apiserver's placeholder for "nothing to list" (its default provider; its
#: custom one, `/custommetrics`, has no resource and is skipped as such).
_EXTERNAL_PLACEHOLDER: Final = "externalmetrics"


def group_versions(document: Any, group: str) -> tuple[list[str], str | None] | None:
    """(versions, preferred version) of `group` from an `APIGroupList` (`/apis`) or an
    `APIGroup` (`/apis/{group}`) document; None when the group is not in it."""
    if not isinstance(document, dict):
        return None
    entries: Iterable[Any]
    if document.get("kind") == "APIGroup" or "groups" not in document:
        entries = [document]
    else:
        groups = document.get("groups")
        entries = groups if isinstance(groups, list) else ()
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("name") != group:
            continue
        versions = [
            str(one["version"])
            for one in entry.get("versions") or ()
            if isinstance(one, dict) and isinstance(one.get("version"), str)
        ]
        preferred = entry.get("preferredVersion")
        chosen = preferred.get("version") if isinstance(preferred, dict) else None
        return versions, chosen if isinstance(chosen, str) else None
    return None


def _resources(document: Any) -> list[dict[str, Any]]:
    if not isinstance(document, dict) or document.get("kind") not in (None, "APIResourceList"):
        raise ValueError("not an APIResourceList")
    resources = document.get("resources")
    if resources is None:
        return []
    if not isinstance(resources, list):
        raise ValueError("resources is not a list")
    return [entry for entry in resources if isinstance(entry, dict)]


def custom_listing(document: Any) -> frozenset[MetricInfo]:
    """The custom metrics of an `APIResourceList` (`pods/http_requests`,
    `deployments.apps/hits`, `namespaces/queue_length`); the Go default provider's placeholder
    `/custommetrics` and malformed entries are left out."""
    found = set()
    for entry in _resources(document):
        name = entry.get("name")
        if not isinstance(name, str):
            continue
        resource, slash, metric = name.partition("/")
        if not slash or not resource or not metric:  # `/custommetrics`: no resource
            continue
        found.add(
            MetricInfo(GroupResource.parse(resource), bool(entry.get("namespaced", False)), metric)
        )
    return frozenset(found)


def external_listing(document: Any) -> frozenset[str]:
    """The external metric names of an `APIResourceList`; the Go default provider's
    placeholder `externalmetrics` (what KEDA lists) is left out."""
    return frozenset(
        name
        for entry in _resources(document)
        if isinstance(name := entry.get("name"), str)
        and name
        and "/" not in name
        and name != _EXTERNAL_PLACEHOLDER
    )


#: Timestamps already read (the items of one answer mostly share theirs).
_TIMES: dict[str, float] = {}
_TIME_CACHE: Final = 4096
_NO_LABELS: Final[Mapping[str, str]] = MappingProxyType({})


#: Quantity strings already read (an upstream repeats values: 0, 1, its canonical forms).
_QUANTITIES: dict[str, Decimal | int] = {}
_QUANTITY_CACHE: Final = 65_536
#: The canonical forms Go writes most: an integer, or an integer of milli-units.
_PLAIN_QUANTITY: Final = re.compile(r"(-?[0-9]{1,15})(m?)")


def _quantity(text: str) -> Decimal | int | None:
    """`Quantity.parse(text).value`, memoised; integers and milli-units without the parser
    (the same values: exact, no rounding applies to them)."""
    found = _QUANTITIES.get(text)
    if found is not None:
        return found
    plain = _PLAIN_QUANTITY.fullmatch(text)
    value: Decimal | int
    if plain is not None:
        digits, milli = plain.groups()
        number = int(digits)
        value = Decimal(number).scaleb(-3) if milli and number else number
    else:
        try:
            value = Quantity.parse(text).value
        except (ValueError, ArithmeticError):
            return None
    if len(_QUANTITIES) >= _QUANTITY_CACHE:
        _QUANTITIES.clear()
    _QUANTITIES[text] = value
    return value


def _value(raw: Any) -> Decimal | int | float | None:
    if isinstance(raw, str):
        return _quantity(raw)
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float):
        return Quantity.from_number(raw).value if math.isfinite(raw) else None
    return None


def _time_of(raw: Any) -> float | None:
    """RFC 3339 to Unix seconds, memoised; null (Go's zero time) is 0 (written null again)."""
    if raw is None:
        return 0.0
    if not isinstance(raw, str):
        return None
    found = _TIMES.get(raw)
    if found is None:
        try:
            found = dt.datetime.fromisoformat(raw).timestamp()
        except ValueError:
            return None
        if len(_TIMES) >= _TIME_CACHE:
            _TIMES.clear()
        _TIMES[raw] = found
    return found


def _window(raw: Any) -> int | None:
    return raw if isinstance(raw, int) and not isinstance(raw, bool) else None


@dataclass
class Decoded:
    """Samples read from one answer, and how many items could not be read."""

    samples: list[Any] = field(default_factory=list)
    skipped: int = 0
    problem: str = ""

    def skip(self, problem: str) -> None:
        """Leave one item out."""
        self.skipped += 1
        self.problem = self.problem or problem


def _items(document: Any, kind: str) -> list[Any]:
    if not isinstance(document, dict) or document.get("kind") != kind:
        found = document.get("kind") if isinstance(document, dict) else type(document).__name__
        raise ValueError(f"expected a {kind}, got {found!r}")
    items = document.get("items")
    if items is None:
        return []
    if not isinstance(items, list):
        raise ValueError("items is not a list")
    return items


def samples_for(
    document: Any,
    request: BackendRequest,
    wanted: Mapping[str, ObjectKey],
    found: dict[ObjectKey, Sample],
) -> Decoded:
    """The items of a `MetricValueList` answering `request`, for the objects in `wanted`
    (object name -> our key, one namespace at a time), into `found` (at most one sample per
    object: the first). Items of other objects (an upstream's `*` answers every object of the
    namespace) are dropped. O(items)."""
    decoded = Decoded()
    mapping = request.mapping
    kind, api_version, metric = mapping.kind, mapping.api_version, request.metric.metric
    quantities, times = _QUANTITIES, _TIMES
    for item in _items(document, "MetricValueList"):
        if not isinstance(item, dict):
            decoded.skip("an item is not an object")
            continue
        described = item.get("describedObject")
        name = described.get("name") if isinstance(described, dict) else None
        key = wanted.get(name) if isinstance(name, str) else None
        if key is None or key in found:
            continue
        raw_value, raw_time = item.get("value"), item.get("timestamp")
        # The common case inline (a value and a timestamp read before); else the readers.
        value: Decimal | int | float | None = (
            quantities.get(raw_value) if isinstance(raw_value, str) else None
        )
        if value is None:
            value = _value(raw_value)
        timestamp = times.get(raw_time) if isinstance(raw_time, str) else None
        if timestamp is None:
            timestamp = _time_of(raw_time)
        if value is None or timestamp is None:
            decoded.skip(f"item of {name}: value {raw_value!r}, timestamp {raw_time!r}")
            continue
        window = item.get("windowSeconds", item.get("window"))
        found[key] = Sample(
            described=ObjectRef(kind, key[0], key[1], api_version),
            metric=metric,
            value=value,
            timestamp=timestamp,
            window=window if type(window) is int else None,
            labels=_NO_LABELS,
            reused=False,
        )
    return decoded


def external_samples(document: Any, request: ExternalBackendRequest) -> Decoded:
    """The items of an `ExternalMetricValueList`, as series of the requested metric. The
    upstream applied the selector (KEDA's items carry no labels: they must not be filtered
    again here). O(items)."""
    decoded = Decoded()
    metric = request.metric
    for item in _items(document, "ExternalMetricValueList"):
        if not isinstance(item, dict):
            decoded.skip("an item is not an object")
            continue
        value = _value(item.get("value"))
        timestamp = _time_of(item.get("timestamp"))
        labels = item.get("metricLabels")
        if labels is None:
            labels = {}
        if (
            value is None
            or timestamp is None
            or not isinstance(labels, dict)
            or not all(isinstance(v, str) for v in labels.values())
        ):
            decoded.skip(
                f"value {item.get('value')!r}, timestamp {item.get('timestamp')!r}, "
                f"metricLabels {labels!r}"
            )
            continue
        decoded.samples.append(
            ExternalSample(
                metric=metric,
                labels=labels,
                value=value,
                timestamp=timestamp,
                window=_window(item.get("window")),
                reused=False,
            )
        )
    return decoded
