"""Request semantics: one layer decides what a metric request means and who answers it.

Owns, so that no backend has to: resolving `{resource}` through the cluster's REST mapping,
choosing the backend that answers the metric (`routing`), the scope rules (a cluster-scoped
resource asked through a namespaced URL ignores the namespace, as the HPA sends Object metrics
for nodes that way), resolving `*` plus `labelSelector` to concrete objects, the not-found
policy with the three upstream wordings, the per-call backend deadline, and what a backend's
failure becomes.

Backend failures (`calls`, which guards and counts each backend call): a `StatusError` a
backend raises keeps its code and gets the backend's name in front of its message; a call past
its deadline is 504 naming the backend; any other exception is a masked 500 naming the backend,
with an `Audit-Id` header.

Not-found policy: an unknown resource or a metric no backend answers is a 404; a named object
with no value is a 404 naming the object (and the metric selector, when one was given); a
wildcard that matches no object, or whose objects have no values, is a 200 with no items, as
the reference test adapter answers (the HPA treats both as "no metrics"). An external metric
no backend lists is a 200 with no items too (the reference adapter's answer; the HPA then
reports "no metrics returned"), kept for compatibility; it is logged at debug (`-v=3`), once
per metric name every `UNKNOWN_EXTERNAL_LOG_INTERVAL` seconds, never once per request.

Per-metric status (`metric_status.MetricStatus`): every request's outcome is counted for its metric
and backend (found, not found, error, timeout, or the failure policy's zero / last good), with
the last success and error times and the newest sample's age; the self-metrics and the status
page read it. A 404 carries `details.causes` (`causes`): why, in short sentences (the message
keeps upstream's wording byte for byte); a backend's 5xx carries when the metric last answered.

Failure policies (`policy`): a route of the backends file, or the backend itself (a Prometheus
rule), may say what a metric answers when its value is absent or its backend fails; metrics
without one never reach that code.

Cost per request: one memoised routing decision (a dictionary lookup, which also holds the
metric's stats), the inventory's selector lookup (memoised), the backend's own fetch,
O(objects requested), and a few attribute stores for the stats.

One piece (about 415 lines, over the house's 400): the custom and external paths meet the
not-found policy, the failure policies and the per-metric stats in the same order, and the
engine is the one place a reader finds that order; the parts that stand alone are already
their own modules (`calls`, `causes`, `policy`, `metric_status`, `routing`).
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Literal, TypeVar

from custom_metrics_server.domain import (
    TIMESTAMP,
    BackendRequest,
    ExternalBackendRequest,
    ExternalMetricRequest,
    ExternalSample,
    FailurePolicy,
    GroupResource,
    MetricInfo,
    MetricRequest,
    ObjectKey,
    Readiness,
    ResourceMapping,
    Sample,
    newest_timestamp,
    oldest_timestamp,
)
from custom_metrics_server.errors import (
    StatusError,
    metric_not_found,
)
from custom_metrics_server.query import causes
from custom_metrics_server.query.calls import call_backend, count_answer, with_causes
from custom_metrics_server.query.decision import Decision
from custom_metrics_server.query.metric_status import OTHER, MetricStats, MetricStatus
from custom_metrics_server.query.policy import LastGood, apply_custom, apply_external
from custom_metrics_server.query.routes import API, CUSTOM, EXTERNAL, Host
from custom_metrics_server.query.routing import Router, hosts_of
from custom_metrics_server.runtime.logs import Throttle
from custom_metrics_server.sdk.backend import ClusterView, MetricsBackend

R = TypeVar("R")

logger = logging.getLogger(__name__)


class _Lookup(enum.Enum):
    LOOKUP = "lookup"


#: `QueryEngine.custom`'s default `mapping`: look the resource up in the cluster view.
LOOKUP: Final = _Lookup.LOOKUP

#: An unknown external metric name is logged at most once per this many seconds.
UNKNOWN_EXTERNAL_LOG_INTERVAL: Final = 600.0


def selector_text(request: MetricRequest | ExternalMetricRequest, which: str) -> str:
    """A request's selector as text ("" when it selects everything)."""
    selector = getattr(request, which)
    return "" if selector.is_everything() else str(selector)


class QueryEngine:
    """Answers parsed metric requests from the configured backends."""

    def __init__(
        self,
        *,
        cluster: ClusterView,
        backends: Sequence[MetricsBackend | Host] = (),
        backend_timeout: float = 10.0,
        observe: Callable[[str, str, float], None] | None = None,
        router: Router | None = None,
        status: MetricStatus | None = None,
    ) -> None:
        self.cluster = cluster
        self.router = router if router is not None else Router(hosts_of(backends))
        self.backend_timeout = backend_timeout
        self._observe = observe
        self._unserved_log = Throttle(UNKNOWN_EXTERNAL_LOG_INTERVAL)
        #: every metric's outcomes (self-metrics, the status page, hints)
        self.status = status if status is not None else MetricStatus()
        #: the last good values of metrics whose failure policy says `last-good`
        self.last_good = LastGood()

    @property
    def backends(self) -> tuple[MetricsBackend, ...]:
        """The backends being served, in routing order."""
        return tuple(host.backend for host in self.router.hosts)

    def reconfigure(self, router: Router) -> None:
        """Serve from another set of backends and routes; requests already routed finish on
        the backends they were given."""
        self.router = router
        self.status.forget_backends({host.name for host in router.hosts})

    def custom_metrics(self) -> list[MetricInfo]:
        """Every backend's custom metrics that some backend answers, once each (discovery)."""
        return self.router.custom_metrics()

    def external_metrics(self) -> list[str]:
        """Every backend's external metrics that some backend answers, once each."""
        return self.router.external_metrics()

    def readiness(self) -> dict[str, Readiness]:
        """Readiness of the cluster view and of each backend, by check name. A backend that
        does not gate readiness passes its check while not ready, with a note: its own metrics
        answer 503, the others are served."""
        checks = {"cluster": self.cluster.ready()}
        for host in self.router.hosts:
            state = host.backend.ready()
            if not state.ready and not host.gates_readiness:
                state = Readiness(
                    ready=True,
                    reason=f"not ready, its metrics answer 503: {state.reason or 'not synced'}",
                )
            checks[f"backend-{host.name}"] = state
        return checks

    # -- stats ----------------------------------------------------------------------------------

    def stats_of(
        self, decision: Decision, api: API, resource: GroupResource | None, metric: str
    ) -> MetricStats:
        """The stats a decision counts into (memoised on it): the metric's name when its
        backend lists it, else `other`."""
        stats: MetricStats | None = decision.stats
        if stats is None:
            stats = self.status.entry(
                api,
                str(resource) if resource is not None else "",
                metric if decision.listed else OTHER,
                decision.host.name,
            )
            stats.policy = decision.policy
            decision.stats = stats
        return stats

    def _unserved(self, api: API, resource: str, metric: str, namespace: str = "") -> None:
        """A request for a metric nobody serves (or of an unknown resource): counted as `other`,
        remembered for the status page, logged at debug level (`-v 3`) once per metric per
        interval (a request must not be able to flood the log)."""
        self.status.entry(api, resource, OTHER, "").not_found += 1
        self.status.unknown(api, resource, metric)
        if not logger.isEnabledFor(logging.DEBUG) or not self._unserved_log.allow(
            (api, resource, metric)
        ):
            return
        if api == EXTERNAL:
            logger.debug(
                "external metric %r (asked in namespace %s) is served by no backend: "
                "answered 200 with no items, as the reference adapter does (the HPA "
                "reports no metrics returned); logged once per metric every %gs",
                metric,
                namespace,
                UNKNOWN_EXTERNAL_LOG_INTERVAL,
            )
        else:
            logger.debug("no backend serves the %s metric %r (resource %r)", api, metric, resource)

    # -- requests -------------------------------------------------------------------------------

    async def custom(
        self,
        request: MetricRequest,
        *,
        mapping: ResourceMapping | Literal[_Lookup.LOOKUP] | None = LOOKUP,
        freshness: Callable[[str, float], None] | None = None,
    ) -> Sequence[Sample]:
        """Samples answering a custom-metrics request, in object order.

        `mapping`: the cluster's `mapping(request.resource)` when the caller already looked it
        up (the endpoint, for its self-metric labels), so that the REST mapping is resolved
        once per request; None then means "not mapped yet" and goes to `resolve()` (discovery)
        as a lookup miss does. `freshness(group, age)`: told the age of the oldest value of a
        non-empty answer (the server's freshness histogram), computed here with the newest
        value's age for the metric's stats."""
        name = None if request.wildcard else request.name
        if mapping is _Lookup.LOOKUP:
            mapping = self.cluster.mapping(request.resource)
        if mapping is None:
            mapping = await self.cluster.resolve(request.resource)
        if mapping is None:
            self._unserved(CUSTOM, OTHER, request.metric)
            raise with_causes(
                self.not_found(request), causes.no_mapping(self.router, request.resource)
            )
        resource = mapping.group_resource
        decision = self.router.decide_custom(resource, request.metric)
        if decision is None:
            self._unserved(CUSTOM, str(resource), request.metric)
            raise with_causes(
                self.not_found(request),
                causes.no_backend(self.router, CUSTOM, resource, request.metric),
            )
        stats = decision.stats
        if stats is None:
            stats = self.stats_of(decision, CUSTOM, resource, request.metric)
        info = MetricInfo(resource, mapping.namespaced, request.metric)
        namespace = request.namespace if mapping.namespaced else None
        objects: Sequence[ObjectKey]
        if name is None:
            objects = self.cluster.list_objects(resource, namespace, request.label_selector)
            if not objects:
                stats.not_found += 1
                stats.last_outcome = "not_found"
                return ()
        else:
            objects = ((namespace or "", name),)
        backend_request = BackendRequest(
            metric=info,
            mapping=mapping,
            objects=tuple(objects),
            metric_selector=request.metric_selector,
        )
        policy = decision.policy
        if policy is not None:
            return await self._custom_with_policy(
                request, decision, policy, backend_request, freshness
            )
        samples = await self._call(
            decision, decision.backend.fetch(backend_request), stats, request.metric
        )
        if samples:
            now = time.time()
            stats.found += 1
            stats.last_success = now
            stats.last_outcome = "found"
            stats.newest_age = now - newest_timestamp(samples)
            if freshness is not None:
                freshness(request.group, now - oldest_timestamp(samples))
            return samples
        stats.not_found += 1
        stats.last_outcome = "not_found"
        if name is not None:
            raise with_causes(
                self.not_found(request), self.no_value_causes(request, decision, backend_request)
            )
        return samples

    def not_found(self, request: MetricRequest) -> StatusError:
        """The upstream 404 of a custom-metrics request (no causes)."""
        return metric_not_found(
            resource=request.resource,
            metric=request.metric,
            name=None if request.wildcard else request.name,
            selector=selector_text(request, "metric_selector"),
        )

    def no_value_causes(
        self,
        request: MetricRequest,
        decision: Decision,
        backend_request: BackendRequest,
        *,
        stale: int = 0,
    ) -> list[dict[str, object]]:
        """Why the objects asked have no value: the backend, the selector, stale samples,
        the backend's last failure."""
        found = causes.no_value(
            backend=decision.host.name,
            metric=request.metric,
            resource=backend_request.metric.group_resource,
            objects=backend_request.objects,
            metric_selector=selector_text(request, "metric_selector"),
            stale=stale,
            policy=decision.policy,
        )
        return found + causes.backend_failing(self.status, decision.host.name)

    async def _custom_with_policy(
        self,
        request: MetricRequest,
        decision: Decision,
        policy: FailurePolicy,
        backend_request: BackendRequest,
        freshness: Callable[[str, float], None] | None,
    ) -> Sequence[Sample]:
        """A custom request whose metric has a failure policy (see `policy`)."""
        stats = self.stats_of(
            decision, CUSTOM, backend_request.metric.group_resource, request.metric
        )
        failure: StatusError | None = None
        try:
            answered: Sequence[Sample] | None = await self._call(
                decision, decision.backend.fetch(backend_request), stats, request.metric
            )
        except StatusError as err:
            if err.code < 500:
                raise
            failure, answered = err, None
        now = time.time()
        result = apply_custom(policy, backend_request, answered, now=now, store=self.last_good)
        samples: Sequence[Sample] = result.samples  # type: ignore[assignment]
        if failure is not None and not samples:
            raise failure
        count_answer(stats, samples, result.how, now, failure=failure)
        if samples and freshness is not None:
            freshness(request.group, time.time() - oldest_timestamp(samples))
        if not samples and not request.wildcard:
            raise with_causes(
                self.not_found(request),
                self.no_value_causes(request, decision, backend_request, stale=result.stale),
            )
        return samples

    async def external(self, request: ExternalMetricRequest) -> Sequence[ExternalSample]:
        """Series answering an external-metrics request; an unknown metric has none."""
        decision = self.router.decide_external(request.metric)
        if decision is None:
            self._unserved(EXTERNAL, "", request.metric, request.namespace)
            return ()
        stats = decision.stats
        if stats is None:
            stats = self.stats_of(decision, EXTERNAL, None, request.metric)
        backend_request = ExternalBackendRequest(
            metric=request.metric,
            namespace=request.namespace,
            metric_selector=request.metric_selector,
        )
        policy = decision.policy
        if policy is not None:
            return await self._external_with_policy(decision, policy, backend_request, stats)
        samples = await self._call(
            decision, decision.backend.fetch_external(backend_request), stats, request.metric
        )
        if samples:
            now = time.time()
            stats.found += 1
            stats.last_success = now
            stats.last_outcome = "found"
            stats.newest_age = now - max(map(TIMESTAMP, samples))
        else:
            stats.not_found += 1
            stats.last_outcome = "not_found"
        return samples

    async def _external_with_policy(
        self,
        decision: Decision,
        policy: FailurePolicy,
        backend_request: ExternalBackendRequest,
        stats: MetricStats,
    ) -> Sequence[ExternalSample]:
        failure: StatusError | None = None
        try:
            answered: Sequence[ExternalSample] | None = await self._call(
                decision,
                decision.backend.fetch_external(backend_request),
                stats,
                backend_request.metric,
            )
        except StatusError as err:
            if err.code < 500:
                raise
            failure, answered = err, None
        now = time.time()
        result = apply_external(policy, backend_request, answered, now=now, store=self.last_good)
        samples: Sequence[ExternalSample] = result.samples  # type: ignore[assignment]
        if failure is not None and not samples:
            raise failure
        count_answer(stats, samples, result.how, now, failure=failure)
        return samples

    def _call(
        self, decision: Decision, call: Awaitable[R], stats: MetricStats, metric: str
    ) -> Awaitable[R]:
        """`call` guarded by the host's deadline and counted (`calls.call_backend`)."""
        host = decision.host
        timeout = self.backend_timeout if host.timeout is None else host.timeout
        return call_backend(
            host,
            call,
            stats,
            metric,
            deadline=timeout,
            observe=self._observe,
            status=self.status,
            answering=decision.backend,
        )
