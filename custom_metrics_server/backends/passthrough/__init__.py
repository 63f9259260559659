"""The pass-through backend: forwards the metrics it is routed to another metrics server
(`backend.py`), through a reloading HTTPS client (`upstream.py`), reading its JSON answers into
our samples (`decode.py`). docs/backends.md, "Pass-through", is the operator's page."""

from custom_metrics_server.backends.passthrough.backend import (
    PassthroughBackend,
    PassthroughSettings,
    prefers_wildcard,
)
from custom_metrics_server.backends.passthrough.upstream import Upstream, UpstreamConfig

__all__ = [
    "PassthroughBackend",
    "PassthroughSettings",
    "Upstream",
    "UpstreamConfig",
    "prefers_wildcard",
]
