"""Helpers of the pass-through tests: a backend made as the server makes it (its settings
model, its factory, a `BackendContext`), over a cluster view holding the objects asked for."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from custom_metrics_server.backends.passthrough import PassthroughBackend
from custom_metrics_server.cluster.in_memory import InMemoryCluster
from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    MetricInfo,
    ObjectKey,
)
from custom_metrics_server.machinery.label_parser import parse_selector
from custom_metrics_server.machinery.labels import EVERYTHING
from custom_metrics_server.plugins.builtin_remote import PassthroughPluginSettings, passthrough
from custom_metrics_server.sdk import BackendContext


def make_backend(
    settings: dict[str, Any],
    *,
    cluster: InMemoryCluster | None = None,
    timeout: float = 10.0,
    base_dir: Path = Path("."),
    name: str = "up",
) -> PassthroughBackend:
    """`type: passthrough` with these settings, as the loader makes it."""
    context = BackendContext(
        name=name,
        cluster=cluster or InMemoryCluster(),
        logger=logging.getLogger(f"custom_metrics_server.backends.{name}"),
        timeout=timeout,
        base_dir=base_dir,
    )
    made = passthrough(PassthroughPluginSettings.model_validate(settings), context=context)
    backend = made.backend
    assert isinstance(backend, PassthroughBackend)
    return backend


def custom_request(
    cluster: InMemoryCluster,
    resource: str,
    metric: str,
    objects: list[ObjectKey],
    metric_selector: str = "",
) -> BackendRequest:
    """What our query layer hands the backend for these objects."""
    mapping = cluster.mapping(resource)
    assert mapping is not None
    return BackendRequest(
        metric=MetricInfo(mapping.group_resource, mapping.namespaced, metric),
        mapping=mapping,
        objects=tuple(objects),
        metric_selector=parse_selector(metric_selector) if metric_selector else EVERYTHING,
    )


def external_request(
    metric: str, namespace: str = "default", selector: str = ""
) -> ExternalBackendRequest:
    """An external metric request as our query layer builds it."""
    return ExternalBackendRequest(
        metric=metric,
        namespace=namespace,
        metric_selector=parse_selector(selector) if selector else EVERYTHING,
    )
