"""The Prometheus backend: custom and external metrics from PromQL, configured with
prometheus-adapter's rules file (docs/prometheus.md).

Background work (started in `__aenter__`):

* the relist loop lists `/api/v1/series` for each distinct (server, seriesQuery) every
  `relist_interval` (window `max_age`) and swaps in a new `Registry`; a failed listing keeps
  that query's last good one, so discovery never empties because Prometheus blinked;
* the reload loop re-reads the configuration file when its content changes; a broken file is
  logged and counted, and the last good configuration stays in force (:mod:`.live_config`).

Requests never list: `list_metrics()` is the registry's key view. `fetch()` runs one instant
query built from the rule, with the namespace as a label matcher and, for a single object, its
name; for several objects it asks for the whole namespace (or the whole cluster for
cluster-scoped resources) grouped by the resource label, and keeps the requested names.
Query length is therefore bounded whatever the selector matched (no pod-name regex).

Values keep the sample's timestamp; `windowSeconds` is the rule's `window` or the longest range
selector of the query; NaN and infinities are dropped. Failures: unreachable or 5xx -> 503,
slow -> 504 (`errors.BackendUnavailable` / `BackendTimeout`), a query the engine rejects
(a configuration error) -> 500 with the rule named.

Per request: O(len(query)) to build it, plus O(series returned) to match names. This module owns
the series listing, the registry and the contract; planning a query is `custom_plan`'s, running
it and reading its answer `fetch`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from prometheus_client.registry import Collector

from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalSample,
    FailurePolicy,
    GroupResource,
    MetricInfo,
    ObjectRef,
    Readiness,
    ResourceMapping,
    Sample,
)
from custom_metrics_server.prometheus import metric_registry as registry_module
from custom_metrics_server.prometheus import results
from custom_metrics_server.prometheus.answers import PrometheusError
from custom_metrics_server.prometheus.client import PrometheusClient
from custom_metrics_server.prometheus.custom_plan import PlanKey, Planned, plan_custom
from custom_metrics_server.prometheus.fetch import (
    custom_samples,
    external_samples,
    run_query,
    vector,
)
from custom_metrics_server.prometheus.live_config import LiveConfig
from custom_metrics_server.prometheus.metric_registry import Registry, SeriesShape
from custom_metrics_server.prometheus.promql import range_window
from custom_metrics_server.prometheus.queries import external_query
from custom_metrics_server.prometheus.rules import AdapterConfig, ServerConfig
from custom_metrics_server.prometheus.self_metrics import BackendMetrics, ForwardingCollector
from custom_metrics_server.prometheus.usage import PrometheusResourceUsage
from custom_metrics_server.runtime.tasks import BackgroundTasks
from custom_metrics_server.sdk.backend import ClusterView

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PrometheusSettings:
    """Flags of the Prometheus backend (names follow prometheus-adapter's)."""

    config_path: Path | None = None
    config_text: str | None = None  # tests: a document instead of a file
    default_server: ServerConfig | None = None
    relist_interval: float = 60.0
    max_age: float | None = None  # series listing window; default: the relist interval
    query_timeout: float = 10.0
    retries: int = 2
    verb: Literal["GET", "POST"] = "GET"
    reload_interval: float = 5.0
    # > 0: refresh `resourceRules` usage (metrics.k8s.io) this often; 0: not served from here.
    resource_usage_interval: float = 0.0


def _by_name(shape: SeriesShape) -> tuple[str, list[str]]:
    return shape[0], sorted(shape[1])


class PrometheusBackend:
    """Serves the metrics of a prometheus-adapter configuration from PromQL."""

    def __init__(
        self,
        cluster: ClusterView,
        settings: PrometheusSettings,
        *,
        name: str = "prometheus",
    ) -> None:
        self.name = name
        self.cluster = cluster
        self.settings = settings
        self.metrics = BackendMetrics()
        self._wake = asyncio.Event()
        self._live = LiveConfig(
            path=settings.config_path,
            text=settings.config_text,
            default_server=settings.default_server,
            query_timeout=settings.query_timeout,
            retries=settings.retries,
            verb=settings.verb,
            metrics=self.metrics,
            changed=self._wake.set,
        )
        self._registry = Registry()
        self._listing: tuple[Collection[MetricInfo], Collection[str]] = ((), ())
        self._listings: dict[tuple[str, str], Sequence[SeriesShape]] = {}
        self._listed_at: dict[str, float] = {}
        self._readiness = Readiness(
            ready=False, reason="waiting for the first Prometheus series listing"
        )
        # describedObject values are reused across requests (their rendered JSON is not, as
        # every answer carries a new evaluation time); bounded by the objects asked about.
        self._refs: dict[tuple[str, str, str, str], ObjectRef] = {}
        # The rendered query of each request shape (see `custom_plan`).
        self._queries: dict[PlanKey, Planned | None] = {}
        self.resource_usage = PrometheusResourceUsage(
            self._live, interval=settings.resource_usage_interval or 30.0
        )
        self._tasks = BackgroundTasks()

    # -- configuration ------------------------------------------------------------------------

    @property
    def config(self) -> AdapterConfig:
        """The configuration in force (the last good one)."""
        return self._live.config

    def client(self, server: str) -> PrometheusClient:
        """The client of a configured server (KeyError if it is not configured)."""
        return self._live.client(server)

    def load_config(self) -> AdapterConfig:
        """Read and compile the configuration; raises `ConfigError` (startup fails on it)."""
        return self._live.load()

    async def reload(self) -> bool:
        """Re-read the configuration if it changed; True when a new one took effect (the
        next listing then starts at once)."""
        return await self._live.reload()

    # -- discovery ----------------------------------------------------------------------------

    async def relist(self) -> None:
        """List every distinct (server, seriesQuery) and rebuild the registry."""
        config = self._live.config
        now = time.time()
        window = self.settings.max_age or self.settings.relist_interval
        queries = sorted({(rule.server, rule.series_query) for rule in config.all_rules})
        results = await asyncio.gather(
            *(
                self._live.client(server).series_shapes(query, start=now - window, end=now)
                for server, query in queries
            ),
            return_exceptions=True,
        )
        failed: dict[str, str] = {}
        listings: dict[tuple[str, str], Sequence[SeriesShape]] = {}
        for key, result in zip(queries, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, PrometheusError):
                    raise result
                failed[key[0]] = str(result)
                logger.warning("series listing %r failed, keeping the last one: %s", key[1], result)
                listings[key] = self._listings.get(key, ())
            else:
                # By name: two series one rule names alike resolve the same way every time.
                listings[key] = sorted(result, key=_by_name)
        for server in config.servers:
            if server not in failed:
                self._listed_at[server] = now
        self._listings = listings
        self._registry = await registry_module.build(config, listings, self._resolve)
        # One frozenset of each per registry, O(metrics) per relist: the router sees a relist
        # at once and an unchanged listing by identity (a keys view is live, so it would be
        # compared by value on every refresh).
        self._listing = (frozenset(self._registry.custom), frozenset(self._registry.external))
        self._queries = {}
        notes = "; ".join(
            f"listing of {server!r} failing, serving the last good one: {error}"
            for server, error in sorted(failed.items())
        )
        self._readiness = Readiness(ready=True, reason=notes)
        self.metrics.discovered.labels("custom").set(len(self._registry.custom))
        self.metrics.discovered.labels("external").set(len(self._registry.external))

    async def _resolve(self, text: str) -> ResourceMapping | None:
        return self.cluster.mapping(text) or await self.cluster.resolve(text)

    async def _relist_loop(self) -> None:
        while True:
            # Cleared before listing: a reload during the listing wakes the next one at once.
            self._wake.clear()
            try:
                await self.relist()
            except Exception:
                logger.exception("series relist failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.relist_interval)

    async def _reload_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.reload_interval)
            try:
                await self.reload()
            except Exception:
                logger.exception("prometheus config reload failed")

    # -- the backend contract -----------------------------------------------------------------

    def list_metrics(self) -> Collection[MetricInfo]:
        """See `MetricsBackend.list_metrics`: the registry's metrics, from memory. The same
        frozenset until the next listing replaces the registry, so the router reads it again
        only after a relist."""
        return self._listing[0]

    def list_external_metrics(self) -> Collection[str]:
        """See `MetricsBackend.list_external_metrics` (the same object until a relist)."""
        return self._listing[1]

    def ready(self) -> Readiness:
        """Ready once the first listing was attempted; later outages only fail its metrics,
        and the note says which server's listing is failing (`/readyz?verbose`). Built by
        each relist, not per call: the query layer asks on every request."""
        return self._readiness

    def listing_age(self, server: str = "default") -> float | None:
        """Seconds since the last fully successful listing of `server`, if any."""
        listed = self._listed_at.get(server)
        return None if listed is None else time.time() - listed

    def collector(self) -> Collector:
        """This backend's self-metrics, for the server's `/metrics`."""
        return ForwardingCollector(self.metrics.registry, self._refresh_gauges)

    def _refresh_gauges(self) -> None:
        for server in self._live.config.servers:
            age = self.listing_age(server)
            self.metrics.listing_age.labels(server).set(math.inf if age is None else age)

    async def fetch(self, request: BackendRequest) -> Sequence[Sample]:
        """See `MetricsBackend.fetch`.

        Cost per request: a dict lookup for the query (`custom_plan.plan_custom`, rendered once
        per shape), one call to Prometheus (:meth:`.PrometheusClient.query`, about 60 µs of
        CPU over a kept-alive connection for one series), O(series returned) to read the
        answer and O(objects) samples; about 25 µs besides the call for one object."""
        names = [name for _, name in request.objects]
        namespace = request.objects[0][0] if request.objects and request.metric.namespaced else ""
        planned = plan_custom(self._registry, self._queries, request, namespace, names)
        if planned is None:
            return ()
        # One object: an answer of one series, not worth compressing.
        data = await run_query(
            self._live,
            planned[0],
            planned[2].promql,
            request.metric.metric,
            compress=len(names) > 1,
        )
        return custom_samples(request, planned, data, names, namespace, refs=self._refs)

    def failure_policy(
        self, api: str, resource: GroupResource | None, metric: str
    ) -> FailurePolicy | None:
        """The failure policy the rule serving `metric` configures (`absent`, `failure`,
        `maxAge`), for the router; None when it keeps today's behaviour."""
        if api == "external":
            entry = self._registry.external.get(metric)
        else:
            assert resource is not None
            entry = self._registry.custom.get(
                MetricInfo(resource, True, metric)
            ) or self._registry.custom.get(MetricInfo(resource, False, metric))
        return None if entry is None else entry.rule.failure_policy()

    async def explain_fetch(
        self, request: BackendRequest | ExternalBackendRequest
    ) -> dict[str, Any]:
        """What a fetch of `request` sends and gets (explanations only): the rule, the server,
        the exact PromQL (the one a fetch renders for this request shape) and how many series
        the query returns now (it is run once more for that)."""
        if isinstance(request, ExternalBackendRequest):
            external = self._registry.external.get(request.metric)
            if external is None:
                return {"rule": None, "reason": "no rule's series listing has this metric"}
            rule = external.rule
            promql = external_query(
                rule,
                series=external.series,
                metric=request.metric,
                namespace=request.namespace,
                metric_selector=request.metric_selector,
            )
            found: dict[str, Any] = {"rule": rule.where, "server": rule.server, "promql": promql}
            data = await run_query(self._live, rule, promql, request.metric)
            if isinstance(data, Mapping) and data.get("resultType") == "scalar":
                found["series"] = 1
            else:
                found["series"] = len(vector(data, rule, request.metric))
            return found
        names = [name for _, name in request.objects]
        namespace = request.objects[0][0] if request.objects and request.metric.namespaced else ""
        entry = self._registry.custom.get(request.metric)
        if entry is None:
            return {"rule": None, "reason": "no rule's series listing has this metric"}
        planned = plan_custom(self._registry, self._queries, request, namespace, names)
        if planned is None:
            return {
                "rule": entry.rule.where,
                "server": entry.rule.server,
                "promql": None,
                "reason": f"the rule names no label for {request.mapping.group_resource}"
                + (" or for namespaces" if namespace else ""),
            }
        rule, label, query, _ = planned
        data = await run_query(self._live, rule, query.promql, request.metric.metric)
        series = vector(data, rule, request.metric.metric)
        wanted = set(names)
        matching = sum(1 for labels, _, _ in results.samples(series) if labels.get(label) in wanted)
        return {
            "rule": rule.where,
            "server": rule.server,
            "promql": query.promql,
            "objectLabel": label,
            "series": len(series),
            "seriesOfRequestedObjects": matching,
        }

    async def fetch_external(self, request: ExternalBackendRequest) -> Sequence[ExternalSample]:
        """See `MetricsBackend.fetch_external`: one item per series the query returns."""
        entry = self._registry.external.get(request.metric)
        if entry is None:
            return ()
        rule = entry.rule
        promql = external_query(
            rule,
            series=entry.series,
            metric=request.metric,
            namespace=request.namespace,
            metric_selector=request.metric_selector,
        )
        data = await run_query(self._live, rule, promql, request.metric)
        window = rule.window if rule.window is not None else range_window(promql)
        return external_samples(request, rule, data, window)

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if not self._live.loaded:
            self.load_config()
        self._tasks.start(self._relist_loop(), name="prometheus-relist")
        if self.settings.config_path is not None and self.settings.reload_interval > 0:
            self._tasks.start(self._reload_loop(), name="prometheus-reload")
        if self.settings.resource_usage_interval > 0:
            self._tasks.start(self.resource_usage.run(), name="prometheus-resource-usage")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._tasks.stop()
        await self._live.aclose()
