"""The event-loop lag self-metric: a blocked loop shows in the histogram and in one warning."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

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
