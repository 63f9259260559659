"""BoundedThreads: bounded, cancellable before start, hung calls keep their slot."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from custom_metrics_server.runtime.threads import BoundedThreads


async def test_a_call_runs_on_a_named_daemon_thread_and_returns_its_result() -> None:
    pool = BoundedThreads(2, name="backend-x")
    thread = await pool.run(lambda _: threading.current_thread(), None)
    assert thread.name == "backend-x-0"
    assert thread.daemon
    assert await pool.run(lambda n: n * 2, 21) == 42
    pool.close()


async def test_an_exception_reaches_the_caller() -> None:
    pool = BoundedThreads(1, name="t")

    def fail(_: object) -> None:
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        await pool.run(fail, None)
    assert pool.busy == 0
    pool.close()


async def test_at_most_size_calls_run_at_once() -> None:
    pool = BoundedThreads(3, name="t")
    running = peak = 0
    lock = threading.Lock()

    def work(_: object) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.02)
        with lock:
            running -= 1

    await asyncio.gather(*(pool.run(work, None) for _ in range(12)))
    assert peak == 3
    pool.close()


async def test_a_hung_call_keeps_its_slot_after_its_caller_gives_up() -> None:
    pool = BoundedThreads(1, name="t")
    release = threading.Event()
    started: list[str] = []

    def hang(label: str) -> str:
        started.append(label)
        release.wait(5)
        return label

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await pool.run(hang, "first")
    assert pool.busy == 1  # still running in its thread
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await pool.run(hang, "second")  # waits for the slot, never starts
    release.set()
    await asyncio.sleep(0.05)
    assert pool.busy == 0
    assert started == ["first"]
    assert await pool.run(lambda _: "free again", None) == "free again"
    pool.close()


async def test_a_closed_pool_refuses_calls() -> None:
    pool = BoundedThreads(1, name="t")
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        await pool.run(lambda _: None, None)


def test_a_pool_needs_a_thread() -> None:
    with pytest.raises(ValueError, match="at least one thread"):
        BoundedThreads(0, name="t")
