"""The sections of a metric explanation (`query.explain`): the request as the grammar read it,
the REST mapping, the route and the failure policy, the backend's state and the metric's status,
the objects' samples table, and what the backend's optional `explain_fetch` says.

Owns building each section from what the query layer already decided; it must not decide
anything itself nor run the request (`query.explain` walks the request through the engine).
Cost: O(objects) for the samples table, O(1) for the rest; only on `?explain=1`, never on the
plain request path.

PURE: no I/O of its own (the probe awaits the backend's optional `explain_fetch`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Final

from custom_metrics_server.api import wire
from custom_metrics_server.api.explanation import API_VERSION, KIND
from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    GroupResource,
    MetricRequest,
    ObjectKey,
    ResourceMapping,
    Sample,
)
from custom_metrics_server.errors import StatusError
from custom_metrics_server.machinery.labels import EVERYTHING
from custom_metrics_server.machinery.quantity import format_quantity
from custom_metrics_server.query.decision import Decision
from custom_metrics_server.query.engine import QueryEngine, selector_text
from custom_metrics_server.query.hints import age, cause
from custom_metrics_server.query.metric_status import MetricStats
from custom_metrics_server.query.routes import CUSTOM, Host
from custom_metrics_server.sdk.backend import ClusterView

__all__ = [
    "FIRST",
    "answered_by",
    "backend",
    "backend_bug",
    "causes_of",
    "custom_request",
    "document",
    "iso",
    "mapping",
    "not_in_view",
    "object_name",
    "probe",
    "route",
    "samples_table",
    "status_outcome",
]

#: Object names (and samples) an explanation lists at most; counts are always complete.
FIRST: Final = 10


def iso(timestamp: float) -> str | None:
    return wire.format_time(timestamp) if timestamp > 0 else None


def document(request: dict[str, Any]) -> dict[str, Any]:
    return {"kind": KIND, "apiVersion": API_VERSION, "request": request}


def status_outcome(error: StatusError) -> dict[str, Any]:
    return {"code": error.code, "status": wire.status_document(error)}


def causes_of(error: StatusError) -> list[Any]:
    details = error.details or {}
    return list(details.get("causes", ()))


def backend_bug(error: StatusError, decision: Decision | None) -> list[Any]:
    """What an author needs to find a masked 500's log line: the exception's type (never its
    text, which may hold secrets) and the audit id the log line repeats. Empty for any other
    error."""
    audit_id = error.headers.get("Audit-Id")
    bug = error.__cause__
    if error.code != 500 or not audit_id or bug is None:
        return []
    name = decision.host.name if decision is not None else "the backend"
    return [
        cause(
            "BackendBug",
            f"backend {name} raised {type(bug).__name__} (audit id {audit_id}); the traceback "
            f"is in the server's log, on the line 'backend {name} failed (request id "
            f"{audit_id})'",
        )
    ]


def not_in_view(
    cluster: ClusterView, resource: GroupResource, namespace: str | None, name: str
) -> list[Any]:
    """Whether the named object is in the cluster view (empty when it is): the server passes a
    named object to its backend without checking that it exists (docs/backends.md, "Who checks
    that an object exists"), so this is the place that says it does not. O(objects of the
    resource in the namespace); only on `?explain=1`."""
    keys = cluster.list_objects(resource, namespace, EVERYTHING)
    if (namespace or "", name) in keys:
        return []
    where = f" in namespace {namespace}" if namespace else ""
    if keys:
        seen = f"{name} does not exist in the cluster view ({len(keys)} {resource}{where})"
    else:
        seen = (
            f"the cluster view has no {resource}{where}, so it cannot say whether {name} "
            "exists (it may not list this resource)"
        )
    return [
        cause(
            "NotInClusterView",
            f"{seen}; the server does not check that a named object exists: the backend "
            "answered for the name it was given",
            "name",
        )
    ]


def form(path: str, parsed: MetricRequest) -> str:
    segments = [segment for segment in path.split("/") if segment]
    if len(segments) >= 5 and segments[3] == "namespaces" and segments[5:6] == ["metrics"]:
        return "namespace metric (namespaces/{namespace}/metrics/{metric})"
    if parsed.namespace is not None:
        kind = "all objects" if parsed.wildcard else "one object"
        return f"namespaced, {kind} (namespaces/{{namespace}}/{{resource}}/{{name}}/{{metric}})"
    kind = "all objects" if parsed.wildcard else "one object"
    return f"cluster-wide, {kind} ({{resource}}/{{name}}/{{metric}})"


def custom_request(path: str, parsed: MetricRequest) -> dict[str, Any]:
    return {
        "path": path,
        "api": CUSTOM,
        "group": parsed.group,
        "version": parsed.version,
        "form": form(path, parsed),
        "resource": parsed.resource,
        "namespace": parsed.namespace,
        "name": parsed.name,
        "metric": parsed.metric,
        "labelSelector": selector_text(parsed, "label_selector"),
        "metricLabelSelector": selector_text(parsed, "metric_selector"),
    }


def mapping(mapping: ResourceMapping) -> dict[str, Any]:
    return {
        "found": True,
        "groupResource": str(mapping.group_resource),
        "kind": mapping.kind,
        "apiVersion": mapping.api_version,
        "namespaced": mapping.namespaced,
    }


def route(engine: QueryEngine, decision: Decision, stats: MetricStats | None) -> dict[str, Any]:
    policy = decision.policy
    found: dict[str, Any] = {
        "backend": decision.host.name,
        "decidedBy": decision.describe(),
        "listed": decision.listed,
        "failurePolicy": None
        if policy is None
        else {
            "absent": policy.absent,
            "failure": policy.failure,
            "maxAgeSeconds": policy.max_age,
            "source": policy.source,
        },
    }
    return found


def backend(
    engine: QueryEngine, decision: Decision, stats: MetricStats | None, now: float
) -> dict[str, Any]:
    backend = decision.host.backend
    readiness = backend.ready()
    found: dict[str, Any] = {
        "name": backend.name,
        "ready": readiness.ready,
        "readyReason": readiness.reason,
        "timeoutSeconds": decision.host.timeout
        if decision.host.timeout is not None
        else engine.backend_timeout,
    }
    failure = engine.status.backend_failures.get(backend.name)
    found["lastError"] = (
        None
        if failure is None
        else {
            "at": iso(failure.at),
            "ago": age(now - failure.at),
            "metric": failure.metric,
            "message": failure.message,
        }
    )
    if stats is not None:
        found["metricStatus"] = {
            "requests": stats.counts(),
            "lastOutcome": stats.last_outcome,
            "lastSuccess": iso(stats.last_success),
            "lastError": iso(stats.last_error),
            "lastErrorMessage": stats.last_error_message,
        }
    return found


async def probe(
    engine: QueryEngine, decision: Decision, request: BackendRequest | ExternalBackendRequest
) -> dict[str, Any] | None:
    """What the backend says about the fetch (its optional `explain_fetch`), within its
    deadline; None when it cannot say."""
    return await _probe(engine, decision.host, request)


async def shadowed(
    engine: QueryEngine, decision: Decision, request: BackendRequest | ExternalBackendRequest
) -> list[dict[str, Any]]:
    """What each backend that yields (the metric definitions) says of the metric that
    `decision`'s backend wins over it: its definitions of the metric in the request's
    namespace, each with why it does not serve (`ShadowedByPlatform`). O(yielding backends)."""
    found = []
    for host in engine.router.hosts:
        if not host.yields or host is decision.host:
            continue
        details = await _probe(engine, host, request)
        if details and details.get("definitions"):
            found.append({"backend": host.name, **details})
    return found


async def _probe(
    engine: QueryEngine, host: Host, request: BackendRequest | ExternalBackendRequest
) -> dict[str, Any] | None:
    probe = getattr(host.backend, "explain_fetch", None)
    if not callable(probe):
        return None
    timeout = host.timeout if host.timeout is not None else engine.backend_timeout
    try:
        async with asyncio.timeout(timeout):
            details = await probe(request)
    except TimeoutError:
        return {"error": f"the query did not answer within {timeout:g}s"}
    except StatusError as error:
        return {"error": error.message}
    except Exception as error:  # an explanation never fails on a backend's bug
        return {"error": f"{type(error).__name__}: {error}"}
    return details if isinstance(details, dict) else None


def samples_table(
    objects: Sequence[ObjectKey], samples: Sequence[Sample], now: float
) -> dict[str, Any]:
    by_key = {(s.described.namespace, s.described.name): s for s in samples}
    with_values = [key for key in objects if key in by_key]
    without = [key for key in objects if key not in by_key]
    ages = [now - by_key[key].timestamp for key in with_values]
    return {
        "withValues": len(with_values),
        "withoutValues": len(without),
        "values": [
            {
                "name": object_name(key),
                "value": format_quantity(by_key[key].value),
                "timestamp": iso(by_key[key].timestamp),
                "age": age(now - by_key[key].timestamp),
            }
            for key in with_values[:FIRST]
        ],
        "firstWithoutValues": [object_name(key) for key in without[:FIRST]],
        "newestAge": age(min(ages)) if ages else None,
        "oldestAge": age(max(ages)) if ages else None,
    }


def object_name(key: ObjectKey) -> str:
    return f"{key[0]}/{key[1]}" if key[0] else key[1]


def answered_by(stats: MetricStats) -> str:
    """Who made the answer: the backend, or the failure policy."""
    if stats.last_outcome == "zero":
        return "the failure policy (zero)"
    if stats.last_outcome == "last_good":
        return "the failure policy (last good values)"
    return "the backend"
