"""The causes of a metric request that found nothing or failed (`details.causes` of its Status,
and an explanation's `causes`), from what the router, the cluster view and the per-metric
status know. Computed on the error path and for explanations only (see `hints`).

PURE: no I/O.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from custom_metrics_server.domain import FailurePolicy, GroupResource
from custom_metrics_server.query.hints import age, cause, nearest, quoted_list
from custom_metrics_server.query.metric_status import MetricStats, MetricStatus
from custom_metrics_server.query.routes import API, CUSTOM
from custom_metrics_server.query.routing import Router

__all__ = [
    "backend_failing",
    "cause",
    "empty_selection",
    "no_backend",
    "no_mapping",
    "no_value",
]

Cause = dict[str, Any]


def no_mapping(router: Router, resource: str) -> list[Cause]:
    """The resource has no REST mapping in the cluster view."""
    message = f'the cluster has no resource "{resource}"'
    suggestions: list[str] = router.remembered(
        ("resource", resource),
        lambda: nearest(resource, sorted({str(found) for found in _listed_resources(router)})),
    )
    if suggestions:
        message += f"; did you mean {quoted_list(suggestions)}"
    return [cause("ResourceNotFound", message, "resource")]


def _listed_resources(router: Router) -> set[GroupResource]:
    found: set[GroupResource] = set()
    for name in router.listed_names(CUSTOM):
        found.update(router.resources_listing(name))
    return found


def no_backend(
    router: Router, api: API, resource: GroupResource | None, metric: str
) -> list[Cause]:
    """No backend serves the metric (for this resource): the nearest names, the resources that
    do list it."""
    what = f"metric {metric}" + (f" for {resource}" if resource is not None else "")
    message = f"no backend serves {what}"
    suggestions: list[str] = router.remembered(
        ("nearest", api, resource, metric),
        lambda: nearest(metric, router.listed_names(api, resource)),
    )
    if suggestions:
        message += f"; did you mean {quoted_list(suggestions)}"
    causes = [cause("MetricNotServed", message, "metric")]
    if api == CUSTOM:
        elsewhere = [str(found) for found in router.resources_listing(metric) if found != resource]
        if elsewhere:
            causes.append(
                cause(
                    "MetricNotServed",
                    f"metric {metric} is listed for {quoted_list(elsewhere)}",
                    "resource",
                )
            )
    return causes


def empty_selection(selector: str, resource: GroupResource, namespace: str | None) -> list[Cause]:
    """A wildcard whose label selector matched no object."""
    where = f" in namespace {namespace}" if namespace else ""
    if selector:
        message = f"labelSelector {selector} matched 0 {resource}{where}"
    else:
        message = f"there are no {resource}{where}"
    return [cause("NoObjects", message, "labelSelector")]


def no_value(
    *,
    backend: str,
    metric: str,
    resource: GroupResource,
    objects: Sequence[tuple[str, str]],
    metric_selector: str,
    stale: int,
    policy: FailurePolicy | None,
) -> list[Cause]:
    """The backend has no (fresh enough) value for the objects asked."""
    count = len(objects)
    with_selector = f" with metricLabelSelector {metric_selector}" if metric_selector else ""
    if count == 1:
        namespace, name = objects[0]
        what = f"{resource} {namespace + '/' if namespace else ''}{name}"
        message = f"backend {backend} has no value of {metric} for {what}{with_selector}"
    else:
        message = f"{count} {resource} matched, none has a value of {metric}{with_selector}"
    causes = [cause("NoValue", message)]
    if stale and policy is not None and policy.max_age is not None:
        causes.append(
            cause(
                "StaleValues",
                f"{stale} of them had a sample older than maxAge {age(policy.max_age)} "
                f"({policy.source or 'the failure policy'}), treated as absent",
            )
        )
    return causes


def backend_failing(
    status: MetricStatus, backend: str, *, now: float | None = None, since: float = 600.0
) -> list[Cause]:
    """The backend's last failed call, if it failed in the last `since` seconds."""
    failure = status.backend_failures.get(backend)
    now = time.time() if now is None else now
    if failure is None or now - failure.at > since:
        return []
    return [
        cause(
            "BackendFailing",
            f"backend {backend}: last call failed {age(now - failure.at)} ago "
            f"(metric {failure.metric}): {failure.message}",
        )
    ]


def last_success(stats: MetricStats | None, *, now: float | None = None) -> list[Cause]:
    """When the metric last answered with values (for errors)."""
    if stats is None:
        return []
    now = time.time() if now is None else now
    if stats.last_success:
        message = (
            f"metric {stats.metric} last answered with values {age(now - stats.last_success)} ago"
        )
    else:
        message = f"metric {stats.metric} has not answered with values since the server started"
    if stats.metric == "other":
        return []
    return [cause("LastSuccess", message)]
