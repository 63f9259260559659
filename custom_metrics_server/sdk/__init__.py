"""The public backend SDK: the only import a plugin needs.

    from custom_metrics_server import sdk

Contract version `sdk.__version__` (`MAJOR.MINOR`; a minor adds, a major breaks; see
docs/backends.md, "Stability"). Everything in `__all__` is covered by that promise; anything
else in the package may change in any release.

* Protocols, by capability: `CustomMetricsSource`, `ExternalMetricsSource` (at least one),
  `Lifecycle`, `ReadinessCheck` and `Replicable` (optional; `Replicable` since 1.1);
  `MetricsBackend` is their union, as built-in backends implement it; `ClusterView` is the
  cluster a backend may read.
* Making a backend: `factory` (marks a factory: its settings model, the contract it needs),
  `BackendContext` (what a factory is told: name, cluster view, logger, deadline, base dir).
* Values: the request and answer types (frozen dataclasses and named tuples) and the helpers
  `sample` and `external_sample` that build answers from a request.
* Label selectors: `Selector` (`matches`, `is_everything`, `requirements`, and since 1.2
  `equality_terms()`, `requires_exact(label)`, `to_label_selector()`, `str()`), `Requirement`
  (`key`, `operator`, `values`, `matches`), `Operator`, `EVERYTHING`, `parse_selector`.
* Errors a backend raises: `BackendUnavailable` (503), `BackendTimeout` (504), `BadRequest`
  (400); the server adds the backend's name. Any other exception is a bug: a masked 500 naming
  the backend, the traceback in the server's log only.
"""

from __future__ import annotations

from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalSample,
    GroupResource,
    MetricInfo,
    ObjectKey,
    ObjectRef,
    Readiness,
    ResourceMapping,
    Sample,
)
from custom_metrics_server.errors import BackendTimeout, BackendUnavailable, BadRequest
from custom_metrics_server.machinery.label_parser import parse_selector
from custom_metrics_server.machinery.labels import EVERYTHING, Operator, Requirement, Selector
from custom_metrics_server.sdk.backend import ClusterView, MetricsBackend
from custom_metrics_server.sdk.factory import BackendContext, factory
from custom_metrics_server.sdk.samples import external_sample, sample
from custom_metrics_server.sdk.sources import (
    CustomMetricsSource,
    ExternalMetricsSource,
    Lifecycle,
    ReadinessCheck,
    Replicable,
)
from custom_metrics_server.sdk.version import VERSION, __version__, compatible

__all__ = [
    "EVERYTHING",
    "VERSION",
    "BackendContext",
    "BackendRequest",
    "BackendTimeout",
    "BackendUnavailable",
    "BadRequest",
    "ClusterView",
    "CustomMetricsSource",
    "ExternalBackendRequest",
    "ExternalMetricsSource",
    "ExternalSample",
    "GroupResource",
    "Lifecycle",
    "MetricInfo",
    "MetricsBackend",
    "ObjectKey",
    "ObjectRef",
    "Operator",
    "Readiness",
    "ReadinessCheck",
    "Replicable",
    "Requirement",
    "ResourceMapping",
    "Sample",
    "Selector",
    "__version__",
    "compatible",
    "external_sample",
    "factory",
    "parse_selector",
    "sample",
]
