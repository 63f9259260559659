"""The pod-metrics series store (`backends/pod_metrics/series.py`): gauges as they are, counters
as rates over two scrapes (resets, explicit timestamps, repeated observations), series that
vanish, and staleness."""

from __future__ import annotations

import math

import pytest

from custom_metrics_server.backends.pod_metrics.exposition import Kept
from custom_metrics_server.backends.pod_metrics.series import SeriesStore

T0 = 1_700_000_000.0
GET = (("method", "GET"),)
POST = (("method", "POST"),)


def counter(value: float, labels: tuple = GET, at: float | None = None) -> Kept:
    return Kept("requests_total", labels, value, at, True)


def gauge(value: float, name: str = "queue_depth", at: float | None = None) -> Kept:
    return Kept(name, (), value, at, False)


def values(store: SeriesStore, name: str, now: float, target: str = "t") -> list[tuple]:
    return [
        (dict(s.labels), s.value, s.time, s.window)
        for s in store.series(target, name, now)
        if s.ready
    ]


def test_a_gauge_is_its_value_at_the_scrape_or_its_own_time() -> None:
    store = SeriesStore(stale_after=45)
    store.apply("t", [gauge(7), gauge(3, "other", at=T0 - 5)], T0)
    assert values(store, "queue_depth", T0) == [({}, 7.0, T0, 0.0)]
    assert values(store, "other", T0) == [({}, 3.0, T0 - 5, 0.0)]
    store.apply("t", [gauge(9), gauge(4, "other", at=T0 + 10)], T0 + 15)
    assert values(store, "queue_depth", T0 + 15) == [({}, 9.0, T0 + 15, 0.0)]
    assert values(store, "other", T0 + 15) == [({}, 4.0, T0 + 10, 0.0)]


def test_a_counter_has_no_value_until_two_scrapes_then_the_rate_between_them() -> None:
    store = SeriesStore(stale_after=45)
    store.apply("t", [counter(100)], T0)
    assert values(store, "requests_total", T0) == []
    assert store.names("t", T0) == {"requests_total"}  # listed already
    store.apply("t", [counter(250)], T0 + 15)
    assert values(store, "requests_total", T0 + 15) == [({"method": "GET"}, 10.0, T0 + 15, 15.0)]
    store.apply("t", [counter(280)], T0 + 25)
    assert values(store, "requests_total", T0 + 25) == [({"method": "GET"}, 3.0, T0 + 25, 10.0)]


def test_a_counter_reset_counts_from_zero() -> None:
    store = SeriesStore(stale_after=45)
    store.apply("t", [counter(1_000)], T0)
    store.apply("t", [counter(30)], T0 + 10)  # the process restarted and counted 30 since
    assert values(store, "requests_total", T0 + 10)[0][1] == 3.0
    store.apply("t", [counter(90)], T0 + 20)
    assert values(store, "requests_total", T0 + 20)[0][1] == 6.0


def test_explicit_timestamps_make_the_window_and_a_repeated_observation_changes_nothing() -> None:
    store = SeriesStore(stale_after=45)
    store.apply("t", [counter(10, at=T0)], T0 + 0.3)
    store.apply("t", [counter(40, at=T0 + 12)], T0 + 15.9)  # scraped late: the stamp counts
    assert values(store, "requests_total", T0 + 16) == [({"method": "GET"}, 2.5, T0 + 12, 12.0)]
    # The exporter did not update: same stamp, no new observation (not a zero rate).
    store.apply("t", [counter(40, at=T0 + 12)], T0 + 30)
    assert values(store, "requests_total", T0 + 30) == [({"method": "GET"}, 2.5, T0 + 12, 12.0)]
    # An older stamp is ignored too.
    store.apply("t", [counter(5, at=T0 + 1)], T0 + 31)
    assert values(store, "requests_total", T0 + 31)[0][1] == 2.5


def test_series_are_kept_per_label_set_and_vanish_with_the_body() -> None:
    store = SeriesStore(stale_after=45)
    store.apply("t", [counter(0), counter(0, POST), gauge(1)], T0)
    store.apply("t", [counter(30), counter(60, POST), gauge(2)], T0 + 10)
    assert sorted(v[1] for v in values(store, "requests_total", T0 + 10)) == [3.0, 6.0]
    generation = store.generation
    store.apply("t", [counter(60)], T0 + 20)  # POST and the gauge are gone from the body
    assert values(store, "requests_total", T0 + 20) == [({"method": "GET"}, 3.0, T0 + 20, 10.0)]
    assert values(store, "queue_depth", T0 + 20) == []
    assert store.names("t", T0 + 20) == {"requests_total"}
    assert store.generation > generation  # the listing follows
    assert store.series_count() == 1


def test_a_series_that_changes_kind_starts_over() -> None:
    store = SeriesStore(stale_after=45)
    store.apply("t", [Kept("x", (), 5, None, False)], T0)
    store.apply("t", [Kept("x", (), 8, None, True)], T0 + 10)  # now typed a counter
    assert values(store, "x", T0 + 10) == []  # a first counter sample


def test_non_finite_values_are_kept_but_never_served() -> None:
    store = SeriesStore(stale_after=45)
    store.apply("t", [gauge(math.nan), counter(math.inf)], T0)
    store.apply("t", [gauge(math.nan), counter(5)], T0 + 10)
    assert values(store, "queue_depth", T0 + 10) == []
    assert values(store, "requests_total", T0 + 10) == []  # no rate from +Inf
    store.apply("t", [gauge(1), counter(25)], T0 + 20)
    assert values(store, "queue_depth", T0 + 20)[0][1] == 1.0
    assert values(store, "requests_total", T0 + 20)[0][1] == 2.0


def test_a_silent_target_is_absent_after_stale_after_and_then_forgotten() -> None:
    store = SeriesStore(stale_after=45)
    store.apply("t", [counter(0), gauge(1)], T0)
    store.apply("t", [counter(150), gauge(1)], T0 + 15)
    # Its scrapes fail from now on: nothing is applied.
    assert values(store, "requests_total", T0 + 60)[0][1] == 10.0
    assert values(store, "requests_total", T0 + 60.5) == []
    assert store.names("t", T0 + 60.5) == ()
    assert store.expire(T0 + 59) == []
    assert store.expire(T0 + 61) == ["t"]
    assert store.targets() == []


@pytest.mark.parametrize("stale_after", [0, -1])
def test_stale_after_must_be_positive(stale_after: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        SeriesStore(stale_after=stale_after)


def test_a_series_twice_in_one_body_is_kept_once_with_its_first_value() -> None:
    store = SeriesStore(stale_after=45)
    store.apply("t", [gauge(7), gauge(8)], T0)
    assert values(store, "queue_depth", T0) == [({}, 7.0, T0, 0.0)]
    assert store.series_count() == 1
