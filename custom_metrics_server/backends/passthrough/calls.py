"""The pass-through backend's upstream calls: their URLs (each segment percent-encoded when it
needs it, the selectors passed through), the cost model choosing one `*` call against one call
per object (`prefers_wildcard`), the record of one call, and running several at once.

Owns planning and running the calls; it must not decode answers (`decode`), discover versions
(`discovery`) or hold the backend's state (`backend`). Cost: a path is O(its length); running N
calls is one task each (none for a single call).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

from custom_metrics_server.backends.passthrough.decode import CUSTOM_GROUP, EXTERNAL_GROUP
from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    GroupResource,
    ObjectKey,
    Sample,
)

__all__ = [
    "ITEM_COST",
    "Call",
    "custom_path",
    "external_path",
    "prefers_wildcard",
    "run_all",
    "segment",
]

_NAMESPACES: Final = GroupResource("", "namespaces")
_PLAIN: Final = re.compile(r"[A-Za-z0-9._~:@-]+|\*")

#: The cost model of `prefers_wildcard`: an extra item of a `*` answer costs this fraction of
#: one more call (benchmarks/passthrough.py, "fan-out against `*`").
ITEM_COST: Final = 0.02


def prefers_wildcard(requested: int, in_namespace: int, *, item_cost: float = ITEM_COST) -> bool:
    """Whether one `*` call for the `in_namespace` objects of a namespace costs less than one
    call per each of the `requested` ones: `requested` calls against one call plus
    `in_namespace` items at `item_cost` of a call each."""
    if requested <= 1:
        return False
    return requested - 1 >= max(in_namespace, requested) * item_cost


def segment(text: str) -> str:
    """A path segment, percent-encoded when it needs it (`*`, the wildcard, as it is)."""
    return text if _PLAIN.fullmatch(text) else quote(text, safe="")


def custom_path(request: BackendRequest, version: str, namespace: str, name: str) -> str:
    """The upstream URL of one object's custom metric (`*` for every object of a namespace)."""
    resource = request.metric.group_resource
    metric = segment(request.metric.metric)
    prefix = f"/apis/{CUSTOM_GROUP}/{version}"
    if resource == _NAMESPACES:
        path = f"{prefix}/namespaces/{segment(name)}/metrics/{metric}"
    elif namespace:
        path = f"{prefix}/namespaces/{segment(namespace)}/{resource}/{segment(name)}/{metric}"
    else:
        path = f"{prefix}/{resource}/{segment(name)}/{metric}"
    selector = request.metric_selector
    if not selector.is_everything():
        path += "?metricLabelSelector=" + quote(str(selector), safe="")
    return path


def external_path(request: ExternalBackendRequest, version: str) -> str:
    """The upstream URL of an external metric, its label selector passed through."""
    path = (
        f"/apis/{EXTERNAL_GROUP}/{version}/namespaces/{segment(request.namespace)}/"
        f"{segment(request.metric)}"
    )
    selector = request.metric_selector
    if not selector.is_everything():
        path += "?labelSelector=" + quote(str(selector), safe="")
    return path


@dataclass(frozen=True, slots=True)
class Call:
    """One upstream GET of a custom metric: one object, or `*` filtered to `wanted`."""

    request: BackendRequest
    version: str
    namespace: str
    wanted: Mapping[str, ObjectKey]  # object name -> our key
    wildcard: bool
    found: dict[ObjectKey, Sample]  # filled by the call


async def run_all(calls: list[Any]) -> None:
    """Await every call; the first failure cancels the others and is raised (as itself,
    not in an exception group: it is an SDK error the server maps)."""
    if len(calls) == 1:
        await calls[0]
        return
    try:
        async with asyncio.TaskGroup() as group:
            for call in calls:
                group.create_task(call)
    except BaseExceptionGroup as failures:
        first: BaseException = failures
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None
