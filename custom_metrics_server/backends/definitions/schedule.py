"""The `schedule` source: a value by time window in a time zone, for scaling ahead of known
load (docs/metric-definitions.md, "Source `schedule`").

The first window that holds the current local time (its day among `days`, or any day; `start`
included, `end` excluded) gives its value; outside every window the `defaultValue`, or no value
(then the definition's `absent` decides). Local time is the instant in the definition's
`timeZone` (zoneinfo), so daylight saving time moves the windows with the wall clock.

PURE: no I/O. Cost of `values`: O(windows), at most 32.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

from custom_metrics_server.backends.definitions.source import SourceTools, Value
from custom_metrics_server.backends.definitions.spec import (
    Definition,
    Refused,
    ScheduleSpec,
    local_minutes,
)

__all__ = ["ScheduleSource", "make_schedule", "scheduled_value"]


def scheduled_value(schedule: ScheduleSpec, now: float) -> float | None:
    """The value at the instant `now` (see the module), or None. O(windows)."""
    weekday, minute = local_minutes(schedule.zone, now)
    for window in schedule.windows:
        if window.days and weekday not in window.days:
            continue
        if window.start <= minute < window.end:
            return window.value
    return schedule.default


class ScheduleSource:
    """A definition's schedule: computed on each read, nothing to refresh."""

    def __init__(self, schedule: ScheduleSpec) -> None:
        self.schedule = schedule

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

    def targets(self) -> int:
        """None: a schedule reads nothing."""
        return 0


def make_schedule(definition: Definition, tools: SourceTools) -> ScheduleSource:
    """The `SourceMaker` of `Schedule`."""
    if definition.schedule is None:
        raise Refused("InvalidSchedule", "spec.source.schedule is missing")
    return ScheduleSource(definition.schedule)
