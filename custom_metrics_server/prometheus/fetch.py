"""Fetching for the Prometheus backend: running a planned query on its server, what a failed
query becomes, and reading the answer into samples (custom: in the requested objects' order;
external: one item per series).

Owns the call and the reading; it must not plan queries (`prometheus.custom_plan`) nor list
series (`prometheus.backend`). Cost per request: one call to Prometheus
(`PrometheusClient.query`, about 60 us of CPU over a kept-alive connection for one series), plus
O(series returned + objects requested) to read the answer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalSample,
    ObjectRef,
    Sample,
)
from custom_metrics_server.errors import BackendTimeout, BackendUnavailable, InternalError
from custom_metrics_server.prometheus import results
from custom_metrics_server.prometheus.answers import PrometheusError
from custom_metrics_server.prometheus.custom_plan import Planned
from custom_metrics_server.prometheus.live_config import LiveConfig
from custom_metrics_server.prometheus.rules import Rule

__all__ = ["custom_samples", "external_samples", "run_query", "vector"]

# The backend's logger: operators filter on it (the log lines are unchanged by the move).
logger = logging.getLogger("custom_metrics_server.prometheus.backend")


async def run_query(
    live: LiveConfig, rule: Rule, query: str, metric: str, *, compress: bool = True
) -> Any:
    """The answer of `query` on the rule's server; a failure as the request's Status error
    (timeout 504, unavailable 503, a query the engine rejects 500 naming the rule)."""
    client = live.client_or_none(rule.server)
    if client is None:  # pragma: no cover - a reload dropped the server mid-request
        raise BackendUnavailable(f"Prometheus server {rule.server!r} is not configured")
    try:
        return await client.query(query, compress=compress)
    except PrometheusError as err:
        message = f"metric {metric!r} ({rule.where}): {err}"
        if err.kind == "timeout":
            raise BackendTimeout(message) from err
        if err.kind == "unavailable":
            raise BackendUnavailable(message) from err
        logger.error("prometheus rejected %r: %s", query, err)
        raise InternalError(f"{message}; query: {query}") from err


def vector(data: Any, rule: Rule, metric: str) -> list[object]:
    """The series of an instant-vector answer. Another result type is the rule's fault
    (500, naming it); a malformed answer is the engine's (503)."""
    kind = data.get("resultType") if isinstance(data, Mapping) else None
    if kind in ("matrix", "string", "scalar"):
        raise InternalError(
            f"metric {metric!r} ({rule.where}): metricsQuery returned a {kind}, "
            "not an instant vector"
        )
    result = results.vector_result(data)
    if result is None:
        raise BackendUnavailable(
            f"metric {metric!r} ({rule.where}): Prometheus sent a malformed query answer"
        )
    return result


def custom_samples(
    request: BackendRequest,
    planned: Planned,
    data: Any,
    names: list[str],
    namespace: str,
    *,
    refs: dict[tuple[str, str, str, str], ObjectRef],
) -> list[Sample]:
    """The samples of a custom query's answer, in the requested objects' order (absent
    ones left out, or 0 under `absent: zero`). O(series + objects)."""
    rule, label, query, window = planned
    mapping = request.mapping
    wanted = set(names)
    found: dict[str, tuple[Decimal, float]] = {}
    for labels, value, stamp in results.samples(vector(data, rule, request.metric.metric)):
        name = labels.get(label)
        if name not in wanted or name in found:
            continue
        if query.namespace_label is None or (
            labels.get(query.namespace_label, namespace) == namespace
        ):
            found[name] = (value, stamp)
    now = time.time()
    samples = []
    if len(refs) > 200_000:
        refs.clear()
    kind, api_version = mapping.kind, mapping.api_version
    for object_namespace, name in request.objects:
        hit = found.get(name)
        if hit is None:
            if rule.absent != "zero":
                continue
            hit = (Decimal(0), now)
        key = (kind, api_version, object_namespace, name)
        ref = refs.get(key)
        if ref is None:
            ref = refs[key] = ObjectRef(kind, object_namespace, name, api_version)
        samples.append(
            Sample(
                described=ref,
                metric=request.metric.metric,
                value=hit[0],
                timestamp=hit[1],
                window=window,
                reused=False,
            )
        )
    return samples


def external_samples(
    request: ExternalBackendRequest, rule: Rule, data: Any, window: int | None
) -> list[ExternalSample]:
    """The items of an external query's answer: one per series, or the scalar; one zero under
    `absent: zero` when there is none. O(series)."""
    found: list[ExternalSample] = []
    if isinstance(data, Mapping) and data.get("resultType") == "scalar":
        scalar = results.point(data.get("result"))
        if scalar is not None:
            found.append(
                ExternalSample(request.metric, {}, scalar[0], scalar[1], window, reused=False)
            )
    else:
        for labels, value, stamp in results.samples(vector(data, rule, request.metric)):
            series_labels = {str(k): str(v) for k, v in labels.items()}
            found.append(
                ExternalSample(request.metric, series_labels, value, stamp, window, reused=False)
            )
    if not found and rule.absent == "zero":
        found.append(
            ExternalSample(request.metric, {}, Decimal(0), time.time(), window, reused=False)
        )
    return found
