"""GC tuning: the serving threshold applies once the server is ready, in a tuned process only."""

from __future__ import annotations

import asyncio
import contextlib
import gc

import pytest

from custom_metrics_server.runtime import heap


async def test_steady_gc_waits_for_readiness_then_lowers_the_threshold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    saved = gc.get_threshold()
    monkeypatch.setattr(heap, "_tuned", True)
    gc.set_threshold(heap.GEN0_THRESHOLD, 20, 10)
    polls = []

    def ready() -> bool:
        polls.append(gc.get_threshold()[0])
        return len(polls) >= 3

    try:
        await heap.steady_gc(ready, poll=0.001)
        threshold = gc.get_threshold()
        frozen = gc.get_freeze_count()
    finally:
        gc.unfreeze()
        gc.set_threshold(*saved)
    assert polls == [heap.GEN0_THRESHOLD] * 3  # not lowered while the lists were loading
    assert threshold == (heap.STEADY_GEN0_THRESHOLD, 20, 10)
    assert frozen > 0  # the heap was settled first


async def test_steady_gc_leaves_an_untuned_process_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "_tuned", False)
    before = gc.get_threshold()
    await heap.steady_gc(lambda: True)
    assert gc.get_threshold() == before


async def test_trim_heap_gives_memory_back_periodically_in_a_tuned_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []
    done = asyncio.Event()

    def trim(pad: int) -> int:
        calls.append(pad)
        if len(calls) == 3:
            done.set()
        return 1

    monkeypatch.setattr(heap, "_tuned", True)
    monkeypatch.setattr(heap, "malloc_trim", lambda: trim)
    task = asyncio.create_task(heap.trim_heap(every=0.001))
    await asyncio.wait_for(done.wait(), timeout=30)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert calls[:3] == [0, 0, 0]


async def test_trim_heap_leaves_an_untuned_process_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "_tuned", False)
    monkeypatch.setattr(heap, "malloc_trim", lambda: pytest.fail("looked for malloc_trim"))
    await heap.trim_heap(every=0.001)  # returns: nothing to do


def test_malloc_trim_is_glibcs_where_there_is_one() -> None:
    trim = heap.malloc_trim()
    if trim is None:
        pytest.skip("no glibc")
    assert trim(0) in (0, 1)
