"""The kubelet scraper's self-metrics: the Prometheus collector that serves its counters on
``/metrics``.

This module owns :class:`ScraperCollector` (the ``custom_metrics_server_kubelet_scrape*``
families, read from :meth:`.kubelet_scraper.KubeletScraper.stats`, the scraping core's
:class:`~.core.ScrapeStats`, when ``/metrics`` is scraped). It must not change any state.

Cost: one ``stats()`` snapshot (O(nodes)) per ``/metrics`` scrape, O(failure reasons) more.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from custom_metrics_server.scraping.core import ScrapeStats

__all__ = ["ScraperCollector"]


class _HasStats(Protocol):
    def stats(self) -> ScrapeStats: ...


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
        nodes.add_metric(["listed"], stats.targets)
        nodes.add_metric(["failing"], stats.targets_failing)
        nodes.add_metric(["backing_off"], stats.targets_backing_off)
        yield nodes
        if stats.last_round_seconds is not None:
            yield GaugeMetricFamily(
                f"{prefix}_last_round_duration_seconds",
                "Wall time of the last completed round.",
                value=stats.last_round_seconds,
            )
