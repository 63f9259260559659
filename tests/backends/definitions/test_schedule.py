"""The schedule source: windows in a time zone, days, the default, and daylight saving time."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from custom_metrics_server.backends.definitions.schedule import ScheduleSource, scheduled_value
from custom_metrics_server.backends.definitions.spec import ScheduleSpec, Window

PARIS = ZoneInfo("Europe/Paris")
OFFICE = ScheduleSpec(
    PARIS,
    (
        Window(frozenset({0, 1, 2, 3, 4}), 8 * 60, 19 * 60, 10.0),  # Mon-Fri 08:00-19:00
        Window(frozenset(), 19 * 60, 24 * 60, 2.5),  # every day 19:00-24:00
    ),
    1.0,
)


def at(text: str, zone: ZoneInfo = PARIS) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=zone).timestamp()


@pytest.mark.parametrize(
    ("when", "value"),
    [
        ("2026-12-07 08:00", 10.0),  # a Monday: the start is included
        ("2026-12-07 18:59", 10.0),
        ("2026-12-07 19:00", 2.5),  # the end is excluded; the next window starts
        ("2026-12-07 23:59", 2.5),
        ("2026-12-08 00:00", 1.0),  # past 24:00: the default
        ("2026-12-07 07:59", 1.0),
        ("2026-12-12 10:00", 1.0),  # a Saturday: the weekday window does not hold
        ("2026-12-12 20:00", 2.5),  # but the every-day one does
    ],
)
def test_the_first_window_holding_the_local_time_gives_the_value(when: str, value: float) -> None:
    assert scheduled_value(OFFICE, at(when)) == value


def test_the_time_zone_decides_not_the_servers_clock() -> None:
    # 07:30 UTC on a Monday in winter is 08:30 in Paris: inside the window.
    assert scheduled_value(OFFICE, at("2026-12-07 07:30", ZoneInfo("UTC"))) == 10.0
    # In summer Paris is UTC+2: 06:30 UTC is 08:30 local.
    assert scheduled_value(OFFICE, at("2026-06-01 06:30", ZoneInfo("UTC"))) == 10.0
    assert scheduled_value(OFFICE, at("2026-06-01 05:30", ZoneInfo("UTC"))) == 1.0


def test_without_a_default_outside_every_window_there_is_no_value() -> None:
    bare = ScheduleSpec(PARIS, OFFICE.windows, None)
    source = ScheduleSource(bare)
    assert source.values(at("2026-12-08 03:00")) == []
    values = source.values(at("2026-12-08 09:00"))
    assert [(value.value, value.labels, value.pod) for value in values] == [(10.0, {}, None)]
    assert source.targets() == 0
