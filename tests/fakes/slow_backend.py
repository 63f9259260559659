"""Test-only plugin: a fixture backend whose fetches of some metrics first wait.

    backends:
      - {name: objects, type: fixture, settings: {file: slow.yaml}}   # the cluster view
      - name: memory
        type: tests.fakes.slow_backend:slow_fixture
        settings: {file: slow.yaml, delays: {slow: 3600}}
        routes: [{api: custom}]

`slow_fixture` is loaded by the real `serve --backends-config` like any plugin (this repository
on PYTHONPATH), so the server runs unchanged: fetches of a metric in `delays` wait that long
first, cancellably, as a hanging backend would. The limit and shutdown tests
(tests/integration/test_slow_backend.py) use it. The package knows nothing of delays, so the serving hot
path carries no check for them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from custom_metrics_server import sdk
from custom_metrics_server.backends.memory import MemoryBackend, Snapshot, load_fixture


class DelayedMemoryBackend(MemoryBackend):
    """A `MemoryBackend` whose fetches of some metrics first wait."""

    def __init__(self, name: str, snapshot: Snapshot | None, delays: Mapping[str, float]) -> None:
        super().__init__(name, snapshot)
        self.delays = dict(delays)

    async def fetch(self, request: sdk.BackendRequest) -> Sequence[sdk.Sample]:
        """`MemoryBackend.fetch`, after the metric's delay (cancellable)."""
        await asyncio.sleep(self.delays.get(request.metric.metric, 0))
        return await super().fetch(request)

    async def fetch_external(
        self, request: sdk.ExternalBackendRequest
    ) -> Sequence[sdk.ExternalSample]:
        """`MemoryBackend.fetch_external`, after the metric's delay (cancellable)."""
        await asyncio.sleep(self.delays.get(request.metric, 0))
        return await super().fetch_external(request)


def delays_of(settings: Mapping[str, Any]) -> dict[str, float]:
    """The settings' `delays`: metric -> seconds >= 0."""
    delays = settings.get("delays") or {}
    if not isinstance(delays, Mapping):
        raise ValueError(f"delays: not a mapping of metric names to seconds: {delays!r}")
    found = {}
    for metric, seconds in delays.items():
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            raise ValueError(f"delays: {metric}: not a number of seconds >= 0: {seconds!r}")
        found[str(metric)] = float(seconds)
    return found


def slow_fixture(
    settings: Mapping[str, Any], *, context: sdk.BackendContext
) -> DelayedMemoryBackend:
    """The fixture `settings.file` (relative to the backends file) served with `delays`."""
    path = Path(settings["file"])
    document = yaml.safe_load((context.base_dir / path).read_text()) or {}
    _, backend = load_fixture(document, now=time.time())
    return DelayedMemoryBackend(context.name, backend.snapshot, delays_of(settings))
