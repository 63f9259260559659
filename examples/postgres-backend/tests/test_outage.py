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
        # Ready means the pool serves again (not only that the database answers a probe).
        assert backend.ready().reason == ""
        assert series(await backend.fetch_external(emails)) == {"emails": 4}
        stopping = time.monotonic()
    # Bounded by the pool's capped reconnection backoff plus a readiness interval.
    assert recovered < 15, recovered
    # The stop does not hang on a readiness check that was waiting for a pooled connection.
    assert time.monotonic() - stopping < 5


async def test_the_stop_ends_the_readiness_loop_even_when_a_cancellation_is_swallowed(
    jobs: JobsDatabase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Python 3.11's asyncio.wait_for, which psycopg_pool uses while a client waits for a
    # connection, loses a cancellation that arrives as the connection is handed over: the
    # readiness check then returns normally, and a loop stopped by one cancel went on forever.
    backend = backend_for(jobs.settings(tmp_path))
    real_check = backend.check
    waiting = asyncio.Event()
    swallowed = 0

    async def check() -> sdk.Readiness:
        nonlocal swallowed
        if backend.ready().ready and not swallowed:  # waits, and loses the stop's cancel
            waiting.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                swallowed += 1
        return await real_check()

    monkeypatch.setattr(backend, "check", check)
    # The timeout bounds the test: its own cancellation ends a loop that one cancel did not.
    async with asyncio.timeout(10):
        async with running(backend):
            await waiting.wait()
            watcher = backend._watcher
            assert watcher is not None
            stopping = time.monotonic()
    assert time.monotonic() - stopping < 5  # the stop itself ended the loop
    assert swallowed == 1
    assert watcher.done()
    assert backend.ready().reason == "stopped"


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
