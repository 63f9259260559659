"""Request semantics: one layer decides what a metric request means and who answers it.

Owns, so that no backend has to: resolving `{resource}` through the cluster's REST mapping,
choosing the backend that lists the metric, the scope rules (a cluster-scoped resource asked
through a namespaced URL ignores the namespace, as the HPA sends Object metrics for nodes that
way), resolving `*` plus `labelSelector` to concrete objects, the not-found policy with the
three upstream wordings, and the per-call backend deadline.

Not-found policy: an unknown resource or a metric no backend lists is a 404; a named object
with no value is a 404 naming the object (and the metric selector, when one was given); a
wildcard that matches no object, or whose objects have no values, is a 200 with no items, as
the reference test adapter answers (the HPA treats both as "no metrics"). An external metric
no backend lists is a 200 with no items too (the reference adapter's answer; the HPA then
reports "no metrics returned"), kept for compatibility; it is logged at debug (`-v=3`), once
per metric name every `UNKNOWN_EXTERNAL_LOG_INTERVAL` seconds, never once per request.

Cost per request: O(backends) ownership checks on their metric sets, the inventory's selector
lookup (memoised), and the backend's own fetch, O(objects requested).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Final, TypeVar

from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalMetricRequest,
    ExternalSample,
    MetricInfo,
    MetricRequest,
    ObjectKey,
    Readiness,
    Sample,
)
from custom_metrics_server.errors import (
    BackendTimeout,
    BackendUnavailable,
    StatusError,
    metric_not_found,
)
from custom_metrics_server.runtime.logs import Throttle
from custom_metrics_server.sdk.backend import ClusterView, MetricsBackend

T = TypeVar("T")
R = TypeVar("R")

logger = logging.getLogger(__name__)

#: An unknown external metric name is logged at most once per this many seconds.
UNKNOWN_EXTERNAL_LOG_INTERVAL: Final = 600.0


class QueryEngine:
    """Answers parsed metric requests from the configured backends."""

    def __init__(
        self,
        *,
        cluster: ClusterView,
        backends: Sequence[MetricsBackend],
        backend_timeout: float = 10.0,
        observe: Callable[[str, str, float], None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.backends = tuple(backends)
        self.backend_timeout = backend_timeout
        self._observe = observe
        self._unknown_external = Throttle(UNKNOWN_EXTERNAL_LOG_INTERVAL)

    def custom_metrics(self) -> list[MetricInfo]:
        """Union of every backend's custom metrics (discovery)."""
        return [info for backend in self.backends for info in backend.list_metrics()]

    def external_metrics(self) -> list[str]:
        """Union of every backend's external metrics (discovery)."""
        return [name for backend in self.backends for name in backend.list_external_metrics()]

    def readiness(self) -> dict[str, Readiness]:
        """Readiness of the cluster view and of each backend, by check name."""
        checks = {"cluster": self.cluster.ready()}
        for backend in self.backends:
            checks[f"backend-{backend.name}"] = backend.ready()
        return checks

    async def custom(self, request: MetricRequest) -> Sequence[Sample]:
        """Samples answering a custom-metrics request, in object order."""
        name = None if request.wildcard else request.name

        def not_found() -> StatusError:
            # The selector's text is built only for the error (most requests never need it).
            selector = request.metric_selector
            return metric_not_found(
                resource=request.resource,
                metric=request.metric,
                name=name,
                selector="" if selector.is_everything() else str(selector),
            )

        mapping = self.cluster.mapping(request.resource) or await self.cluster.resolve(
            request.resource
        )
        if mapping is None:
            raise not_found()
        info = MetricInfo(mapping.group_resource, mapping.namespaced, request.metric)
        backend = self._owner(info, lambda b: b.list_metrics())
        if backend is None:
            raise not_found()
        namespace = request.namespace if mapping.namespaced else None
        objects: Sequence[ObjectKey]
        if name is None:
            objects = self.cluster.list_objects(
                mapping.group_resource, namespace, request.label_selector
            )
            if not objects:
                return ()
        else:
            objects = ((namespace or "", name),)
        backend_request = BackendRequest(
            metric=info,
            mapping=mapping,
            objects=tuple(objects),
            metric_selector=request.metric_selector,
        )
        samples = await self._call(backend, backend.fetch(backend_request))
        if name is not None and not samples:
            raise not_found()
        return samples

    async def external(self, request: ExternalMetricRequest) -> Sequence[ExternalSample]:
        """Series answering an external-metrics request; an unknown metric has none."""
        backend = self._owner(request.metric, lambda b: b.list_external_metrics())
        if backend is None:
            if logger.isEnabledFor(logging.DEBUG) and self._unknown_external.allow(request.metric):
                logger.debug(
                    "external metric %r (asked in namespace %s) is served by no backend: "
                    "answered 200 with no items, as the reference adapter does (the HPA "
                    "reports no metrics returned); logged once per metric every %gs",
                    request.metric,
                    request.namespace,
                    UNKNOWN_EXTERNAL_LOG_INTERVAL,
                )
            return ()
        backend_request = ExternalBackendRequest(
            metric=request.metric,
            namespace=request.namespace,
            metric_selector=request.metric_selector,
        )
        return await self._call(backend, backend.fetch_external(backend_request))

    def _owner(
        self, wanted: T, listing: Callable[[MetricsBackend], Collection[T]]
    ) -> MetricsBackend | None:
        for backend in self.backends:
            if wanted in listing(backend):
                return backend
        return None

    async def _call(self, backend: MetricsBackend, call: Awaitable[R]) -> R:
        readiness = backend.ready()
        if not readiness.ready:
            if asyncio.iscoroutine(call):
                call.close()
            raise BackendUnavailable(
                f"the {backend.name} backend is not ready: {readiness.reason or 'not synced'}"
            )
        started = time.perf_counter()
        outcome = "error"
        try:
            async with asyncio.timeout(self.backend_timeout):
                result = await call
            outcome = "ok"
            return result
        except asyncio.CancelledError:
            outcome = "cancelled"  # the request's deadline (or shutdown) gave up on it
            raise
        except TimeoutError as err:
            outcome = "timeout"
            raise BackendTimeout(
                f"the {backend.name} backend did not answer within {self.backend_timeout:g}s"
            ) from err
        finally:
            if self._observe is not None:
                self._observe(backend.name, outcome, time.perf_counter() - started)
