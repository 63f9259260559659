"""The event-loop lag self-metric: a blocked loop shows in the histogram and in one warning."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time

import pytest

from custom_metrics_server.runtime.stalls import STALL_TRACE_ENV
from custom_metrics_server.server.observability import ServerMetrics


def _lag_samples(metrics: ServerMetrics) -> tuple[float, float]:
    """(count, sum) of the lag histogram."""
    text = metrics.exposition().decode()
    values = {}
    for line in text.splitlines():
        for suffix in ("_count", "_sum"):
            name = f"custom_metrics_server_event_loop_lag_seconds{suffix} "
            if line.startswith(name):
                values[suffix] = float(line.split()[1])
    return values["_count"], values["_sum"]


async def test_a_blocked_event_loop_is_measured_and_logged(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("custom_metrics_server.server.observability.LAG_WARNING", 0.2)
    metrics = ServerMetrics()
    watcher = asyncio.create_task(metrics.watch_loop_lag(interval=0.01))
    try:
        for _ in range(200):  # a loaded machine may wake us late: wait for a few samples
            await asyncio.sleep(0.01)
            quiet_count, quiet_sum = _lag_samples(metrics)
            if quiet_count >= 3:
                break
        assert quiet_count >= 3
        time.sleep(0.3)  # noqa: ASYNC251 - the point: block the loop
        for _ in range(200):
            await asyncio.sleep(0.01)
            count, total = _lag_samples(metrics)
            if count > quiet_count:
                break
    finally:
        watcher.cancel()
    assert count > quiet_count
    assert total - quiet_sum >= 0.25
    warnings = [r for r in caplog.records if "event loop was blocked" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].levelno == logging.WARNING


async def test_gc_pauses_are_observed_by_generation() -> None:
    metrics = ServerMetrics()
    watcher = asyncio.create_task(metrics.watch_loop_lag(interval=0.01))
    try:
        await asyncio.sleep(0.02)  # the watcher has installed its gc callback
        before = list(metrics.gc_pauses.count)
        gc.collect(2)
        gc.collect(0)
        after = list(metrics.gc_pauses.count)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    assert after[2] == before[2] + 1
    assert after[0] == before[0] + 1
    text = metrics.exposition().decode()
    assert 'custom_metrics_server_gc_pause_seconds_count{generation="2"}' in text
    # Cancelled: the callback is gone, so later collections are not counted.
    gc.collect(2)
    assert metrics.gc_pauses.count[2] == after[2]


async def test_the_stall_sampler_logs_the_stalled_stack(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STALL_TRACE_ENV, "50")
    metrics = ServerMetrics()
    watcher = asyncio.create_task(metrics.watch_loop_lag(interval=0.01))
    try:
        await asyncio.sleep(0.05)

        def hold_the_loop() -> None:
            time.sleep(0.3)  # releases the GIL: the sampler sees this frame

        hold_the_loop()
        for _ in range(300):  # reported once the loop runs again (the thread may be late)
            await asyncio.sleep(0.01)
            if any("stalled" in r.getMessage() for r in caplog.records):
                break
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    stalls = [r.getMessage() for r in caplog.records if "event loop stalled" in r.getMessage()]
    assert stalls
    assert "hold_the_loop" in stalls[0]
