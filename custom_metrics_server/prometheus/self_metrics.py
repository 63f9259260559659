"""The Prometheus backend's self-metrics: its own registry of request latencies, listing ages,
discovered metrics and configuration reloads, and the collector that forwards it.

This module owns :class:`BackendMetrics` (the ``custom_metrics_server_prometheus_*``
families, in a private registry so several backends never collide) and
:class:`ForwardingCollector` (how the server's ``/metrics`` reads such a registry, refreshing
computed gauges first). It must not query Prometheus.

Cost: O(1) per observation; a scrape is O(series in the private registry).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.registry import Collector

__all__ = ["BackendMetrics", "ForwardingCollector"]

_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10, 30)


class BackendMetrics:
    """The backend's own metrics, in a private registry the app forwards (`collector()`)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Histogram(
            "custom_metrics_server_prometheus_request_duration_seconds",
            "Calls to Prometheus servers by server, API (query/series) and outcome.",
            ["server", "api", "outcome"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        # The children of `requests` by label values: servers x APIs x outcomes.
        self._children: dict[tuple[str, str, str], Histogram] = {}
        self.listing_age = Gauge(
            "custom_metrics_server_prometheus_listing_age_seconds",
            "Seconds since the series listing of a server last fully succeeded.",
            ["server"],
            registry=self.registry,
        )
        self.discovered = Gauge(
            "custom_metrics_server_prometheus_discovered_metrics",
            "Metrics the rules yield from the last listings, by kind (custom/external).",
            ["kind"],
            registry=self.registry,
        )
        self.reloads = Counter(
            "custom_metrics_server_prometheus_config_reloads_total",
            "Configuration reloads by result (success/failure).",
            ["result"],
            registry=self.registry,
        )
        self.config_ok = Gauge(
            "custom_metrics_server_prometheus_config_last_reload_successful",
            "1 when the configuration file in force is the one on disk.",
            registry=self.registry,
        )
        self.config_ok.set(1)

    def observe(self, server: str, api: str, outcome: str, seconds: float) -> None:
        """Record one call to a Prometheus server.

        Cost: a dict lookup for the labelled child (`labels()` itself builds and checks a
        key under a lock, ~3 µs) and its `observe`."""
        key = (server, api, outcome)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.requests.labels(server, api, outcome)
        child.observe(seconds)


class ForwardingCollector(Collector):
    """Exposes a private registry through another registry, refreshed at each scrape."""

    def __init__(self, source: CollectorRegistry, refresh: Callable[[], None]) -> None:
        self._source = source
        self._refresh = refresh

    def collect(self) -> Any:
        """Refresh, then the private registry's families."""
        self._refresh()
        yield from self._source.collect()
