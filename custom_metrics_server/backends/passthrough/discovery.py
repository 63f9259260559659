"""The pass-through backend's discovery documents: which version of a metrics group the upstream
serves (ours in order of preference, or the one the settings force) with its `APIResourceList`,
and the listing view the router reads (a stable object, new only when the listing changed).

Owns choosing and holding; the backend's discovery loop, its retries and readiness are
`backend`'s, reading the documents `decode`'s. Cost: `choose_version` is at most 1 + len(known)
upstream GETs, once per discovery, never per request.
"""

from __future__ import annotations

from typing import Any, Final

from custom_metrics_server.backends.passthrough.decode import group_versions
from custom_metrics_server.backends.passthrough.upstream import Upstream
from custom_metrics_server.domain import GroupResource, MetricInfo

__all__ = [
    "CUSTOM_VERSIONS",
    "EXTERNAL_VERSIONS",
    "ListingView",
    "choose_version",
    "forced_version",
]

CUSTOM_VERSIONS: Final = ("v1beta2", "v1beta1")
EXTERNAL_VERSIONS: Final = ("v1beta1",)


class ListingView:
    """What the router reads: a stable object per listing (a new one only when it changed)."""

    def __init__(self) -> None:
        self.custom: frozenset[MetricInfo] = frozenset()
        self.custom_keys: frozenset[tuple[GroupResource, str]] = frozenset()
        self.external: frozenset[str] = frozenset()

    def update(self, custom: frozenset[MetricInfo], external: frozenset[str]) -> None:
        """Take a new listing; an equal one keeps the objects the router holds."""
        if custom != self.custom:
            self.custom = custom
            self.custom_keys = frozenset((info.group_resource, info.metric) for info in custom)
        if external != self.external:
            self.external = external


def forced_version(version: str | None) -> str | None:
    """The version the settings force (None: discover; "none" also: not forwarded)."""
    return None if version in (None, "none") else version


async def choose_version(
    upstream: Upstream, group: str, index: Any, forced: str | None, known: tuple[str, ...]
) -> tuple[str | None, Any]:
    """(version, its APIResourceList) of `group`: the forced one, else the first of
    `known` the upstream serves; (None, None) when it serves none."""
    if forced == "none":
        return None, None
    candidates: tuple[str, ...]
    if forced is not None:
        candidates = (forced,)
    else:
        status, document = await upstream.get(f"/apis/{group}")
        found = group_versions(document, group) if status == 200 else None
        if found is None and index is not None:
            found = group_versions(index, group)
        if found is None or not set(known) & set(found[0]):
            return None, None
        # In our order of preference, advertised or not: a Go adapter's group document
        # advertises only v1beta1 of the custom group, and it serves v1beta2 too.
        candidates = known
    for version in candidates:
        status, document = await upstream.get(f"/apis/{group}/{version}")
        if status == 200:
            return version, document
    if forced is not None:
        return forced, None  # forced: use it even if its listing is not served
    return None, None
