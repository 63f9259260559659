"""Reading Prometheus query answers (`data` of `/api/v1/query`).

PURE. The custom, external and resource-usage paths all read instant vectors the same way:
the `result` list, then each series' labels and `[timestamp, "value"]` pair, skipping what is
malformed and values that are not finite (Prometheus writes NaN and +-Inf as strings).

Cost: O(series).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal, InvalidOperation


def point(raw: object) -> tuple[Decimal, float] | None:
    """(value, timestamp) of a `[1700000000.123, "0.5"]` pair; None for NaN, +-Inf or junk."""
    if not isinstance(raw, list | tuple) or len(raw) != 2:
        return None
    try:
        value = Decimal(str(raw[1]))
        timestamp = float(raw[0])
    except (InvalidOperation, ValueError, TypeError):
        return None
    return (value, timestamp) if value.is_finite() and math.isfinite(timestamp) else None


def vector_result(data: object) -> list[object] | None:
    """The `result` list of an instant-vector answer; None when `data` is not one."""
    if not isinstance(data, Mapping) or data.get("resultType") != "vector":
        return None
    result = data.get("result")
    return result if isinstance(result, list) else None


def samples(result: Iterable[object]) -> Iterator[tuple[Mapping[str, str], Decimal, float]]:
    """(labels, value, timestamp) of each well-formed series of a vector, in order."""
    for series in result:
        if not isinstance(series, Mapping):
            continue
        labels = series.get("metric")
        sample = point(series.get("value"))
        if isinstance(labels, Mapping) and sample is not None:
            yield labels, sample[0], sample[1]
