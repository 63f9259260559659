"""Per-metric status: what each metric's requests got, and each backend's last failure.

The query layer records every metric request's outcome here (`found`, `not_found`, `error`,
`timeout`, and `zero` / `last_good` when a failure policy answered), with the time of the last
success and of the last error and the age of the newest sample served. The server exposes it as
self-metrics (`server.observability`, built at scrape time) and as the status page; the
explanation and the hints of a 404 read a backend's last failure from it.

Label cardinality is bounded: an entry is keyed by (API, resource, metric, backend) where the
metric is a name its backend lists (anything else is `other`, and an unknown resource is
`other` too), so request paths cannot mint label values. Names asked for that nobody lists are
kept apart, at most `RECENT_UNKNOWN` of them (the status page shows them; no metric does).

Cost: the request path holds its `MetricStats` (memoised with the routing decision) and does
a few attribute stores per request; `time.time()` once. NOT thread-safe: the event loop owns it.

PURE: no I/O.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from custom_metrics_server.domain import FailurePolicy

__all__ = [
    "OTHER",
    "OUTCOMES",
    "BackendFailure",
    "MetricStats",
    "MetricStatus",
]

#: The label value of a metric or resource nobody lists.
OTHER: Final = "other"
#: Request outcomes, in the order the exposition lists them.
OUTCOMES: Final = ("found", "not_found", "error", "timeout", "zero", "last_good")
#: Unknown metric names remembered for the status page (most recent first).
RECENT_UNKNOWN: Final = 32
#: Entries beyond this many are counted under `other` (a backend listing millions of names).
MAX_ENTRIES: Final = 50_000


class MetricStats:
    """One (API, resource, metric, backend)'s requests. Plain attributes: the request path
    increments them directly."""

    __slots__ = (
        "api",
        "backend",
        "error",
        "found",
        "last_error",
        "last_error_message",
        "last_good",
        "last_outcome",
        "last_success",
        "metric",
        "newest_age",
        "not_found",
        "policy",
        "resource",
        "timeout",
        "zero",
    )

    def __init__(self, api: str, resource: str, metric: str, backend: str) -> None:
        self.api = api
        self.resource = resource
        self.metric = metric
        self.backend = backend
        self.found = 0
        self.not_found = 0
        self.error = 0
        self.timeout = 0
        self.zero = 0
        self.last_good = 0
        #: Unix times (0: never)
        self.last_success = 0.0
        self.last_error = 0.0
        self.last_error_message = ""
        #: the age (s) of the newest sample of the last answer with values (-1: none yet)
        self.newest_age = -1.0
        self.last_outcome = ""
        #: the failure policy in force (None: errors and absences answered as such)
        self.policy: FailurePolicy | None = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        """(api, resource, metric, backend): the self-metrics' labels."""
        return (self.api, self.resource, self.metric, self.backend)

    def counts(self) -> dict[str, int]:
        """Requests by outcome."""
        return {outcome: getattr(self, outcome) for outcome in OUTCOMES}

    def requests(self) -> int:
        """Requests counted, every outcome."""
        return sum(getattr(self, outcome) for outcome in OUTCOMES)

    def failed(self, message: str, *, timeout: bool, now: float | None = None) -> None:
        """Count a failed request (`timeout`: the backend's deadline or the request's)."""
        if timeout:
            self.timeout += 1
            self.last_outcome = "timeout"
        else:
            self.error += 1
            self.last_outcome = "error"
        self.last_error = time.time() if now is None else now
        self.last_error_message = message


@dataclass(frozen=True, slots=True)
class BackendFailure:
    """A backend's last failed call: when, what, and which metric."""

    at: float
    message: str
    metric: str


class MetricStatus:
    """Every metric's `MetricStats`, the unknown names recently asked for, and each backend's
    last failure (see the module)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._entries: dict[tuple[str, str, str, str], MetricStats] = {}
        self._unknown: dict[tuple[str, str, str], list[float]] = {}
        self.backend_failures: dict[str, BackendFailure] = {}

    def entry(self, api: str, resource: str, metric: str, backend: str) -> MetricStats:
        """The stats of one label set (made on first use; beyond `MAX_ENTRIES` the metric is
        counted as `other`). The caller passes a listed metric name or `OTHER`."""
        key = (api, resource, metric, backend)
        found = self._entries.get(key)
        if found is None:
            if len(self._entries) >= MAX_ENTRIES and metric != OTHER:
                return self.entry(api, resource, OTHER, backend)
            found = self._entries[key] = MetricStats(api, resource, metric, backend)
        return found

    def entries(self) -> list[MetricStats]:
        """Every entry, in the order they were first used."""
        return list(self._entries.values())

    def find(self, api: str, resource: str, metric: str, backend: str) -> MetricStats | None:
        """The entry of a label set, if it was ever used."""
        return self._entries.get((api, resource, metric, backend))

    def unknown(self, api: str, resource: str, metric: str) -> None:
        """A name nobody serves was asked for (kept for the status page, bounded)."""
        key = (api, resource, metric)
        seen = self._unknown.pop(key, None)
        now = self._clock()
        if seen is None:
            seen = [0, now]
            if len(self._unknown) >= RECENT_UNKNOWN:
                del self._unknown[next(iter(self._unknown))]
        seen[0] += 1
        seen[1] = now
        self._unknown[key] = seen  # most recent last

    def recent_unknown(self) -> Iterator[tuple[str, str, str, int, float]]:
        """(api, resource, metric, times asked, last asked) of the names nobody serves, most
        recent first."""
        for (api, resource, metric), (count, last) in reversed(list(self._unknown.items())):
            yield api, resource, metric, int(count), last

    def backend_failed(self, backend: str, message: str, metric: str) -> None:
        """Remember a backend's failed call (the error path only)."""
        self.backend_failures[backend] = BackendFailure(self._clock(), message, metric)

    def forget_backends(self, keep: set[str]) -> None:
        """Drop the failures of backends no longer served (a reload removed them)."""
        for name in list(self.backend_failures):
            if name not in keep:
                del self.backend_failures[name]
