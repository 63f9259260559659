"""The server's own Prometheus metrics.

One `ServerMetrics` per app, each with its own registry (tests build many apps in one process).
The per-request metrics are `runtime.metric_vectors` (plain numbers, families built at scrape
time), so a request costs two dictionary lookups, one increment and one bisect per metric.
The `resource` label only takes resources the cluster knows (else `other`): request paths are
attacker-controlled and must not mint label values.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Final

from prometheus_client import (
    CollectorRegistry,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from custom_metrics_server.query.metric_status import OUTCOMES, MetricStatus
from custom_metrics_server.runtime.metric_vectors import CounterVec, HistogramVec
from custom_metrics_server.runtime.stalls import GcPauses, StallSampler, stall_threshold_from_env

EXPOSITION_CONTENT_TYPE: Final = CONTENT_TYPE_LATEST

_LATENCY_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
_FRESHNESS_BUCKETS: Final = (1, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600)
_LAG_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
#: How often the event loop's lag is sampled (s), and from what lag a warning is logged.
LAG_SAMPLE_INTERVAL: Final = 0.05
LAG_WARNING: Final = 1.0

logger = logging.getLogger(__name__)


class ServerMetrics:
    """Request, backend and freshness metrics of one server."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # The per-request metrics are lean vectors (plain numbers on the hot path).
        self._requests = CounterVec(
            "apiserver_request",
            "Requests by API group, version, resource, verb and HTTP code.",
            ["group", "version", "resource", "verb", "code"],
        )
        self._latency = HistogramVec(
            "apiserver_request_duration_seconds",
            "Request latency by API group, version, resource and verb.",
            ["group", "version", "resource", "verb"],
            _LATENCY_BUCKETS,
        )
        self._backend = HistogramVec(
            "custom_metrics_server_backend_fetch_duration_seconds",
            "Time spent in a backend's fetch, by backend and outcome.",
            ["backend", "outcome"],
            _LATENCY_BUCKETS,
        )
        self._freshness = HistogramVec(
            "metrics_apiserver_metric_freshness_seconds",
            "Age of the oldest value in each metric response, by API group.",
            ["group"],
            _FRESHNESS_BUCKETS,
        )
        for vector in (self._requests, self._latency, self._backend, self._freshness):
            self.registry.register(vector)
        self._loop_lag = Histogram(
            "custom_metrics_server_event_loop_lag_seconds",
            "How late the event loop ran a timer due now, sampled every 50 ms: every request "
            "and health probe waits that long too.",
            buckets=_LAG_BUCKETS,
            registry=self.registry,
        )

        self._gc_pause = Histogram(
            "custom_metrics_server_gc_pause_seconds",
            "Pauses of the cyclic garbage collector by generation: the event loop is stalled "
            "for as long (gen 2 walks every object not frozen after the last relist).",
            ["generation"],
            buckets=_LAG_BUCKETS,
            registry=self.registry,
        )
        self._gc_children = [self._gc_pause.labels(str(g)) for g in range(3)]
        self.gc_pauses = GcPauses(
            lambda generation, pause: self._gc_children[generation].observe(pause)
        )

    def track_server(self, *, inflight: Callable[[], int], deadlines: Callable[[], int]) -> None:
        """Gauges read when `/metrics` is scraped (never per request): requests in flight
        (upstream's name), requests waiting for a deadline, tasks alive on the event loop, and
        the process' `process_*` metrics (open fds, RSS, CPU). Together they show a task,
        request or connection leak."""
        Gauge(
            "apiserver_current_inflight_requests",
            "Requests being served now that count against --max-requests-inflight.",
            ["request_kind"],
            registry=self.registry,
        ).labels("readOnly").set_function(inflight)
        Gauge(
            "custom_metrics_server_request_deadlines",
            "Requests registered with the request-deadline sweeper.",
            registry=self.registry,
        ).set_function(deadlines)
        Gauge(
            "custom_metrics_server_asyncio_tasks",
            "Tasks alive on the server's event loop (the scrape's own included).",
            registry=self.registry,
        ).set_function(_running_tasks)
        ProcessCollector(registry=self.registry)

    def track_collectors(self, collectors: Iterable[Collector]) -> None:
        """Expose collectors made elsewhere (the webhooks' call metrics)."""
        for collector in collectors:
            self.registry.register(collector)

    def track_metric_status(self, status: MetricStatus) -> None:
        """The per-metric self-metrics, built from `status` when `/metrics` is scraped."""
        self.registry.register(MetricStatusCollector(status))

    def observe_request(
        self, *, group: str, version: str, resource: str, verb: str, code: int, seconds: float
    ) -> None:
        """Count one request and record its latency. O(1)."""
        self._requests.inc((group, version, resource, verb, str(code)))
        self._latency.child((group, version, resource, verb)).observe(seconds)

    def observe_backend(self, backend: str, outcome: str, seconds: float) -> None:
        """Record one backend fetch. O(1)."""
        self._backend.child((backend, outcome)).observe(seconds)

    def observe_freshness(self, group: str, age_seconds: float) -> None:
        """Record the age of the oldest value sent in one response. O(1)."""
        self._freshness.child((group,)).observe(max(0.0, age_seconds))

    async def watch_loop_lag(self, interval: float = LAG_SAMPLE_INTERVAL) -> None:
        """Sample the event loop's lag forever (until cancelled): sleep `interval`, observe
        how late the wake-up came. A warning (at most one a minute) when it exceeds
        `LAG_WARNING`: something holds the loop and every request waits for it."""
        loop = asyncio.get_running_loop()
        self.gc_pauses.install()
        threshold = stall_threshold_from_env()
        sampler = StallSampler(threshold, self.gc_pauses) if threshold else None
        if sampler is not None:
            sampler.start()
        try:
            await self._sample_lag(loop, interval)
        finally:
            self.gc_pauses.uninstall()
            if sampler is not None:
                sampler.stop()

    async def _sample_lag(self, loop: asyncio.AbstractEventLoop, interval: float) -> None:
        warned = float("-inf")
        while True:
            due = loop.time() + interval
            await asyncio.sleep(interval)
            now = loop.time()
            lag = max(0.0, now - due)
            self._loop_lag.observe(lag)
            if lag >= LAG_WARNING and now - warned >= 60:
                warned = now
                logger.warning(
                    "the event loop was blocked for %.2fs: requests and health probes waited "
                    "as long (see custom_metrics_server_event_loop_lag_seconds)",
                    lag,
                )

    def exposition(self) -> bytes:
        """The Prometheus text exposition of this registry."""
        return generate_latest(self.registry)


_METRIC_LABELS: Final = ("api", "resource", "metric", "backend")


class MetricStatusCollector(Collector):
    """Per metric and backend (labels `api`, `resource`, `metric`, `backend`; a metric its
    backend does not list is `other`, and so is an unknown resource):

    * `custom_metrics_server_metric_requests_total{outcome}`: found, not_found, error,
      timeout, and zero / last_good when the failure policy answered;
    * `custom_metrics_server_metric_last_success_timestamp_seconds` and
      `..._last_error_timestamp_seconds` (Unix time; absent until it happened);
    * `custom_metrics_server_metric_newest_sample_age_seconds`: the age of the newest value in
      the last answer that had values, when it was served;
    * `custom_metrics_server_metric_failure_policy_info{absent, failure, max_age}`: 1 for
      metrics with a failure policy.

    Read at scrape time only: the request path increments plain attributes."""

    def __init__(self, status: MetricStatus) -> None:
        self.status = status

    def collect(self) -> Iterator[Metric]:
        """The families above."""
        requests = CounterMetricFamily(
            "custom_metrics_server_metric_requests",
            "Metric requests by API, resource, metric, backend and outcome (a metric its "
            "backend does not list is `other`).",
            labels=[*_METRIC_LABELS, "outcome"],
        )
        success = GaugeMetricFamily(
            "custom_metrics_server_metric_last_success_timestamp_seconds",
            "When the metric last answered with values (Unix time).",
            labels=_METRIC_LABELS,
        )
        error = GaugeMetricFamily(
            "custom_metrics_server_metric_last_error_timestamp_seconds",
            "When the metric's backend last failed (an error or a timeout, Unix time).",
            labels=_METRIC_LABELS,
        )
        age = GaugeMetricFamily(
            "custom_metrics_server_metric_newest_sample_age_seconds",
            "Age of the newest value of the last answer with values, when it was served.",
            labels=_METRIC_LABELS,
        )
        policy = GaugeMetricFamily(
            "custom_metrics_server_metric_failure_policy_info",
            "1 for each metric with a failure policy: what absence and failure answer, and "
            "the age after which a value is absent.",
            labels=[*_METRIC_LABELS, "absent", "failure", "max_age"],
        )
        for stats in self.status.entries():
            labels = list(stats.key)
            for outcome in OUTCOMES:
                requests.add_metric([*labels, outcome], getattr(stats, outcome))
            if stats.last_success:
                success.add_metric(labels, stats.last_success)
            if stats.last_error:
                error.add_metric(labels, stats.last_error)
            if stats.newest_age >= 0:
                age.add_metric(labels, stats.newest_age)
            found = stats.policy
            if found is not None:
                max_age = "" if found.max_age is None else f"{found.max_age:g}"
                policy.add_metric([*labels, found.absent, found.failure, max_age], 1)
        yield from (requests, success, error, age, policy)


def _running_tasks() -> int:
    try:
        return len(asyncio.all_tasks())
    except RuntimeError:  # no loop in the rendering thread: none of its tasks to count
        return 0
