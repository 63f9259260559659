"""Helpers that build answers from a request, so a plugin never assembles `ObjectRef`s.

`sample(request, key, value)` is one object's value, described with the kind and apiVersion
the server resolved for the request; `external_sample(request, value, labels=...)` is one
series of an external metric. Both stamp the current time unless told otherwise and mark the
sample as made for one answer (the encoders then skip their render cache).

PURE: no I/O. Cost: O(1) each (plus a copy of `labels`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from decimal import Decimal

from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalSample,
    ObjectKey,
    ObjectRef,
    Sample,
)

__all__ = ["external_sample", "sample"]


def sample(
    request: BackendRequest,
    key: ObjectKey,
    value: Decimal | int | float,
    *,
    timestamp: float | None = None,
    window: int | None = None,
    labels: Mapping[str, str] | None = None,
) -> Sample:
    """The value of `request.metric` for the object `key` (namespace, name) of the request."""
    mapping = request.mapping
    return Sample(
        described=ObjectRef(mapping.kind, key[0], key[1], mapping.api_version),
        metric=request.metric.metric,
        value=value,
        timestamp=time.time() if timestamp is None else timestamp,
        window=window,
        labels=dict(labels) if labels else {},
        reused=False,
    )


def external_sample(
    request: ExternalBackendRequest,
    value: Decimal | int | float,
    *,
    labels: Mapping[str, str] | None = None,
    timestamp: float | None = None,
    window: int | None = None,
) -> ExternalSample:
    """One series of `request.metric` with its labels."""
    return ExternalSample(
        metric=request.metric,
        labels=dict(labels) if labels else {},
        value=value,
        timestamp=time.time() if timestamp is None else timestamp,
        window=window,
        reused=False,
    )
