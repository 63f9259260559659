"""How a metric request is answered, step by step: the explanation `?explain=1` asks for.

`explain(engine, path, query)` parses the request as the grammar does, then walks what the query
layer decides (the REST mapping, the route and the backend, the objects the label selector
matched, the failure policy) and runs the request itself through the engine, so the outcome is
exactly what the plain request gets (the same code answers it: its Status with
`details.causes`, or its list). Around it, what an operator needs to see why: which objects
have values and how old they are, the backend's last error, the nearest metric names when no
backend serves one, and, for a backend that can say (the Prometheus backend's optional
`explain_fetch`), the exact query it sends and how many series came back (the explanation runs
that query once more to count them).

The document (`api.explanation` renders it as text; docs/operations.md describes it) is plain
JSON: `kind: MetricExplanation`, `apiVersion: custom-metrics-server/v1alpha1`. It is not a
Kubernetes API type (no discovery entry, no protobuf form); the version says which fields to
expect.

Explaining costs what the request costs, plus the hints and, for Prometheus, one more query.
It is computed only when asked: the plain request path never reaches this module. A request
explained is counted in the per-metric status like any other.

PURE: no I/O of its own (the backends' calls go through the engine).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Final

import orjson

from custom_metrics_server.api import wire
from custom_metrics_server.api.explanation import API_VERSION, KIND
from custom_metrics_server.api.grammar import EXTERNAL_GROUP, QueryParams, parse
from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalMetricRequest,
    ExternalSample,
    ItemShape,
    MetricInfo,
    MetricRequest,
    ObjectKey,
    ResourceMapping,
    Sample,
)
from custom_metrics_server.errors import StatusError
from custom_metrics_server.machinery.quantity import format_quantity
from custom_metrics_server.query import causes
from custom_metrics_server.query.engine import QueryEngine, selector_text
from custom_metrics_server.query.hints import age
from custom_metrics_server.query.routing import CUSTOM, EXTERNAL, Decision
from custom_metrics_server.query.status import MetricStats

__all__ = ["explain", "explain_parsed"]

#: Object names (and samples) an explanation lists at most; counts are always complete.
FIRST: Final = 10


def _iso(timestamp: float) -> str | None:
    return wire.format_time(timestamp) if timestamp > 0 else None


def _document(request: dict[str, Any]) -> dict[str, Any]:
    return {"kind": KIND, "apiVersion": API_VERSION, "request": request}


async def explain(engine: QueryEngine, path: str, query: QueryParams) -> dict[str, Any] | None:
    """The explanation of the request `path` + `query`, or None when the path is not a metric
    URL (discovery, the status page, or outside the served groups: answered as usual)."""
    request: dict[str, Any] = {"path": path}
    try:
        parsed = parse(path, query)
    except StatusError as error:
        document = _document({**request, "error": error.message})
        document["outcome"] = _status_outcome(error)
        document["causes"] = _causes_of(error)
        return document
    if not isinstance(parsed, MetricRequest | ExternalMetricRequest):
        return None
    return await explain_parsed(engine, path, parsed)


async def explain_parsed(
    engine: QueryEngine, path: str, parsed: MetricRequest | ExternalMetricRequest
) -> dict[str, Any]:
    """The explanation of a parsed metric request (see the module)."""
    if isinstance(parsed, ExternalMetricRequest):
        return await _explain_external(engine, path, parsed)
    return await _explain_custom(engine, path, parsed)


def _status_outcome(error: StatusError) -> dict[str, Any]:
    return {"code": error.code, "status": wire.status_document(error)}


def _causes_of(error: StatusError) -> list[Any]:
    details = error.details or {}
    return list(details.get("causes", ()))


def _form(path: str, parsed: MetricRequest) -> str:
    segments = [segment for segment in path.split("/") if segment]
    if len(segments) >= 5 and segments[3] == "namespaces" and segments[5:6] == ["metrics"]:
        return "namespace metric (namespaces/{namespace}/metrics/{metric})"
    if parsed.namespace is not None:
        kind = "all objects" if parsed.wildcard else "one object"
        return f"namespaced, {kind} (namespaces/{{namespace}}/{{resource}}/{{name}}/{{metric}})"
    kind = "all objects" if parsed.wildcard else "one object"
    return f"cluster-wide, {kind} ({{resource}}/{{name}}/{{metric}})"


def _custom_request(path: str, parsed: MetricRequest) -> dict[str, Any]:
    return {
        "path": path,
        "api": CUSTOM,
        "group": parsed.group,
        "version": parsed.version,
        "form": _form(path, parsed),
        "resource": parsed.resource,
        "namespace": parsed.namespace,
        "name": parsed.name,
        "metric": parsed.metric,
        "labelSelector": selector_text(parsed, "label_selector"),
        "metricLabelSelector": selector_text(parsed, "metric_selector"),
    }


def _mapping(mapping: ResourceMapping) -> dict[str, Any]:
    return {
        "found": True,
        "groupResource": str(mapping.group_resource),
        "kind": mapping.kind,
        "apiVersion": mapping.api_version,
        "namespaced": mapping.namespaced,
    }


def _route(engine: QueryEngine, decision: Decision, stats: MetricStats | None) -> dict[str, Any]:
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


def _backend(
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
            "at": _iso(failure.at),
            "ago": age(now - failure.at),
            "metric": failure.metric,
            "message": failure.message,
        }
    )
    if stats is not None:
        found["metricStatus"] = {
            "requests": stats.counts(),
            "lastOutcome": stats.last_outcome,
            "lastSuccess": _iso(stats.last_success),
            "lastError": _iso(stats.last_error),
            "lastErrorMessage": stats.last_error_message,
        }
    return found


async def _probe(
    engine: QueryEngine, decision: Decision, request: BackendRequest | ExternalBackendRequest
) -> dict[str, Any] | None:
    """What the backend says about the fetch (its optional `explain_fetch`), within its
    deadline; None when it cannot say."""
    probe = getattr(decision.host.backend, "explain_fetch", None)
    if not callable(probe):
        return None
    timeout = decision.host.timeout if decision.host.timeout is not None else engine.backend_timeout
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


def _samples_table(
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
                "name": _object_name(key),
                "value": format_quantity(by_key[key].value),
                "timestamp": _iso(by_key[key].timestamp),
                "age": age(now - by_key[key].timestamp),
            }
            for key in with_values[:FIRST]
        ],
        "firstWithoutValues": [_object_name(key) for key in without[:FIRST]],
        "newestAge": age(min(ages)) if ages else None,
        "oldestAge": age(max(ages)) if ages else None,
    }


def _object_name(key: ObjectKey) -> str:
    return f"{key[0]}/{key[1]}" if key[0] else key[1]


async def _explain_custom(  # noqa: PLR0915 - the steps in request order
    engine: QueryEngine, path: str, parsed: MetricRequest
) -> dict[str, Any]:
    document = _document(_custom_request(path, parsed))
    mapping = engine.cluster.mapping(parsed.resource) or await engine.cluster.resolve(
        parsed.resource
    )
    decision: Decision | None = None
    objects: Sequence[ObjectKey] = ()
    backend_request: BackendRequest | None = None
    if mapping is None:
        document["resource"] = {
            "found": False,
            "reason": f'the cluster view has no REST mapping for "{parsed.resource}"',
        }
    else:
        document["resource"] = _mapping(mapping)
        resource = mapping.group_resource
        decision = engine.router.decide_custom(resource, parsed.metric)
        namespace = parsed.namespace if mapping.namespaced else None
        if parsed.wildcard:
            objects = engine.cluster.list_objects(resource, namespace, parsed.label_selector)
        else:
            objects = ((namespace or "", parsed.name),)
        selection: dict[str, Any] = {
            "namespace": namespace,
            "labelSelector": selector_text(parsed, "label_selector"),
            "matched": len(objects),
            "first": [_object_name(key) for key in objects[:FIRST]],
        }
        if parsed.wildcard and not objects:
            selection["causes"] = causes.empty_selection(
                selector_text(parsed, "label_selector"), resource, namespace
            )
        document["objects"] = selection
        if decision is None:
            document["route"] = {
                "backend": None,
                "decidedBy": "no route matches and no backend lists it",
                "causes": causes.no_backend(engine.router, CUSTOM, resource, parsed.metric),
            }
        elif objects:
            backend_request = BackendRequest(
                metric=MetricInfo(resource, mapping.namespaced, parsed.metric),
                mapping=mapping,
                objects=tuple(objects),
                metric_selector=parsed.metric_selector,
            )
    # The outcome: the plain request's own path through the engine.
    outcome_causes: list[Any] = []
    now = time.time()
    try:
        samples = await engine.custom(parsed)
    except StatusError as error:
        samples = ()
        document["outcome"] = _status_outcome(error)
        outcome_causes = _causes_of(error)
    else:
        body = wire.metric_value_list(
            samples,
            api_version=f"{parsed.group}/{parsed.version}",
            shape=ItemShape.V1BETA2 if parsed.version == "v1beta2" else ItemShape.V1BETA1,
            metric_selector=parsed.metric_selector,
        )
        document["outcome"] = {"code": 200, "items": len(samples), "list": orjson.loads(body)}
    now = time.time()
    stats: MetricStats | None = None
    if decision is not None and mapping is not None:
        stats = engine.stats_of(decision, CUSTOM, mapping.group_resource, parsed.metric)
        document["route"] = _route(engine, decision, stats)
        document["backend"] = _backend(engine, decision, stats, now)
        if objects:
            document["objects"]["samples"] = _samples_table(objects, samples, now)
        document["outcome"]["answeredBy"] = _answered_by(stats)
        if backend_request is not None:
            probe = await _probe(engine, decision, backend_request)
            if probe is not None:
                document["backend"]["query"] = probe
        if parsed.wildcard and objects and not samples:
            outcome_causes = engine.no_value_causes(
                parsed, decision, backend_request or _empty_request(mapping, parsed)
            )
    if not outcome_causes:
        outcome_causes = list(document.get("objects", {}).get("causes", ()))
    document["causes"] = outcome_causes
    return document


def _empty_request(mapping: ResourceMapping, parsed: MetricRequest) -> BackendRequest:
    return BackendRequest(
        metric=MetricInfo(mapping.group_resource, mapping.namespaced, parsed.metric),
        mapping=mapping,
        objects=(),
        metric_selector=parsed.metric_selector,
    )


def _answered_by(stats: MetricStats) -> str:
    """Who made the answer: the backend, or the failure policy."""
    if stats.last_outcome == "zero":
        return "the failure policy (zero)"
    if stats.last_outcome == "last_good":
        return "the failure policy (last good values)"
    return "the backend"


async def _explain_external(
    engine: QueryEngine, path: str, parsed: ExternalMetricRequest
) -> dict[str, Any]:
    document = _document(
        {
            "path": path,
            "api": EXTERNAL,
            "group": EXTERNAL_GROUP,
            "version": "v1beta1",
            "form": "namespaces/{namespace}/{metric}",
            "namespace": parsed.namespace,
            "metric": parsed.metric,
            "labelSelector": selector_text(parsed, "metric_selector"),
        }
    )
    decision = engine.router.decide_external(parsed.metric)
    outcome_causes: list[Any] = []
    if decision is None:
        document["route"] = {
            "backend": None,
            "decidedBy": "no route matches and no backend lists it",
        }
        outcome_causes = causes.no_backend(engine.router, EXTERNAL, None, parsed.metric)
        document["route"]["causes"] = outcome_causes
    samples: Sequence[ExternalSample] = ()
    try:
        samples = await engine.external(parsed)
    except StatusError as error:
        document["outcome"] = _status_outcome(error)
        outcome_causes = _causes_of(error)
    else:
        body = wire.external_metric_value_list(samples)
        document["outcome"] = {"code": 200, "items": len(samples), "list": orjson.loads(body)}
    now = time.time()
    if decision is not None:
        stats = engine.stats_of(decision, EXTERNAL, None, parsed.metric)
        document["route"] = _route(engine, decision, stats)
        document["backend"] = _backend(engine, decision, stats, now)
        document["outcome"]["answeredBy"] = _answered_by(stats)
        document["series"] = {
            "count": len(samples),
            "first": [
                {
                    "labels": dict(sample.labels),
                    "value": format_quantity(sample.value),
                    "timestamp": _iso(sample.timestamp),
                    "age": age(now - sample.timestamp),
                }
                for sample in samples[:FIRST]
            ],
        }
        probe = await _probe(
            engine,
            decision,
            ExternalBackendRequest(
                metric=parsed.metric,
                namespace=parsed.namespace,
                metric_selector=parsed.metric_selector,
            ),
        )
        if probe is not None:
            document["backend"]["query"] = probe
        if not samples and "status" not in document["outcome"]:
            with_selector = (
                f" matching labelSelector {document['request']['labelSelector']}"
                if document["request"]["labelSelector"]
                else ""
            )
            outcome_causes = [
                causes.cause(
                    "NoValue",
                    f"backend {decision.host.name} has no series of {parsed.metric}"
                    f"{with_selector} in namespace {parsed.namespace}",
                ),
                *causes.backend_failing(engine.status, decision.host.name),
            ]
    document["causes"] = outcome_causes
    return document
