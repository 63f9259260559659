"""What every source of a `MetricDefinition` implements (`Source`), the values it gives
(`Value`), and how one is made (`SourceMaker`).

A source belongs to one definition and reads only that definition's namespace. The backend
(`backends.definitions.backend`) makes it from the `Definition` with the maker registered for
its `source.type` (`SourceMaker`, in the backend's `makers`), enters it (`async with`: start
background work, such as a scraper), calls `refresh()` once per `interval` (a source whose
values come from a request it makes: a query, an HTTP GET; a source that reads on its own
cadence, or computes, does nothing there), and reads `values(now)` on every request, from
memory (also before it is entered: a schedule serves from the event that made it). When the
definition changes or is deleted the backend exits it, if it entered it.

* `values(now)` never does I/O and never raises: what the source has now, each a `Value`.
  `External` serves the values as series (their `labels`); `Pods` the values with a `pod`
  (several values of one pod are summed); `Object` the values whose `workloads` hold the
  described workload, summed or averaged over its pods.
* `refresh()` raises `SourceError` with a message for the status's `lastError`; any other
  exception is a bug, logged with its traceback and counted as a failure the same way.
* `targets()`: how many endpoints or series the source reads now, for the platform's
  per-namespace limits (a definition over a limit is refused, its source closed). It may
  change only at a refresh or at a `next_change`.
* `next_change(now)`, optional: the first instant (at or after `now`) at which `values` may
  answer differently without a `refresh` (a schedule's next window edge, a polled read going
  stale), `math.inf` for never. The backend's tick reads a source's values again only after
  a refresh or at that instant (`changes_at`); a source without it, or whose values change on
  their own unannounced (the `pods` source's scraper), is read again at every tick.

A new source type plugs in as one module of this room: its class implementing `Source`, a
`SourceMaker` that reads `Definition.source_spec` (the CRD's member for the type, as written)
and raises `spec.Refused(reason, message)` for what it cannot serve (`InvalidQuery`,
`InvalidFormula`, `UnknownServer`, ...), and one line in `plugins.builtin_definitions.MAKERS`.

PURE: no I/O (the protocol only).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Protocol, Self

from custom_metrics_server.backends.definitions.policy import Limits
from custom_metrics_server.backends.definitions.spec import Definition
from custom_metrics_server.domain import GroupResource

__all__ = ["Source", "SourceError", "SourceMaker", "SourceTools", "Value", "changes_at"]


class SourceError(Exception):
    """A source's read failed; the message is for the definition's `lastError`."""


@dataclass(frozen=True, slots=True)
class Value:
    """One value a source has now: a series (`labels`), a pod's (`pod`), or both."""

    value: float
    #: when it was observed (seconds since the epoch)
    timestamp: float
    labels: Mapping[str, str] = field(default_factory=dict)
    #: the pod of the definition's namespace the value is of (Pods and Object serving)
    pod: str | None = None
    #: the workloads owning `pod`, as (resource, name), for Object serving
    workloads: frozenset[tuple[GroupResource, str]] = frozenset()
    #: a rate's window in seconds (counters), else None
    window: float | None = None


class Source(Protocol):
    """One definition's source (see the module)."""

    async def __aenter__(self) -> Self:
        """Start background work (may do nothing)."""
        ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop background work."""
        ...

    async def refresh(self) -> None:
        """Read the source once (called every `interval`); `SourceError` on failure."""
        ...

    def values(self, now: float) -> list[Value]:
        """The values now, from memory; never raises."""
        ...

    def targets(self) -> int:
        """Endpoints read now, counted against the namespace's `scrapeTargets` (a query's
        series are capped per query instead: `seriesPerQuery`)."""
        ...


def changes_at(source: object, now: float) -> float:
    """The source's `next_change(now)` (see the module), or `now` (every tick) without one."""
    found: Callable[[float], float] | None = getattr(source, "next_change", None)
    return now if found is None else found(now)


@dataclass(frozen=True, slots=True)
class SourceTools:
    """What a maker may use besides the definition: the API server client (for sources that
    read objects of the definition's namespace) and the shared watches of the namespaces'
    objects (for those that watch them), the values of other definitions of a namespace and
    the platform's External metrics there (formulas), the platform's settings of the source
    types (by type: `prometheus`, the configured servers; `http`, its caps) and the
    platform's limits of a namespace."""

    client: object
    #: (namespace, metric) -> that External metric's value now (the sum of its series), or None
    external_value: Callable[[str, str, float], float | None]
    #: (namespace, metric) -> whether a definition of that namespace serves the metric; a
    #: formula's input no definition serves is the platform's (`platform_value`)
    defines: Callable[[str, str], bool] = lambda _namespace, _metric: True
    #: (namespace, metric) -> the platform's External metric there, its series summed, or
    #: None (read through the server's engine; `SourceError` with the engine's reason)
    platform_value: Callable[[str, str], Awaitable[float | None]] | None = None
    settings: Mapping[str, object] = field(default_factory=dict)
    #: namespace -> the platform's limits there (`seriesPerQuery` for a prometheus source)
    namespace_limits: Callable[[str], Limits] = lambda _namespace: Limits()
    #: scraping: the pod scrape deadline and body cap
    scrape_timeout: float = 10.0
    max_body_bytes: int = 10 << 20
    #: the `kube.shared_watches.WatchGroup`: one list+watch per (namespace, collection), shared
    #: by every source (`watched.py`); `object` here as `client` is, this module being pure
    watches: object = None


#: Makes the source of a definition; raises `spec.Refused` for a spec it cannot serve.
SourceMaker = Callable[[Definition, SourceTools], Source]
