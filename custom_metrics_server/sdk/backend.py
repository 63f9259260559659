"""The full backend protocol the server works with, and the cluster view backends may read.

`MetricsBackend` is what the query layer calls: both sources, readiness and a lifecycle. The
built-in backends implement it directly; a plugin implements only the capabilities it has
(`sources`) and the server adapts it to this protocol when it loads it (`plugins.adapter`).
The rules hold for both:

* `list_metrics()` / `list_external_metrics()` come from memory and never raise; the server
  reads them when it refreshes its routing table and its discovery documents, not per request.
* `fetch()` gets concrete objects (the query layer has already resolved `*` and the label
  selector) and returns samples only for objects it has values for. Absence is not an error;
  the query layer turns it into the upstream not-found wording.
* I/O failures are raised as `errors.BackendUnavailable` / `errors.BackendTimeout`, with the
  original exception chained, at the backend's own boundary.
* Background work (watches, scrape loops, series discovery) starts in `__aenter__` and stops
  in `__aexit__`; `ready()` says whether the first sync is done and, if not, why.

A `ClusterView` is the server's picture of the cluster's objects: the REST mapping of
`{resource}` strings and the objects of each resource with their labels. The simulated cluster
is one; the Kubernetes backend's watch inventory is another. Plugins get it in their
`BackendContext`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from types import TracebackType
from typing import Protocol, Self

from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalSample,
    GroupResource,
    MetricInfo,
    ObjectKey,
    Readiness,
    ResourceMapping,
    Sample,
)
from custom_metrics_server.machinery.labels import Selector


class MetricsBackend(Protocol):
    """A source of custom and external metric values."""

    name: str

    def list_metrics(self) -> Collection[MetricInfo]:
        """Custom metrics this backend serves, from memory; never raises."""
        ...

    def list_external_metrics(self) -> Collection[str]:
        """External metric names this backend serves, from memory; never raises."""
        ...

    async def fetch(self, request: BackendRequest) -> Sequence[Sample]:
        """Samples for the named objects that have a value; absence is not an error."""
        ...

    async def fetch_external(self, request: ExternalBackendRequest) -> Sequence[ExternalSample]:
        """Series of an external metric matching the selector (possibly none)."""
        ...

    def ready(self) -> Readiness:
        """Whether the backend has synced enough to answer."""
        ...

    async def __aenter__(self) -> Self:
        """Start background work."""
        ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop background work."""
        ...


class ClusterView(Protocol):
    """Objects of the cluster by resource, with labels, and the REST mapping."""

    def mapping(self, resource: str) -> ResourceMapping | None:
        """Resolve a `{resource}` path segment (plural or singular, group-qualified)."""
        ...

    async def resolve(self, resource: str) -> ResourceMapping | None:
        """`mapping()` after refreshing what the cluster serves (new CRDs); rate-limited."""
        ...

    def list_objects(
        self, group_resource: GroupResource, namespace: str | None, selector: Selector
    ) -> Sequence[ObjectKey]:
        """Keys of the objects matching the selector, sorted; namespace None = all."""
        ...

    def ready(self) -> Readiness:
        """Whether the first list of every watched kind has synced."""
        ...
