"""The router's decision for one (API, resource, metric): the backend that answers, the route
that decided (or its listing), whether the backend lists the metric, and the failure policy in
force (the route's, else the backend's own through its optional `failure_policy`).

Owns the decision's value and its description for explanations; it must not match routes or
read listings (`query.routes`, `query.routing`). Built once per first decision and memoised by
the router, so nothing here is on the per-request path.

PURE: no I/O (logging only).
"""

from __future__ import annotations

import logging
from typing import Any

from custom_metrics_server.domain import FailurePolicy, GroupResource
from custom_metrics_server.query.routes import API, Host, Route
from custom_metrics_server.sdk.backend import MetricsBackend

__all__ = ["Decision", "answering_backend", "backend_policy"]

logger = logging.getLogger("custom_metrics_server.query.routing")


class Decision:
    """The router's decision for one (API, resource, metric): the backend (`host`), the route
    that decided (None: its listing claimed the metric), whether the backend lists the metric
    (the self-metrics then name it, else `other`), and the failure policy in force. Memoised
    with the decision; `stats` is the query layer's, filled on first use. `backend` is what the
    query layer calls: the host's backend, or the member of a composite backend that answers
    the metric (`answering_backend`), chosen here once rather than on every fetch."""

    __slots__ = ("backend", "host", "index", "listed", "policy", "route", "stats")

    def __init__(
        self,
        host: Host,
        index: int,
        route: Route | None,
        *,
        listed: bool,
        policy: FailurePolicy | None,
        backend: MetricsBackend | None = None,
    ) -> None:
        self.host = host
        self.backend: MetricsBackend = host.backend if backend is None else backend
        self.index = index
        self.route = route
        self.listed = listed
        self.policy = policy
        #: the query layer's `MetricStats` of this decision (None until first used)
        self.stats: Any = None

    def describe(self) -> str:
        """How the backend was chosen: `route backends[1].routes[0] (metric=http_*)` or
        `its listing`."""
        route = self.route
        if route is None:
            return f"backend {self.host.name!r} lists it (no route decides)"
        where = route.where or f"a route of {self.host.name!r}"
        return f"{where} ({route}) sends it to backend {self.host.name!r}"


def backend_policy(
    host: Host, api: API, resource: GroupResource | None, metric: str
) -> FailurePolicy | None:
    """The failure policy a backend configures for a metric itself (the Prometheus rules'
    `absent`/`failure`/`maxAge`), through its optional `failure_policy(api, resource, metric)`."""
    ask = getattr(host.backend, "failure_policy", None)
    if not callable(ask):
        return None
    try:
        found = ask(api, resource, metric)
    except Exception:  # a backend's bug must not break routing
        logger.exception("backend %r: failure_policy raised; no policy", host.name)
        return None
    return found if isinstance(found, FailurePolicy) else None


def answering_backend(
    backend: MetricsBackend, resource: GroupResource | None, metric: str
) -> MetricsBackend:
    """The backend that answers `metric` (of `resource`; None: the external metric) when
    `backend` is a composite of several (the demo's: `plugins.builtin`), through its optional
    `member_for(resource, metric)`; else `backend` itself. Called once per decision, so the
    request path calls the member directly and no composite chooses again per fetch."""
    choose = getattr(backend, "member_for", None)
    if not callable(choose):
        return backend
    member = choose(resource, metric)
    return member if member is not None else backend
