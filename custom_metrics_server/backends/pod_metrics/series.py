"""The series kept per scrape target, and the values they give: gauges as they are, counters
as per-second rates over two scrapes.

`SeriesStore.apply(target, samples, now)` takes one successful scrape's kept samples
(`exposition.Kept`). Per series (metric name and labels):

* a **gauge** keeps its value and the time it was observed: the sample's own timestamp when
  the exposition gave one, else the scrape time `now`;
* a **counter** keeps its last raw value and time, and once a second one is observed later,
  the **rate** between them: `(v2 - v1) / (t2 - t1)`, or `v2 / (t2 - t1)` when `v2 < v1` (the
  counter was reset, by a restart of the process, so the increase is what it counted since),
  as Prometheus' `rate()` reads a reset. Its window is `t2 - t1`. A sample whose timestamp is
  not later than the last one is the same observation again (an exporter that stamps its
  samples and has not updated them) and changes nothing. A counter seen once has no rate yet
  (absent).

A series that a body repeats (the same name and labels twice) counts once, with its first
sample. A series missing from a successful scrape is gone at once (its pod stopped exporting it); a
target whose scrapes fail keeps its series until `stale_after` seconds after its last success,
then they are absent (and `expire` forgets them). Values that are not finite (NaN, Inf) are
kept but never served.

Memory is O(series kept): per series one small object holding its labels (a dict shared with
nothing), floats and the key; nothing per series that was not selected. `max_series` bounds
what one target may keep (the exposition reader stops there; the overflow is counted).

PURE: no I/O. Cost: `apply` O(samples); `series(target, name)` O(1).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from custom_metrics_server.backends.pod_metrics.exposition import Kept, Labels

__all__ = ["Series", "SeriesStore", "TargetSeries"]

_NAN: Final = math.nan
_EMPTY: Final[tuple[Series, ...]] = ()


class Series:
    """One kept series of one target."""

    __slots__ = ("counter", "labels", "raw", "raw_time", "time", "value", "window")

    def __init__(self, labels: Labels, counter: bool) -> None:
        self.labels: Mapping[str, str] = dict(labels)
        self.counter = counter
        #: the gauge's value, or the counter's rate (NaN until it has one)
        self.value = _NAN
        #: when `value` was observed (the later of the two observations of a rate)
        self.time = 0.0
        #: the span of the rate in seconds (0 for a gauge)
        self.window = 0.0
        #: a counter's last raw value and its time
        self.raw = _NAN
        self.raw_time = 0.0

    def observe(self, value: float, at: float) -> None:
        """One more observation (see the module)."""
        if not self.counter:
            self.value, self.time = value, at
            return
        if at <= self.raw_time:
            return  # the same observation again
        previous, since = self.raw, self.raw_time
        self.raw, self.raw_time = value, at
        if not (math.isfinite(previous) and math.isfinite(value)):  # first sample, or NaN/Inf
            return
        increase = value - previous if value >= previous else value
        span = at - since
        self.value, self.time, self.window = increase / span, at, span

    @property
    def ready(self) -> bool:
        """Whether it has a finite value to serve."""
        return math.isfinite(self.value)


@dataclass(slots=True)
class TargetSeries:
    """The series of one target and when it last answered."""

    by_key: dict[tuple[str, Labels], Series] = field(default_factory=dict)
    by_name: dict[str, tuple[Series, ...]] = field(default_factory=dict)
    #: scrape time of the last successful scrape
    seen: float = 0.0


class SeriesStore:
    """Kept series per target (by the target's name), with staleness."""

    def __init__(self, *, stale_after: float) -> None:
        if stale_after <= 0:
            raise ValueError("stale_after must be positive")
        self.stale_after = stale_after
        self._targets: dict[str, TargetSeries] = {}
        #: bumped when the set of metric names of some target changes (listings follow it)
        self.generation = 0
        self.dropped_series = 0  #: selected series beyond a target's bound, since start

    def __len__(self) -> int:
        return len(self._targets)

    def series_count(self) -> int:
        """Series kept in all. O(targets)."""
        return sum(len(target.by_key) for target in self._targets.values())

    def apply(self, target: str, samples: Iterable[Kept], now: float, *, overflow: int = 0) -> None:
        """One successful scrape of `target` at `now` (see the module). O(samples)."""
        entry = self._targets.get(target)
        if entry is None:
            entry = self._targets[target] = TargetSeries()
        old = entry.by_key
        fresh: dict[tuple[str, Labels], Series] = {}
        grouped: dict[str, list[Series]] = {}
        for name, labels, value, stamp, counter in samples:
            key = (name, labels)
            if key in fresh:
                continue  # the same series twice in one body: the first one counts
            series = old.get(key)
            if series is None or series.counter != counter:
                series = Series(labels, counter)
            series.observe(value, now if stamp is None else stamp)
            fresh[key] = series
            found = grouped.get(name)
            if found is None:
                grouped[name] = [series]
            else:
                found.append(series)
        entry.by_key = fresh
        names_before = entry.by_name.keys()
        if grouped.keys() != names_before:
            self.generation += 1
        entry.by_name = {name: tuple(found) for name, found in grouped.items()}
        entry.seen = now
        self.dropped_series += overflow

    def series(self, target: str, name: str, now: float) -> tuple[Series, ...]:
        """The series of metric `name` of `target`, none once it is stale. O(1)."""
        entry = self._targets.get(target)
        if entry is None or now - entry.seen > self.stale_after:
            return _EMPTY
        return entry.by_name.get(name, _EMPTY)

    def names(self, target: str, now: float) -> Collection[str]:
        """Metric names `target` exports now (none once stale)."""
        entry = self._targets.get(target)
        if entry is None or now - entry.seen > self.stale_after:
            return ()
        return entry.by_name.keys()

    def forget(self, target: str) -> None:
        """Drop a target (it is no longer scraped)."""
        if self._targets.pop(target, None) is not None:
            self.generation += 1

    def targets(self) -> list[str]:
        """Targets with series."""
        return list(self._targets)

    def expire(self, now: float) -> list[str]:
        """Forget the targets whose last success is older than `stale_after`. O(targets)."""
        stale = [
            name for name, entry in self._targets.items() if now - entry.seen > self.stale_after
        ]
        for name in stale:
            self.forget(name)
        return stale
