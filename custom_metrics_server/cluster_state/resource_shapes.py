"""The views of pods' resources, computed once per distinct resource shape.

This module owns :class:`ResourceShapes`: pods of one template share their resource fields,
so the (costly) resource model (:mod:`resources.model`) runs once per distinct *shape* and the
resulting read-only mappings are shared between pods (and between views that agree), which
cuts both the CPU per watch event
and the memory per pod. The shape holds only the fields the model reads (container resources
and restart policies, overhead, pod-level resources, and the resize-related status fields);
it must change with :mod:`resources.model` whenever the model reads a new field. A pod the
model does not understand counts as requesting nothing (logged).

Cost: O(containers) to build a pod's shape key; a hit is one dict lookup; a miss runs the
model. The memo holds at most 4,096 shapes (cleared when full).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from decimal import Decimal
from types import MappingProxyType
from typing import Any, Final, cast

import orjson

from custom_metrics_server.cluster_state.wire_objects import (
    ObjectWire,
    PodWire,
    model_pod,
    pod_shape,
)
from custom_metrics_server.domain import ObjectKey
from custom_metrics_server.machinery.quantity import Quantity
from custom_metrics_server.resources.model import (
    SCHEDULER_METRIC_OPTIONS,
    hpa_pod_requests,
    pod_limits,
    pod_requests,
)

__all__ = ["ResourceShapes"]

logger = logging.getLogger("custom_metrics_server.cluster_state.records")

#: requests, limits, metric_requests, metric_limits, hpa_requests (see `records.PodRecord`)
Resources = tuple[
    Mapping[str, Decimal],
    Mapping[str, Decimal],
    Mapping[str, Decimal],
    Mapping[str, Decimal],
    Mapping[str, Decimal],
]

_EMPTY: Final[Mapping[str, Decimal]] = MappingProxyType({})
_SHAPE_CACHE_SIZE: Final = 4096


def _frozen(
    values: Mapping[str, Quantity], same_as: Mapping[str, Decimal] | None = None
) -> Mapping[str, Decimal]:
    """A read-only {name: Decimal} of a model result; `same_as` itself when equal (shared)."""
    found = {name: amount.value for name, amount in values.items()}
    if same_as is not None and found == same_as:
        return same_as
    return MappingProxyType(found) if found else _EMPTY


def _views(pod: Mapping[str, Any]) -> Resources:
    """Every view of a pod's resources; O(containers x resources) each."""
    requests = _frozen(pod_requests(pod))
    limits = _frozen(pod_limits(pod))
    return (
        requests,
        limits,
        _frozen(pod_requests(pod, options=SCHEDULER_METRIC_OPTIONS), requests),
        _frozen(pod_limits(pod, options=SCHEDULER_METRIC_OPTIONS), limits),
        _frozen(hpa_pod_requests(pod), requests),
    )


def _resource_shape(pod: Mapping[str, Any]) -> bytes:
    """The fields the resource model reads, as one hashable byte string. O(containers).

    Status entries without resize-related fields (the usual case) add nothing to the key.
    """
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    parts: list[Any] = [
        [
            (c.get("name"), c.get("restartPolicy"), c.get("resources"))
            for c in spec.get("containers") or ()
        ],
        [
            (c.get("name"), c.get("restartPolicy"), c.get("resources"))
            for c in spec.get("initContainers") or ()
        ],
        spec.get("overhead"),
        spec.get("resources"),
    ]
    parts.extend(
        (field, c.get("name"), c.get("allocatedResources"), c.get("resources"))
        for field in ("containerStatuses", "initContainerStatuses")
        for c in status.get(field) or ()
        if "allocatedResources" in c or "resources" in c
    )
    if "resources" in status or "allocatedResources" in status or "resize" in status:
        parts.append(
            (status.get("resources"), status.get("allocatedResources"), status.get("resize"))
        )
    parts.extend(
        ("PodResizePending", c.get("reason"))
        for c in status.get("conditions") or ()
        if c.get("type") == "PodResizePending"
    )
    return orjson.dumps(parts)


class ResourceShapes:
    """The views of pods' resources as value mappings, memoised by resource shape."""

    def __init__(self) -> None:
        # Keyed by the dict's shape (bytes) or a decoded pod's (`wire_objects.pod_shape`, a
        # tuple): the two kinds of key never meet.
        self._shapes: dict[bytes | tuple[Any, ...], Resources] = {}

    def of(self, key: ObjectKey, pod: Mapping[str, Any] | ObjectWire) -> Resources:
        """The views of pod ``key``'s resources (read-only, possibly shared), from its dict
        or its schema-decoded struct (whose model fields are decoded only on a miss)."""
        shape: bytes | tuple[Any, ...] | None
        try:
            if isinstance(pod, PodWire):
                shape = pod_shape(pod)
            else:
                shape = _resource_shape(cast("Mapping[str, Any]", pod))
        except (TypeError, AttributeError, orjson.JSONEncodeError):
            shape = None
        if shape is not None:
            cached = self._shapes.get(shape)
            if cached is not None:
                return cached
        try:
            found = _views(
                model_pod(pod) if isinstance(pod, PodWire) else cast("Mapping[str, Any]", pod)
            )
        except (ValueError, TypeError) as err:
            logger.warning("pod %s/%s: resources not understood, counted as none: %s", *key, err)
            found = (_EMPTY, _EMPTY, _EMPTY, _EMPTY, _EMPTY)
        if shape is not None:
            if len(self._shapes) >= _SHAPE_CACHE_SIZE:
                self._shapes.clear()
            self._shapes[shape] = found
        return found
