"""Request semantics: one layer decides what a metric request means and who answers it.

Owns, so that no backend has to: resolving `{resource}` through the cluster's REST mapping,
choosing the backend that answers the metric (`routing`), the scope rules (a cluster-scoped
resource asked through a namespaced URL ignores the namespace, as the HPA sends Object metrics
for nodes that way), resolving `*` plus `labelSelector` to concrete objects, the not-found
policy with the three upstream wordings, the per-call backend deadline, and what a backend's
failure becomes.

Backend failures: a `StatusError` a backend raises (`BadRequest`, `BackendUnavailable`,
`BackendTimeout`, ...) keeps its code and gets the backend's name in front of its message; a
call past its deadline is 504 naming the backend; any other exception (a bug, or an answer that
breaks the contract) is a masked 500 naming the backend, with an `Audit-Id` header whose value
the log line carrying the traceback repeats.

Not-found policy: an unknown resource or a metric no backend answers is a 404; a named object
with no value is a 404 naming the object (and the metric selector, when one was given); a
wildcard that matches no object, or whose objects have no values, is a 200 with no items, as
the reference test adapter answers (the HPA treats both as "no metrics"). An external metric
no backend lists is a 200 with no items too (the reference adapter's answer; the HPA then
reports "no metrics returned"), kept for compatibility; it is logged at debug (`-v=3`), once
per metric name every `UNKNOWN_EXTERNAL_LOG_INTERVAL` seconds, never once per request.

Cost per request: one memoised routing decision (a dictionary lookup), the inventory's selector
lookup (memoised), and the backend's own fetch, O(objects requested).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
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
    InternalError,
    StatusError,
    metric_not_found,
)
from custom_metrics_server.query.routing import Host, Router, hosts_of
from custom_metrics_server.runtime.logs import Throttle
from custom_metrics_server.sdk.backend import ClusterView, MetricsBackend

R = TypeVar("R")

logger = logging.getLogger(__name__)

#: An unknown external metric name is logged at most once per this many seconds.
UNKNOWN_EXTERNAL_LOG_INTERVAL: Final = 600.0


def backend_failed(name: str) -> InternalError:
    """A backend's bug, masked as upstream masks a panic, naming the backend."""
    return InternalError(
        f'an error on the server ("backend {name} failed") has prevented the request from '
        "succeeding",
        details={},
    )


def _named(error: StatusError, name: str) -> StatusError:
    """`error` with `backend <name>: ` in front of its message (same class, details, headers)."""
    named = type(error)(f"backend {name}: {error.message}", details=error.details)
    named.headers.update(error.headers)
    return named


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
    ) -> None:
        self.cluster = cluster
        self.router = router if router is not None else Router(hosts_of(backends))
        self.backend_timeout = backend_timeout
        self._observe = observe
        self._unknown_external = Throttle(UNKNOWN_EXTERNAL_LOG_INTERVAL)

    @property
    def backends(self) -> tuple[MetricsBackend, ...]:
        """The backends being served, in routing order."""
        return tuple(host.backend for host in self.router.hosts)

    def reconfigure(self, router: Router) -> None:
        """Serve from another set of backends and routes; requests already routed finish on
        the backends they were given."""
        self.router = router

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
        host = self.router.custom(mapping.group_resource, request.metric)
        if host is None:
            raise not_found()
        info = MetricInfo(mapping.group_resource, mapping.namespaced, request.metric)
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
        samples = await self._call(host, host.backend.fetch(backend_request))
        if name is not None and not samples:
            raise not_found()
        return samples

    async def external(self, request: ExternalMetricRequest) -> Sequence[ExternalSample]:
        """Series answering an external-metrics request; an unknown metric has none."""
        host = self.router.external(request.metric)
        if host is None:
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
        return await self._call(host, host.backend.fetch_external(backend_request))

    async def _call(self, host: Host, call: Awaitable[R]) -> R:
        backend = host.backend
        name = backend.name
        readiness = backend.ready()
        if not readiness.ready:
            if asyncio.iscoroutine(call):
                call.close()
            raise BackendUnavailable(
                f"the {name} backend is not ready: {readiness.reason or 'not synced'}"
            )
        timeout = self.backend_timeout if host.timeout is None else host.timeout
        started = time.perf_counter()
        outcome = "error"
        try:
            async with asyncio.timeout(timeout):
                result = await call
            outcome = "ok"
            return result
        except asyncio.CancelledError:
            outcome = "cancelled"  # the request's deadline (or shutdown) gave up on it
            raise
        except TimeoutError as err:
            outcome = "timeout"
            raise BackendTimeout(f"the {name} backend did not answer within {timeout:g}s") from err
        except StatusError as err:
            raise _named(err, name) from err
        except Exception as err:
            outcome = "bug"
            request_id = uuid.uuid4().hex
            logger.error(
                "backend %s failed (request id %s): %s: %s",
                name,
                request_id,
                type(err).__name__,
                err,
                exc_info=True,
            )
            error = backend_failed(name)
            error.headers["Audit-Id"] = request_id
            raise error from err
        finally:
            if self._observe is not None:
                self._observe(name, outcome, time.perf_counter() - started)
