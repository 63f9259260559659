"""The kubelet scraper's self-metrics: a snapshot of its counters and the Prometheus collector
that serves it on ``/metrics``.

This module owns :class:`ScraperStats` (what :meth:`.kubelet_scraper.KubeletScraper.stats` returns)
and :class:`ScraperCollector` (the ``custom_metrics_server_kubelet_scrape*`` families, read
from ``stats()`` when ``/metrics`` is scraped). It must not change any state.

Cost: one ``stats()`` snapshot (O(nodes)) per ``/metrics`` scrape, O(failure reasons) more.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["ScraperCollector", "ScraperStats"]


@dataclass(frozen=True, slots=True)
class ScraperStats:
    """Counters and gauges for self-metrics (a snapshot)."""

    rounds_started: int
    rounds_completed: int
    rounds_overrun: int
    scrapes: int
    failures: int
    failures_by_reason: Mapping[str, int]
    deferred: int
    in_flight: int
    concurrency: int
    nodes: int
    nodes_failing: int
    nodes_backing_off: int
    nodes_expired: int
    last_round_seconds: float | None
    last_scrape_seconds: float | None


class _HasStats(Protocol):
    def stats(self) -> ScraperStats: ...


class ScraperCollector(Collector):
    """The scraper's self-metrics, read from `stats()` when `/metrics` is scraped."""

    def __init__(self, scraper: _HasStats) -> None:
        self._scraper = scraper

    def collect(self) -> Iterator[Metric]:
        """One family per figure; O(nodes) (the stats snapshot)."""
        stats = self._scraper.stats()
        prefix = "custom_metrics_server_kubelet_scrape"
        yield CounterMetricFamily(
            f"{prefix}_rounds", "Scrape rounds completed.", value=stats.rounds_completed
        )
        yield CounterMetricFamily(
            f"{prefix}_rounds_overrun",
            "Rounds that ran past the next round's start (the next one waited, never overlapped).",
            value=stats.rounds_overrun,
        )
        scrapes = CounterMetricFamily(
            f"{prefix}s", "Node scrapes by outcome (ok, or the failure reason).", labels=["outcome"]
        )
        scrapes.add_metric(["ok"], stats.scrapes - stats.failures - stats.in_flight)
        for reason, count in sorted(stats.failures_by_reason.items()):
            scrapes.add_metric([reason], count)
        yield scrapes
        yield CounterMetricFamily(
            f"{prefix}_deferred",
            "Node scrapes pushed to the next round (no free slot before the next tick).",
            value=stats.deferred,
        )
        yield GaugeMetricFamily(
            "custom_metrics_server_kubelet_scrapes_in_flight",
            "Node scrapes running now (bounded by --kubelet-scrape-concurrency).",
            value=stats.in_flight,
        )
        nodes = GaugeMetricFamily(
            "custom_metrics_server_kubelet_scrape_nodes",
            "Nodes by scrape state: listed, failing (last scrape failed), backing_off "
            "(failed twice or more in a row, tried less often).",
            labels=["state"],
        )
        nodes.add_metric(["listed"], stats.nodes)
        nodes.add_metric(["failing"], stats.nodes_failing)
        nodes.add_metric(["backing_off"], stats.nodes_backing_off)
        yield nodes
        if stats.last_round_seconds is not None:
            yield GaugeMetricFamily(
                f"{prefix}_last_round_duration_seconds",
                "Wall time of the last completed round.",
                value=stats.last_round_seconds,
            )
