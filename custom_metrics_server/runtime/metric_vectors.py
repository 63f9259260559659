"""Counters and histograms for the request path: plain integers on the hot path, Prometheus
families built only when `/metrics` is scraped.

prometheus_client's metrics take a lock and walk a few Python layers per increment, a
noticeable share of a single-object request's three observations (docs/performance.md, "The
house move and the handler chain (issue 12)"). These record into dicts and
lists of numbers instead, and are registered as ordinary collectors, so the exposition is the
same (names, help, types, labels, cumulative `le` buckets, `_sum`, `_count`; no `_created`
series). They are NOT thread-safe: every observation must happen on the event loop's thread,
as every request's does (a scrape runs there too).

Cost: `CounterVec.inc` one dict lookup and one store; `Histogram.observe` one `bisect` over
the bucket bounds and two stores. A scrape is O(label sets x buckets).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = ["CounterVec", "Histogram", "HistogramVec"]

Labels = tuple[str, ...]


def _go_float(value: float) -> str:
    """A bucket bound as the exposition writes `le` (Go's float formatting)."""
    text: str = floatToGoString(value)  # type: ignore[no-untyped-call]
    return text


class CounterVec(Collector):
    """A counter per label set (`name` without `_total`; the exposition adds it)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.values: dict[Labels, float] = {}

    def inc(self, labels: Labels, amount: float = 1.0) -> None:
        """Add `amount` to the counter of `labels` (in `labelnames` order). O(1)."""
        values = self.values
        values[labels] = values.get(labels, 0.0) + amount

    def collect(self) -> Iterator[Metric]:
        """One family with a sample per label set."""
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, value in list(self.values.items()):
            family.add_metric(list(labels), value)
        yield family


class Histogram:
    """One label set's buckets (counts per bound, not cumulative), sum and count."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.total = 0.0

    def observe(self, value: float) -> None:
        """Count `value` in the first bucket whose bound is >= it (Prometheus' `le`). O(log
        buckets)."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value


class HistogramVec(Collector):
    """A histogram per label set, with fixed bucket bounds."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = tuple(float(bound) for bound in buckets)
        self._les = [_go_float(bound) for bound in self.bounds] + ["+Inf"]
        self.children: dict[Labels, Histogram] = {}

    def child(self, labels: Labels) -> Histogram:
        """The histogram of `labels` (made on first use); keep it to observe in O(1)."""
        found = self.children.get(labels)
        if found is None:
            found = self.children[labels] = Histogram(self.bounds)
        return found

    def collect(self) -> Iterator[Metric]:
        """One family: cumulative buckets, `_sum` and `_count` per label set."""
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, histogram in list(self.children.items()):
            running = 0
            buckets = []
            for le, count in zip(self._les, histogram.counts, strict=True):
                running += count
                buckets.append((le, float(running)))
            family.add_metric(list(labels), buckets, histogram.total)
        yield family
