"""The database goes away and comes back, in process: 503 (`BackendUnavailable`), not ready with
the reason, and ready again by itself. Each test has a PostgreSQL server of its own."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from custom_metrics_server import sdk
from jobsdb import JobsDatabase, backend_for, external_request, running, series, wait_for


async def test_a_stopped_database_is_unavailable_and_the_backend_recovers_by_itself(
    private_jobs: JobsDatabase, tmp_path: Path
) -> None:
    server = private_jobs.server
    emails = external_request("jobs_pending", "queue=emails")
    async with running(backend_for(private_jobs.settings(tmp_path))) as backend:
        assert series(await backend.fetch_external(emails)) == {"emails": 4}

        await asyncio.to_thread(server.stop)
        with pytest.raises(sdk.BackendUnavailable, match="database"):
            await backend.fetch_external(emails)
        await wait_for(backend, ready=False)
        reason = backend.ready().reason
        assert "database unreachable" in reason
        assert "Connection refused" in reason
        # Known down: a fetch fails at once instead of waiting for a connection.
        started = time.monotonic()
        with pytest.raises(sdk.BackendUnavailable, match="database unreachable"):
            await backend.fetch_external(emails)
        assert time.monotonic() - started < 0.5

        await asyncio.to_thread(server.start)
        started = time.monotonic()
        await wait_for(backend, ready=True, within=30)
        recovered = time.monotonic() - started
        assert series(await backend.fetch_external(emails)) == {"emails": 4}
    # Bounded by the pool's capped reconnection backoff plus a readiness interval.
    assert recovered < 15, recovered


async def test_a_database_down_at_start_up_is_a_backend_that_is_not_ready_yet(
    private_jobs: JobsDatabase, tmp_path: Path
) -> None:
    server = private_jobs.server
    backend = backend_for(private_jobs.settings(tmp_path))
    await asyncio.to_thread(server.stop)
    async with backend:  # the start does not fail: the server starts without its database
        await wait_for(backend, ready=False)
        state = await backend.check()
        assert not state.ready
        assert "database unreachable" in state.reason
        await asyncio.to_thread(server.start)
        await wait_for(backend, ready=True, within=30)
        answer = await backend.fetch_external(external_request("jobs_pending"))
        assert series(answer) == {"emails": 4, "reports": 2}


async def test_sessions_ended_by_the_server_are_replaced_without_an_error(
    private_jobs: JobsDatabase, tmp_path: Path
) -> None:
    # A restart between two fetches: the pooled connections are dead, and the pool's check
    # replaces them before a query uses one, so the first fetch after it answers.
    server = private_jobs.server
    emails = external_request("jobs_pending", "queue=emails")
    async with running(
        backend_for(private_jobs.settings(tmp_path, healthInterval="60m"))
    ) as backend:
        assert series(await backend.fetch_external(emails)) == {"emails": 4}
        await asyncio.to_thread(server.stop)
        await asyncio.to_thread(server.start)
        assert series(await backend.fetch_external(emails)) == {"emails": 4}
        assert backend.ready().ready
