"""What a plugin implements, split by capability, so a backend has only the methods it needs.

A backend object is any object with one or both of the source capabilities and, optionally,
a lifecycle and a readiness check. Nothing is inherited; the server looks for the methods when
it loads the plugin (a listing method without its fetch, or neither source, is a start-up error
naming the plugin) and adapts the object to its internal, full protocol.

* `CustomMetricsSource`: `list_metrics()` + `fetch(request)`: values of objects
  (custom.metrics.k8s.io).
* `ExternalMetricsSource`: `list_external_metrics()` + `fetch_external(request)`: series not
  tied to an object (external.metrics.k8s.io).
* `Lifecycle`: `async with backend:` around the time it serves (start connections, background
  work); without it, nothing is started or stopped.
* `ReadinessCheck`: `ready()`; without it, the backend is ready once started.
* `Replicable` (contract 1.1): `replicable = True` says one instance per worker process of
  `serve --workers N` is safe (no repeated watches or scrapes that matter, answers that agree
  across instances); without it, `serve --workers N` serves from one process.

`fetch` and `fetch_external` may be `async def` (run on the server's event loop: never block
in them) or plain `def` (run in the backend's own bounded thread pool: blocking drivers are
fine; see docs/backends.md, "Synchronous backends"). Listings and `ready()` are always plain
functions that answer from memory: the server calls them on its event loop.

PURE: typing only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Collection, Iterable
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalSample,
    MetricInfo,
    Readiness,
    Sample,
)

__all__ = [
    "CustomMetricsSource",
    "ExternalMetricsSource",
    "Lifecycle",
    "ReadinessCheck",
    "Replicable",
]


@runtime_checkable
class CustomMetricsSource(Protocol):
    """Values of metrics of Kubernetes objects (`custom.metrics.k8s.io`)."""

    def list_metrics(self) -> Collection[MetricInfo]:
        """The (resource, metric) pairs served, from memory, fast, never raising."""
        ...

    def fetch(self, request: BackendRequest) -> Iterable[Sample] | Awaitable[Iterable[Sample]]:
        """At most one sample per object of `request.objects` that has a value; an object
        without one is left out (absence is not an error). `async def` or plain `def`."""
        ...


@runtime_checkable
class ExternalMetricsSource(Protocol):
    """Series of metrics not tied to an object (`external.metrics.k8s.io`)."""

    def list_external_metrics(self) -> Collection[str]:
        """The external metric names served, from memory, fast, never raising."""
        ...

    def fetch_external(
        self, request: ExternalBackendRequest
    ) -> Iterable[ExternalSample] | Awaitable[Iterable[ExternalSample]]:
        """The series of `request.metric` in `request.namespace` matching
        `request.metric_selector` (possibly none). `async def` or plain `def`."""
        ...


@runtime_checkable
class Lifecycle(Protocol):
    """Optional: started before the first request, stopped at shutdown or when a reload of
    the backends file drops or changes the backend."""

    async def __aenter__(self) -> Self:
        """Start (open pools, start background tasks). Raising fails the start-up."""
        ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop everything `__aenter__` started."""
        ...


@runtime_checkable
class ReadinessCheck(Protocol):
    """Optional: whether the backend can answer yet (shown by `/readyz?verbose`)."""

    def ready(self) -> Readiness:
        """From memory, fast, never raising; `reason` says what is awaited (or degraded)."""
        ...


@runtime_checkable
class Replicable(Protocol):
    """Optional (contract 1.1): whether `serve --workers N` may run one instance of this
    backend in each of its N worker processes, every worker then answering by itself.

    Say `True` only when N instances are as good as one: the answers agree across instances
    (the same source, no per-instance state a caller could see differ), and what each
    instance does in the background (polls, discovery, connections) costs the sources
    little when repeated N times. A backend that watches or scrapes a cluster, or keeps state
    built from its own traffic, says `False` (the default, also when the attribute is
    missing): `serve --workers N` then serves from one process, as without the flag
    (docs/operations.md, "Workers"). Read once, when the backend is made.
    """

    replicable: bool
