"""The per-metric status page's document: every metric some backend serves, with its backend,
failure policy and what its requests got, then the backends' state and the names asked for that
nobody serves (`api.explanation.render_status_text` renders it as a table).

Served at `/apis/{group}/{version}/metric-status` (`server.endpoints`); O(metrics listed).

PURE: no I/O.
"""

from __future__ import annotations

import time
from typing import Any

from custom_metrics_server.api import wire
from custom_metrics_server.api.explanation import API_VERSION, STATUS_KIND
from custom_metrics_server.machinery.quantity import format_quantity
from custom_metrics_server.query.engine import QueryEngine
from custom_metrics_server.query.hints import age
from custom_metrics_server.query.metric_status import OUTCOMES, MetricStats
from custom_metrics_server.query.routes import CUSTOM, EXTERNAL

__all__ = ["status_document"]


def _ago(timestamp: float, now: float) -> str:
    return age(now - timestamp) if timestamp > 0 else ""


def _item(stats: MetricStats, now: float) -> dict[str, Any]:
    return {
        "api": stats.api,
        "resource": stats.resource,
        "metric": stats.metric,
        "backend": stats.backend,
        "policy": stats.policy.describe() if stats.policy is not None else "",
        "requests": stats.counts(),
        "lastOutcome": stats.last_outcome,
        "lastSuccess": wire.format_time(stats.last_success),
        "lastSuccessAgo": _ago(stats.last_success, now),
        "lastError": wire.format_time(stats.last_error),
        "lastErrorAgo": _ago(stats.last_error, now),
        "lastErrorMessage": stats.last_error_message,
        "newestSampleAge": age(stats.newest_age) if stats.newest_age >= 0 else "",
    }


def status_document(engine: QueryEngine, *, now: float | None = None) -> dict[str, Any]:
    """The status page (see the module)."""
    now = time.time() if now is None else now
    router = engine.router
    seen: set[tuple[str, str, str, str]] = set()
    items: list[dict[str, Any]] = []
    for info in router.custom_metrics():
        decision = router.decide_custom(info.group_resource, info.metric)
        if decision is None:
            continue
        stats = engine.stats_of(decision, CUSTOM, info.group_resource, info.metric)
        seen.add(stats.key)
        items.append(_item(stats, now))
    for name in router.external_metrics():
        decision = router.decide_external(name)
        if decision is None:
            continue
        stats = engine.stats_of(decision, EXTERNAL, None, name)
        seen.add(stats.key)
        items.append(_item(stats, now))
    # `other`, and metrics no longer listed
    items.extend(_item(stats, now) for stats in engine.status.entries() if stats.key not in seen)
    items.sort(key=lambda item: (item["api"], item["resource"], item["metric"], item["backend"]))
    backends = []
    for host in router.hosts:
        readiness = host.backend.ready()
        failure = engine.status.backend_failures.get(host.name)
        backends.append(
            {
                "name": host.name,
                "ready": readiness.ready,
                "readyReason": readiness.reason,
                "lastError": None
                if failure is None
                else {
                    "at": wire.format_time(failure.at),
                    "ago": age(now - failure.at),
                    "metric": failure.metric,
                    "message": failure.message,
                },
            }
        )
    unknown = [
        {
            "api": api,
            "resource": resource,
            "metric": metric,
            "requests": count,
            "lastAgo": age(now - last),
        }
        for api, resource, metric, count, last in engine.status.recent_unknown()
    ]
    return {
        "kind": STATUS_KIND,
        "apiVersion": API_VERSION,
        "outcomes": list(OUTCOMES),
        "items": items,
        "backends": backends,
        "definitions": _definitions(engine, now),
        "unknownMetrics": unknown,
    }


def _definitions(engine: QueryEngine, now: float) -> list[dict[str, Any]]:
    """Application teams' MetricDefinitions, from each backend that has them (its optional
    `definition_states()`, the `metric-definitions` backend's): one row each, by namespace and
    name. O(definitions)."""
    rows: list[dict[str, Any]] = []
    for host in engine.router.hosts:
        states = getattr(host.backend, "definition_states", None)
        if not callable(states):
            continue
        for state in states():
            value = state.get("lastValue")
            at = state.get("lastValueTime")
            rows.append(
                {
                    "backend": host.name,
                    "namespace": state.get("namespace"),
                    "name": state.get("name"),
                    "metric": state.get("metric"),
                    "servedAs": state.get("servedAs"),
                    "source": state.get("source"),
                    "valid": state.get("valid"),
                    "ready": state.get("ready"),
                    "reason": state.get("reason"),
                    "shadowedBy": state.get("shadowedBy"),
                    "lastValue": None if value is None else format_quantity(float(value)),
                    "lastValueAgo": _ago(float(at), now) if at else "",
                    "lastError": state.get("lastError"),
                }
            )
    rows.sort(key=lambda row: (str(row["namespace"]), str(row["name"]), str(row["backend"])))
    return rows
