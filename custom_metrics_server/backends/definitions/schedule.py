"""The `schedule` source: a value by time window in a time zone, for scaling ahead of known
load (docs/metric-definitions.md, "Source `schedule`").

The first window that holds the current local time (its day among `days`, or any day; `start`
included, `end` excluded) gives its value; outside every window the `defaultValue`, or no value
(then the definition's `absent` decides). Local time is the instant in the definition's
`timeZone` (zoneinfo), so daylight saving time moves the windows with the wall clock.

The value changes with the clock alone, so the source says when it may next change
(`next_change`, the backend's tick records it again then): the next start or end of a window in
local time, or the next change of the zone's UTC offset if that comes first, at most a day ahead.

PURE: no I/O. Cost of `values`: O(windows), at most 32; of `next_change`: O(log edges) (the
edges, at most 2 x 7 x 32, sorted once per source).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from datetime import datetime
from types import TracebackType
from typing import Final, Self

from custom_metrics_server.backends.definitions.source import SourceTools, Value
from custom_metrics_server.backends.definitions.spec import (
    Definition,
    Refused,
    ScheduleSpec,
    local_minutes,
)

__all__ = ["ScheduleSource", "make_schedule", "next_change", "scheduled_value", "window_edges"]

_DAY: Final = 1440
_WEEK: Final = 7 * _DAY
#: Seconds ahead at most for `next_change` (an offset change further away is seen then).
HORIZON: Final = 86_400.0
#: `next_change` answers this much early: float rounding must never make it late.
_EARLY: Final = 1e-3


def scheduled_value(schedule: ScheduleSpec, now: float) -> float | None:
    """The value at the instant `now` (see the module), or None. O(windows)."""
    weekday, minute = local_minutes(schedule.zone, now)
    for window in schedule.windows:
        if window.days and weekday not in window.days:
            continue
        if window.start <= minute < window.end:
            return window.value
    return schedule.default


def window_edges(schedule: ScheduleSpec) -> tuple[int, ...]:
    """The minutes of the week (0: Monday 00:00 local) at which a window starts or ends,
    sorted: the only instants at which `scheduled_value` may change, the offset aside."""
    edges: set[int] = set()
    for window in schedule.windows:
        for day in window.days or range(7):
            edges.add((day * _DAY + window.start) % _WEEK)
            edges.add((day * _DAY + window.end) % _WEEK)
    return tuple(sorted(edges))


def next_change(schedule: ScheduleSpec, edges: tuple[int, ...], now: float) -> float:
    """The first instant after `now` at which `scheduled_value` may differ (a little early,
    never late): the next of `edges` (`window_edges`) in local time, or the next change of
    the zone's UTC offset before it (found to the second), at most `HORIZON` ahead;
    `math.inf` without windows. O(log edges)."""
    if not edges:
        return math.inf
    zone = schedule.zone
    local = datetime.fromtimestamp(now, zone)
    current = local.weekday() * _DAY + local.hour * 60 + local.minute
    index = bisect_right(edges, current)
    ahead = (edges[index] if index < len(edges) else edges[0] + _WEEK) - current
    minute_start = now - local.second - local.microsecond / 1e6
    candidate = min(minute_start + ahead * 60, now + HORIZON) - _EARLY
    offset = local.utcoffset()
    if datetime.fromtimestamp(candidate, zone).utcoffset() == offset:
        return candidate
    # Daylight saving time (or a zone's new offset) before it: the windows move then.
    low, high = now, candidate
    while high - low > 1.0:
        middle = (low + high) / 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == offset:
            low = middle
        else:
            high = middle
    return high


class ScheduleSource:
    """A definition's schedule: computed on each read, nothing to refresh."""

    def __init__(self, schedule: ScheduleSpec) -> None:
        self.schedule = schedule
        self.edges = window_edges(schedule)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    async def refresh(self) -> None:
        """Nothing to read."""

    def values(self, now: float) -> list[Value]:
        """One series (no labels) while a window or the default holds, else none."""
        found = scheduled_value(self.schedule, now)
        return [] if found is None else [Value(found, now)]

    def next_change(self, now: float) -> float:
        """The next window edge or offset change (`next_change`). O(log edges)."""
        return next_change(self.schedule, self.edges, now)

    def targets(self) -> int:
        """None: a schedule reads nothing."""
        return 0


def make_schedule(definition: Definition, tools: SourceTools) -> ScheduleSource:
    """The `SourceMaker` of `Schedule`."""
    if definition.schedule is None:
        raise Refused("InvalidSchedule", "spec.source.schedule is missing")
    return ScheduleSource(definition.schedule)
