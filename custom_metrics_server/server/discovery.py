"""The discovery documents of the served state: which groups and versions this server serves
with which resources, as the plain documents (`/apis`, `/apis/{group}`, `/apis/{group}/{version}`)
and as the aggregated `/apis` document, the latter rendered once per state and cached.

Owns the served state's view: the grammar's groups (custom metrics, the legacy custom-metrics
group, external metrics) with the resources the backends list now, plus the groups served
beside them with fixed lists (`metrics.k8s.io` when enabled). It must not negotiate or send
(`endpoints` does) or decide document shapes (`api.discovery`, `api.aggregated_discovery`).

A state is the set of custom metrics and the set of external metrics the backends list: equal
sets give the same aggregated bodies (JSON, protobuf) and `ETag`, which are kept until the sets
change (the protobuf body from its first use). Cost per aggregated request: O(metrics listed)
to build and compare the state key (no sort, no encoding); O(resources) to render, once per new
state. Plain documents cost what they
always did: O(metrics listed) per request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from custom_metrics_server.api import aggregated_discovery, discovery, protobuf, wire
from custom_metrics_server.api.grammar import (
    EXTERNAL_GROUP,
    GROUP_VERSIONS,
    GroupDiscovery,
    RootDiscovery,
    VersionDiscovery,
)
from custom_metrics_server.domain import MetricInfo
from custom_metrics_server.query.engine import QueryEngine

__all__ = ["RenderedDiscovery", "ServedDiscovery", "render_aggregated"]

#: group -> version -> its `APIResourceList`, versions preferred first.
ExtraGroups = Mapping[str, Mapping[str, Mapping[str, Any]]]


class RenderedDiscovery:
    """One aggregated document: its JSON body and `ETag`, and its protobuf body, encoded on
    first use (most clients, kubectl and kube-aggregator among them, ask for JSON) and kept."""

    __slots__ = ("_document", "_protobuf", "etag", "json")

    def __init__(self, document: Mapping[str, Any]) -> None:
        self._document: Mapping[str, Any] | None = document
        self._protobuf: bytes | None = None
        self.json = wire.dumps(document)
        self.etag = aggregated_discovery.etag(self.json)

    @property
    def protobuf(self) -> bytes:
        """The protobuf body. O(size of the document) once, then O(1)."""
        if self._protobuf is None:
            assert self._document is not None
            self._protobuf = protobuf.encode_document(self._document)
            self._document = None  # the bytes are all that is needed from now on
        return self._protobuf


def render_aggregated(
    groups: Mapping[str, Sequence[tuple[str, Mapping[str, Any]]]],
) -> RenderedDiscovery:
    """The aggregated `APIGroupDiscoveryList` of `groups` (name -> (version, its plain
    `APIResourceList`), preferred first), rendered. O(resources)."""
    return RenderedDiscovery(aggregated_discovery.group_discovery_list(groups))


class ServedDiscovery:
    """The discovery documents of what the engine's backends list and the extra groups."""

    def __init__(self, engine: QueryEngine, extra_groups: ExtraGroups | None = None) -> None:
        self.engine = engine
        self.extra_groups: ExtraGroups = extra_groups or {}
        self.group_versions: dict[str, tuple[str, ...]] = {
            **GROUP_VERSIONS,
            **{group: tuple(versions) for group, versions in self.extra_groups.items()},
        }
        self._aggregated: tuple[object, RenderedDiscovery] | None = None

    def document(
        self, parsed: RootDiscovery | GroupDiscovery | VersionDiscovery, server_address: str
    ) -> dict[str, Any]:
        """The plain document of a discovery path of the grammar's groups (`/apis` lists the
        extra groups too). O(metrics listed)."""
        if isinstance(parsed, VersionDiscovery):
            if parsed.group == EXTERNAL_GROUP:
                return discovery.external_resource_list(self.engine.external_metrics())
            return discovery.custom_resource_list(
                parsed.group, parsed.version, self.engine.custom_metrics()
            )
        if isinstance(parsed, GroupDiscovery):
            return discovery.api_group(parsed.group)
        extra = {group: self.group_versions[group] for group in self.extra_groups}
        return discovery.api_group_list(server_address, extra)

    def aggregated(self) -> RenderedDiscovery:
        """The aggregated `/apis` document of the current state, from the cache when the
        backends list the same metrics as when it was rendered. O(metrics listed)."""
        custom = self.engine.custom_metrics()
        external = self.engine.external_metrics()
        key = (frozenset(custom), frozenset(external))
        cached = self._aggregated
        if cached is not None and cached[0] == key:
            return cached[1]
        groups = {
            group: [
                (version, self._resource_list(group, version, custom, external))
                for version in versions
            ]
            for group, versions in self.group_versions.items()
        }
        rendered = render_aggregated(groups)
        self._aggregated = (key, rendered)
        return rendered

    def _resource_list(
        self,
        group: str,
        version: str,
        custom: Sequence[MetricInfo],
        external: Sequence[str],
    ) -> dict[str, Any]:
        fixed = self.extra_groups.get(group)
        if fixed is not None:
            return dict(fixed[version])
        if group == EXTERNAL_GROUP:
            return discovery.external_resource_list(external)
        return discovery.custom_resource_list(group, version, custom)
