"""runtime.metric_vectors: the lean counters and histograms expose exactly what
prometheus_client's own Counter and Histogram expose for the same observations (but the
`_created` series), with Hypothesis choosing the observations."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from custom_metrics_server.runtime.metric_vectors import CounterVec, HistogramVec

BUCKETS = (0.0005, 0.001, 0.01, 0.1, 1.0, 2.5, 10.0, 60.0)
LABELS = st.tuples(st.sampled_from(["a", "b", 'q"uote']), st.sampled_from(["200", "404"]))


def _without_created(text: bytes) -> list[str]:
    return [line for line in text.decode().splitlines() if "_created" not in line]


@given(st.lists(st.tuples(LABELS, st.floats(0, 100, allow_nan=False)), max_size=40))
def test_the_histogram_exposition_is_prometheus_clients(
    observations: list[tuple[tuple[str, str], float]],
) -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    reference = Histogram(
        "lat_seconds", "Latency.", ["who", "code"], buckets=BUCKETS, registry=theirs
    )
    vector = HistogramVec("lat_seconds", "Latency.", ["who", "code"], BUCKETS)
    ours.register(vector)
    for labels, value in observations:
        reference.labels(*labels).observe(value)
        vector.child(labels).observe(value)
    assert sorted(_without_created(generate_latest(ours))) == sorted(
        _without_created(generate_latest(theirs))
    )


@given(st.lists(st.tuples(LABELS, st.integers(1, 5)), max_size=40))
def test_the_counter_exposition_is_prometheus_clients(
    increments: list[tuple[tuple[str, str], int]],
) -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    reference = Counter("req_total", "Requests.", ["who", "code"], registry=theirs)
    vector = CounterVec("req", "Requests.", ["who", "code"])
    ours.register(vector)
    for labels, amount in increments:
        reference.labels(*labels).inc(amount)
        vector.inc(labels, amount)
    assert sorted(_without_created(generate_latest(ours))) == sorted(
        _without_created(generate_latest(theirs))
    )


def test_a_value_on_a_bound_counts_in_that_bucket() -> None:
    vector = HistogramVec("x_seconds", "X.", [], (1.0, 2.0))
    vector.child(()).observe(1.0)
    vector.child(()).observe(2.5)
    assert vector.child(()).counts == [1, 0, 1]
