"""Test-only: `custom-metrics-server serve` with a slow `--demo-file` backend.

    python -m tests.fakes.slow_backend serve --demo --demo-file FIXTURE.yaml [serve flags...]

is the real `serve` command, except that the fixture may carry `delays: {metric: seconds}`:
fetches of those metrics (custom or external) wait that long first, cancellably, as a hanging
backend would. The limit and shutdown tests (tests/test_slow_backend.py) run it. The package
knows nothing of delays: this module wraps the fixture's `MemoryBackend`, so the serving hot
path carries no check for them.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from custom_metrics_server import cli
from custom_metrics_server.backends.memory import MemoryBackend, Snapshot, load_fixture
from custom_metrics_server.cluster.in_memory import InMemoryCluster
from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalSample,
    Sample,
)
from custom_metrics_server.plugins import builtin


class DelayedMemoryBackend(MemoryBackend):
    """A `MemoryBackend` whose fetches of some metrics first wait."""

    def __init__(self, name: str, snapshot: Snapshot | None, delays: Mapping[str, float]) -> None:
        super().__init__(name, snapshot)
        self.delays = dict(delays)

    async def fetch(self, request: BackendRequest) -> Sequence[Sample]:
        """`MemoryBackend.fetch`, after the metric's delay (cancellable)."""
        await asyncio.sleep(self.delays.get(request.metric.metric, 0))
        return await super().fetch(request)

    async def fetch_external(self, request: ExternalBackendRequest) -> Sequence[ExternalSample]:
        """`MemoryBackend.fetch_external`, after the metric's delay (cancellable)."""
        await asyncio.sleep(self.delays.get(request.metric, 0))
        return await super().fetch_external(request)


def delays_of(document: Mapping[str, Any]) -> dict[str, float]:
    """The fixture's `delays`: metric -> seconds >= 0."""
    delays = document.get("delays") or {}
    if not isinstance(delays, Mapping):
        raise ValueError(
            f"invalid fixture at delays: not a mapping of metric names to seconds: {delays!r}"
        )
    found = {}
    for metric, seconds in delays.items():
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            raise ValueError(
                f"invalid fixture at delays: {metric}: not a number of seconds >= 0: {seconds!r}"
            )
        found[str(metric)] = float(seconds)
    return found


def load_slow_fixture(
    document: Mapping[str, Any], *, now: float
) -> tuple[InMemoryCluster, MemoryBackend]:
    """`load_fixture`, with the backend slowed down by the fixture's `delays`."""
    cluster, backend = load_fixture(document, now=now)
    delays = delays_of(document)
    if delays:
        return cluster, DelayedMemoryBackend(backend.name, backend.snapshot, delays)
    return cluster, backend


def main(argv: Sequence[str] | None = None) -> int:
    """The real CLI, loading `--demo-file` fixtures through `load_slow_fixture`."""
    # The fixture type reads this name when it makes its backend.
    builtin.load_fixture = load_slow_fixture  # type: ignore[assignment]
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
