"""A `ClusterView` held entirely in memory: a REST mapper plus an object inventory.

The simulated cluster and the memory test double both use it; the Kubernetes backend feeds the
same two pieces from discovery and watches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Final, Protocol

from custom_metrics_server.cluster.inventory import Inventory, ObjectRecord
from custom_metrics_server.cluster.restmapper import BUILTIN_MAPPINGS, RestMapper
from custom_metrics_server.domain import GroupResource, ObjectKey, Readiness, ResourceMapping
from custom_metrics_server.machinery.labels import Selector

_NO_LABELS: Final[Mapping[str, str]] = MappingProxyType({})
_LABEL_SETS: Final = 65536


class Resolver(Protocol):
    """Live REST mapping (API discovery), consulted before the built-in table."""

    def mapping(self, resource: str) -> ResourceMapping | None: ...

    async def resolve(self, resource: str) -> ResourceMapping | None: ...


class InMemoryCluster:
    """Objects added by the caller; always ready. The REST mapping is the built-in table
    (`mappings`), after live discovery when a `resolver` is given (the Kubernetes backend's
    cluster state): the one place the custom metrics API's `{resource}` is mapped, O(1)."""

    def __init__(
        self,
        mappings: Iterable[ResourceMapping] = BUILTIN_MAPPINGS,
        *,
        resolver: Resolver | None = None,
    ) -> None:
        self.mapper = RestMapper(mappings)
        self._resolver = resolver
        self.inventory = Inventory()
        self._by_kind = {m.group_resource: m for m in self.mapper.mappings}
        self._label_sets: dict[tuple[tuple[str, str], ...], Mapping[str, str]] = {}

    def mapping(self, resource: str) -> ResourceMapping | None:
        """See `ClusterView.mapping`: live discovery first (when there is one), then the
        built-in kinds."""
        resolver = self._resolver
        if resolver is not None:
            found = resolver.mapping(resource)
            if found is not None:
                return found
        return self.mapper.mapping(resource)

    async def resolve(self, resource: str) -> ResourceMapping | None:
        """Refresh live discovery for a resource not known yet (new CRDs); a fixed mapping
        has nothing to refresh."""
        if self._resolver is not None:
            return await self._resolver.resolve(resource)
        return self.mapping(resource)

    def list_objects(
        self, group_resource: GroupResource, namespace: str | None, selector: Selector
    ) -> Sequence[ObjectKey]:
        """See `ClusterView.list_objects`."""
        return self.inventory.select(group_resource, namespace, selector)

    def ready(self) -> Readiness:
        """An in-memory cluster has nothing to sync."""
        return Readiness(ready=True)

    def _intern(self, labels: Mapping[str, str] | None) -> Mapping[str, str]:
        """One shared read-only copy per distinct label set (pods of a template share theirs)."""
        if not labels:
            return _NO_LABELS
        key = tuple(labels.items())
        found = self._label_sets.get(key)
        if found is None:
            if len(self._label_sets) >= _LABEL_SETS:
                self._label_sets.clear()
            found = self._label_sets[key] = MappingProxyType(dict(labels))
        return found

    def add(
        self,
        resource: str,
        name: str,
        *,
        namespace: str = "",
        labels: Mapping[str, str] | None = None,
        owners: tuple[tuple[str, str], ...] = (),
    ) -> ObjectRecord:
        """Add one object of a known resource (`pods`, `deployments.apps`, ...)."""
        mapping = self.mapper.mapping(resource)
        if mapping is None:
            raise ValueError(f"unknown resource {resource!r}")
        if mapping.namespaced != bool(namespace):
            scope = "namespaced" if mapping.namespaced else "cluster-scoped"
            raise ValueError(f"{resource} is {scope}; namespace {namespace!r} does not fit")
        return self.put(mapping, (namespace, name), labels, owners)

    def put(
        self,
        mapping: ResourceMapping,
        key: ObjectKey,
        labels: Mapping[str, str] | None,
        owners: tuple[tuple[str, str], ...] = (),
    ) -> ObjectRecord:
        """Add or replace one object whose mapping and scope the caller has checked (the
        watch sinks: one event = one call, no mapping lookup). O(labels)."""
        record = ObjectRecord(mapping, key, self._intern(labels), owners)
        self.inventory.upsert(record)
        return record
