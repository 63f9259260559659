"""Effective requests and limits of pods, computed once per distinct resource shape.

This module owns :class:`ResourceShapes`: pods of one template share their resource fields,
so the (costly) resource model (:mod:`.model`) runs once per distinct *shape* and the
resulting read-only mappings are shared between pods, which cuts both the CPU per watch event
and the memory per pod. The shape holds only the fields the model reads (container resources
and restart policies, overhead, pod-level resources, and the resize-related status fields);
it must change with :mod:`.model` whenever the model reads a new field. A pod the model does
not understand counts as requesting nothing (logged).

Cost: O(containers) to build a pod's shape key; a hit is one dict lookup; a miss runs the
model. The memo holds at most 4,096 shapes (cleared when full).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from decimal import Decimal
from types import MappingProxyType
from typing import Any, Final

import orjson

from custom_metrics_server.compute.model import pod_limits, pod_requests
from custom_metrics_server.domain import ObjectKey

__all__ = ["ResourceShapes"]

logger = logging.getLogger("custom_metrics_server.compute.records")

Resources = tuple[Mapping[str, Decimal], Mapping[str, Decimal]]

_EMPTY: Final[Mapping[str, Decimal]] = MappingProxyType({})
_SHAPE_CACHE_SIZE: Final = 4096


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
    """(requests, limits) of pods as value mappings, memoised by resource shape."""

    def __init__(self) -> None:
        self._shapes: dict[bytes, Resources] = {}

    def of(self, key: ObjectKey, pod: Mapping[str, Any]) -> Resources:
        """The effective requests and limits of pod ``key`` (read-only, possibly shared)."""
        try:
            shape = _resource_shape(pod)
        except (TypeError, AttributeError, orjson.JSONEncodeError):
            shape = None
        if shape is not None:
            cached = self._shapes.get(shape)
            if cached is not None:
                return cached
        try:
            found: Resources = (
                MappingProxyType({k: q.value for k, q in pod_requests(pod).items()}),
                MappingProxyType({k: q.value for k, q in pod_limits(pod).items()}),
            )
        except (ValueError, TypeError) as err:
            logger.warning("pod %s/%s: resources not understood, counted as none: %s", *key, err)
            found = (_EMPTY, _EMPTY)
        if shape is not None:
            if len(self._shapes) >= _SHAPE_CACHE_SIZE:
                self._shapes.clear()
            self._shapes[shape] = found
        return found
