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

Owns the walk through the query layer's decisions; the document's sections are built in
`query.explain_sections`.

PURE: no I/O of its own (the backends' calls go through the engine).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import orjson

from custom_metrics_server.api import wire
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
)
from custom_metrics_server.errors import StatusError
from custom_metrics_server.machinery.quantity import format_quantity
from custom_metrics_server.query import causes
from custom_metrics_server.query import explain_sections as sections
from custom_metrics_server.query.decision import Decision
from custom_metrics_server.query.engine import QueryEngine, selector_text
from custom_metrics_server.query.hints import age
from custom_metrics_server.query.metric_status import MetricStats
from custom_metrics_server.query.routes import CUSTOM, EXTERNAL

__all__ = ["explain", "explain_parsed"]


async def explain(engine: QueryEngine, path: str, query: QueryParams) -> dict[str, Any] | None:
    """The explanation of the request `path` + `query`, or None when the path is not a metric
    URL (discovery, the status page, or outside the served groups: answered as usual)."""
    request: dict[str, Any] = {"path": path}
    try:
        parsed = parse(path, query)
    except StatusError as error:
        document = sections.document({**request, "error": error.message})
        document["outcome"] = sections.status_outcome(error)
        document["causes"] = sections.causes_of(error)
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


async def _explain_custom(  # noqa: PLR0915 - the steps in request order
    engine: QueryEngine, path: str, parsed: MetricRequest
) -> dict[str, Any]:
    document = sections.document(sections.custom_request(path, parsed))
    mapping = engine.cluster.mapping(parsed.resource) or await engine.cluster.resolve(
        parsed.resource
    )
    decision: Decision | None = None
    objects: Sequence[ObjectKey] = ()
    backend_request: BackendRequest | None = None
    absent: list[Any] = []  # the named object is not in the cluster view: why, as a cause
    if mapping is None:
        document["resource"] = {
            "found": False,
            "reason": f'the cluster view has no REST mapping for "{parsed.resource}"',
        }
    else:
        document["resource"] = sections.mapping(mapping)
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
            "first": [sections.object_name(key) for key in objects[: sections.FIRST]],
        }
        if parsed.wildcard and not objects:
            selection["causes"] = causes.empty_selection(
                selector_text(parsed, "label_selector"), resource, namespace
            )
        if not parsed.wildcard:
            absent = sections.not_in_view(engine.cluster, resource, namespace, parsed.name)
            selection["inClusterView"] = not absent
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
        document["outcome"] = sections.status_outcome(error)
        outcome_causes = sections.causes_of(error) + sections.backend_bug(error, decision)
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
        document["route"] = sections.route(engine, decision, stats)
        document["backend"] = sections.backend(engine, decision, stats, now)
        if objects:
            document["objects"]["samples"] = sections.samples_table(objects, samples, now)
        document["outcome"]["answeredBy"] = sections.answered_by(stats)
        if backend_request is not None:
            probe = await sections.probe(engine, decision, backend_request)
            if probe is not None:
                document["backend"]["query"] = probe
            shadows = await sections.shadowed(engine, decision, backend_request)
            if shadows:
                document["route"]["shadows"] = shadows
        if parsed.wildcard and objects and not samples:
            outcome_causes = engine.no_value_causes(
                parsed, decision, backend_request or _empty_request(mapping, parsed)
            )
    if not outcome_causes:
        outcome_causes = list(document.get("objects", {}).get("causes", ()))
    document["causes"] = outcome_causes + absent
    return document


def _empty_request(mapping: ResourceMapping, parsed: MetricRequest) -> BackendRequest:
    return BackendRequest(
        metric=MetricInfo(mapping.group_resource, mapping.namespaced, parsed.metric),
        mapping=mapping,
        objects=(),
        metric_selector=parsed.metric_selector,
    )


async def _explain_external(
    engine: QueryEngine, path: str, parsed: ExternalMetricRequest
) -> dict[str, Any]:
    document = sections.document(
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
        document["outcome"] = sections.status_outcome(error)
        outcome_causes = sections.causes_of(error) + sections.backend_bug(error, decision)
    else:
        body = wire.external_metric_value_list(samples)
        document["outcome"] = {"code": 200, "items": len(samples), "list": orjson.loads(body)}
    now = time.time()
    if decision is not None:
        stats = engine.stats_of(decision, EXTERNAL, None, parsed.metric)
        document["route"] = sections.route(engine, decision, stats)
        document["backend"] = sections.backend(engine, decision, stats, now)
        document["outcome"]["answeredBy"] = sections.answered_by(stats)
        document["series"] = {
            "count": len(samples),
            "first": [
                {
                    "labels": dict(sample.labels),
                    "value": format_quantity(sample.value),
                    "timestamp": sections.iso(sample.timestamp),
                    "age": age(now - sample.timestamp),
                }
                for sample in samples[: sections.FIRST]
            ],
        }
        backend_request = ExternalBackendRequest(
            metric=parsed.metric,
            namespace=parsed.namespace,
            metric_selector=parsed.metric_selector,
        )
        probe = await sections.probe(engine, decision, backend_request)
        if probe is not None:
            document["backend"]["query"] = probe
        shadows = await sections.shadowed(engine, decision, backend_request)
        if shadows:
            document["route"]["shadows"] = shadows
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
