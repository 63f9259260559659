"""The server's External metrics, read by a backend through the engine (a MetricDefinitions
formula's platform inputs, docs/metric-definitions-platform.md): the answer
`GET /apis/external.metrics.k8s.io/v1beta1/namespaces/<ns>/<metric>` with no selector would
get (the routes, the backend's deadline, its failure policy and the metric's status apply),
except that a backend reading this way is never asked by a read: no read recurses into the
backend that made it.

`connect(engine, built)` gives each built-in entry that asks (`Provision.reads_external`) the
reader; `LiveBackends` calls it before it starts the backends and at every reload (the reader
follows the engine's routing table in force, and the set of readers of that reload).

Cost: one engine read (a memoised routing decision, then the backend's fetch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from custom_metrics_server.domain import ExternalMetricRequest, ExternalSample
from custom_metrics_server.machinery.labels import EVERYTHING
from custom_metrics_server.plugins.builtin import ExternalRead
from custom_metrics_server.plugins.loader import Built
from custom_metrics_server.query.engine import QueryEngine
from custom_metrics_server.sdk.backend import MetricsBackend

__all__ = ["connect", "external_reader"]


def external_reader(engine: QueryEngine, readers: Sequence[MetricsBackend]) -> ExternalRead:
    """Reads an External metric of a namespace through `engine`; a metric that only one of
    `readers` serves has no series."""

    async def read(namespace: str, metric: str) -> Sequence[ExternalSample]:
        decision = engine.router.decide_external(metric)
        if decision is None or any(decision.backend is reader for reader in readers):
            return ()
        request = ExternalMetricRequest(
            namespace=namespace, metric=metric, metric_selector=EVERYTHING
        )
        return await engine.external(request)

    return read


def connect(engine: QueryEngine, built: Iterable[Built]) -> None:
    """Give every entry that reads External metrics its reader over `engine`."""
    asking: list[tuple[Callable[[ExternalRead], None], MetricsBackend]] = [
        (b.provision.reads_external, b.host.backend)
        for b in built
        if b.provision is not None and b.provision.reads_external is not None
    ]
    if not asking:
        return
    read = external_reader(engine, [backend for _, backend in asking])
    for give, _ in asking:
        give(read)
