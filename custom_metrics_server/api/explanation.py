"""The explanation document (`?explain=1`) and the per-metric status page: their kinds, their
JSON bodies, and their readable text (what `custom-metrics-server explain` prints, and the
status page itself).

Neither is a Kubernetes API type: they are this server's own JSON documents, with a `kind` and
an `apiVersion` that name this project (`custom-metrics-server/v1alpha1`), not a served API
group, so that a reader (or a script) can tell them from a `Status` or a `MetricValueList`
and know which fields to expect. docs/operations.md describes both.

PURE: bytes and text out of JSON-shaped documents.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from custom_metrics_server.api import wire

__all__ = [
    "API_VERSION",
    "KIND",
    "STATUS_KIND",
    "render_status_text",
    "render_text",
]

KIND: Final = "MetricExplanation"
STATUS_KIND: Final = "MetricStatusList"
#: Names the project and the document's version, not a Kubernetes API group.
API_VERSION: Final = "custom-metrics-server/v1alpha1"


def body(document: Mapping[str, Any], *, pretty: bool = True) -> bytes:
    """The JSON body of a document (indented unless asked otherwise: people read these)."""
    raw = wire.dumps(document)
    return wire.prettify(raw) if pretty else raw


def _line(label: str, value: object) -> str:
    return f"  {label + ':':<22}{value}"


def _causes(causes: Sequence[Mapping[str, Any]], indent: str = "  ") -> list[str]:
    return [f"{indent}- {cause.get('message', '')} [{cause.get('reason', '')}]" for cause in causes]


def render_text(document: Mapping[str, Any]) -> str:  # noqa: PLR0915 - sections
    """A readable explanation, section by section (request, resource, route, objects,
    backend, outcome, why)."""
    lines: list[str] = []
    request = document.get("request", {})
    lines.append(f"Request: GET {request.get('path', '')}")
    if "error" in request:
        lines.append(_line("refused", request["error"]))
    fields: tuple[str, ...] = ("api", "group", "version", "form", "resource", "namespace")
    fields = (*fields, "name", "metric", "labelSelector", "metricLabelSelector")
    lines.extend(_line(key, request[key]) for key in fields if request.get(key) not in (None, ""))
    resource = document.get("resource")
    if resource is not None:
        lines.append("Resource:")
        if resource.get("found"):
            scope = "namespaced" if resource.get("namespaced") else "cluster-scoped"
            lines.append(
                _line(
                    "mapping",
                    f"{resource['groupResource']} -> {resource['kind']} "
                    f"({resource['apiVersion']}, {scope})",
                )
            )
        else:
            lines.append(_line("mapping", f"none: {resource.get('reason', '')}"))
    route = document.get("route")
    if route is not None:
        lines.append("Route:")
        lines.append(_line("backend", route.get("backend") or "none"))
        lines.append(_line("decided by", route.get("decidedBy", "")))
        if route.get("backend"):
            lines.append(_line("backend lists it", "yes" if route.get("listed") else "no"))
        policy = route.get("failurePolicy")
        if policy:
            max_age = policy.get("maxAgeSeconds")
            lines.append(
                _line(
                    "failure policy",
                    f"absent: {policy['absent']}, failure: {policy['failure']}"
                    + (f", maxAge: {max_age:g}s" if max_age is not None else "")
                    + (f" ({policy['source']})" if policy.get("source") else ""),
                )
            )
        elif route.get("backend"):
            lines.append(_line("failure policy", "none (errors and absences answered as such)"))
        lines += [
            _line(
                "shadows",
                f"MetricDefinition {definition['namespace']}/{definition['name']} "
                f"({shadow['backend']}): {definition['reason']}",
            )
            for shadow in route.get("shadows", ())
            for definition in shadow.get("definitions", ())
        ]
        lines += _causes(route.get("causes", ()), "    ")
    objects = document.get("objects")
    if objects is not None:
        lines.append("Objects:")
        where = f" in namespace {objects['namespace']}" if objects.get("namespace") else ""
        selector = (
            f" by labelSelector {objects['labelSelector']}" if objects.get("labelSelector") else ""
        )
        lines.append(_line("matched", f"{objects['matched']}{selector}{where}"))
        if objects.get("first"):
            more = " ..." if objects["matched"] > len(objects["first"]) else ""
            lines.append(_line("first", ", ".join(objects["first"]) + more))
        if "inClusterView" in objects:
            seen = "yes" if objects["inClusterView"] else "no (the server does not check; see Why)"
            lines.append(_line("in cluster view", seen))
        samples = objects.get("samples")
        if samples is not None:
            lines.append(
                _line(
                    "with values",
                    f"{samples['withValues']} (newest {samples['newestAge'] or '-'}, "
                    f"oldest {samples['oldestAge'] or '-'})",
                )
            )
            for value in samples.get("values", ()):
                lines.append(f"    {value['name']}: {value['value']} ({value['age']} old)")
            if samples.get("withoutValues"):
                lines.append(
                    _line(
                        "without values",
                        f"{samples['withoutValues']}: " + ", ".join(samples["firstWithoutValues"]),
                    )
                )
    series = document.get("series")
    if series is not None:
        lines.append("Series:")
        lines.append(_line("count", series["count"]))
        for item in series.get("first", ()):
            labels = ",".join(f"{k}={v}" for k, v in sorted(item["labels"].items()))
            lines.append(f"    {{{labels}}}: {item['value']} ({item['age']} old)")
    backend = document.get("backend")
    if backend is not None:
        lines.append("Backend:")
        ready = "yes" if backend.get("ready") else "no"
        if backend.get("readyReason"):
            ready += f" ({backend['readyReason']})"
        lines.append(_line("name", backend["name"]))
        lines.append(_line("ready", ready))
        lines.append(_line("deadline", f"{backend['timeoutSeconds']:g}s"))
        query = backend.get("query")
        if query:
            for key, value in query.items():
                lines.append(_line(key, value))
        last = backend.get("lastError")
        lines.append(
            _line(
                "last error",
                "none"
                if last is None
                else f"{last['ago']} ago ({last['metric']}): {last['message']}",
            )
        )
        status = backend.get("metricStatus")
        if status is not None:
            counts = ", ".join(f"{k} {v}" for k, v in status["requests"].items() if v)
            lines.append(_line("this metric", counts or "no requests yet"))
    outcome = document.get("outcome", {})
    lines.append("Outcome:")
    if "status" in outcome:
        status = outcome["status"]
        lines.append(_line("answer", f"{outcome['code']} {status.get('reason', '')}"))
        lines.append(_line("message", status.get("message", "")))
    else:
        lines.append(_line("answer", f"{outcome.get('code')} with {outcome.get('items')} items"))
    if outcome.get("answeredBy"):
        lines.append(_line("answered by", outcome["answeredBy"]))
    causes = document.get("causes", ())
    if causes:
        lines.append("Why:")
        lines += _causes(causes)
    return "\n".join(lines) + "\n"


def render_status_text(document: Mapping[str, Any]) -> str:
    """The status page as a table: one row per metric (its backend, requests by outcome, last
    outcome, last success and error), then the backends' last failures, the MetricDefinitions
    and the names nobody serves that were asked for."""
    header = (
        "API",
        "RESOURCE",
        "METRIC",
        "BACKEND",
        "FOUND",
        "NOT-FOUND",
        "ERROR",
        "TIMEOUT",
        "POLICY-ANSWERS",
        "LAST",
        "LAST-SUCCESS",
        "LAST-ERROR",
        "NEWEST-SAMPLE",
        "POLICY",
    )
    rows = [header]
    for item in document.get("items", ()):
        requests = item["requests"]
        rows.append(
            (
                item["api"],
                item["resource"] or "-",
                item["metric"],
                item["backend"] or "-",
                str(requests["found"]),
                str(requests["not_found"]),
                str(requests["error"]),
                str(requests["timeout"]),
                str(requests["zero"] + requests["last_good"]),
                item["lastOutcome"] or "-",
                item["lastSuccessAgo"] or "-",
                item["lastErrorAgo"] or "-",
                item["newestSampleAge"] or "-",
                item["policy"] or "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    failures = document.get("backends", ())
    if failures:
        lines.append("")
        lines.append("Backends:")
        for backend in failures:
            last = backend.get("lastError")
            state = "ready" if backend["ready"] else f"not ready: {backend['readyReason']}"
            text = f"  {backend['name']}: {state}"
            if last:
                text += f"; last error {last['ago']} ago ({last['metric']}): {last['message']}"
            lines.append(text)
    definitions = document.get("definitions", ())
    if definitions:
        lines.append("")
        lines.append("MetricDefinitions:")
        table = [
            (
                "NAMESPACE",
                "NAME",
                "METRIC",
                "SOURCE",
                "READY",
                "REASON",
                "SHADOWED BY",
                "VALUE",
                "AGE",
            )
        ]
        table += [
            (
                str(row["namespace"]),
                str(row["name"]),
                str(row["metric"]),
                str(row["source"]),
                "True" if row["ready"] else "False",
                str(row["reason"]),
                str(row.get("shadowedBy") or "-"),
                row["lastValue"] or "-",
                row["lastValueAgo"] or "-",
            )
            for row in definitions
        ]
        sizes = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        lines += [
            "  "
            + "  ".join(cell.ljust(size) for cell, size in zip(row, sizes, strict=True)).rstrip()
            for row in table
        ]
    unknown = document.get("unknownMetrics", ())
    if unknown:
        lines.append("")
        lines.append("Asked for, served by no backend (most recent first):")
        for item in unknown:
            where = (
                f" of {item['resource']}"
                if item["resource"] and item["resource"] != "other"
                else ""
            )
            lines.append(
                f"  {item['api']} {item['metric']}{where}: {item['requests']} requests, "
                f"last {item['lastAgo']} ago"
            )
    return "\n".join(lines) + "\n"
