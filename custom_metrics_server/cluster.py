"""A `ClusterView` held entirely in memory: a REST mapper plus an object inventory.

The simulated cluster and the memory test double both use it; the Kubernetes backend feeds the
same two pieces from discovery and watches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from custom_metrics_server.domain import (
    GroupResource,
    ObjectKey,
    ObjectRef,
    Readiness,
    ResourceMapping,
)
from custom_metrics_server.inventory import Inventory, ObjectRecord
from custom_metrics_server.restmapper import BUILTIN_MAPPINGS, RestMapper
from custom_metrics_server.selectors import Selector


class InMemoryCluster:
    """Objects added by the caller; always ready."""

    def __init__(self, mappings: Iterable[ResourceMapping] = BUILTIN_MAPPINGS) -> None:
        self.mapper = RestMapper(mappings)
        self.inventory = Inventory()
        self._by_kind = {m.group_resource: m for m in self.mapper.mappings}

    def mapping(self, resource: str) -> ResourceMapping | None:
        """See `ClusterView.mapping`."""
        return self.mapper.mapping(resource)

    async def resolve(self, resource: str) -> ResourceMapping | None:
        """A fixed mapping has nothing to refresh."""
        return self.mapping(resource)

    def list_objects(
        self, group_resource: GroupResource, namespace: str | None, selector: Selector
    ) -> Sequence[ObjectKey]:
        """See `ClusterView.list_objects`."""
        return self.inventory.select(group_resource, namespace, selector)

    def ready(self) -> Readiness:
        """An in-memory cluster has nothing to sync."""
        return Readiness(ready=True)

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
        record = ObjectRecord(
            group_resource=mapping.group_resource,
            namespace=namespace,
            name=name,
            labels=dict(labels or {}),
            ref=ObjectRef(
                kind=mapping.kind,
                namespace=namespace,
                name=name,
                api_version=mapping.api_version,
            ),
            owners=owners,
        )
        self.inventory.upsert(record)
        return record
