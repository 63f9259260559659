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

    task = asyncio.create_task(heap.steady_gc(ready, poll=0.001))
    try:
        while heap.promote_survivors not in gc.callbacks:  # noqa: ASYNC110 - GC state, no event
            await asyncio.sleep(0.001)
        threshold = gc.get_threshold()
        frozen = gc.get_freeze_count()
        promoting = heap.promote_survivors in gc.callbacks
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gc.unfreeze()
        gc.set_threshold(*saved)
    assert polls == [heap.GEN0_THRESHOLD] * 3  # not lowered while the lists were loading
    assert threshold == (heap.STEADY_GEN0_THRESHOLD, heap.STEADY_GEN1_THRESHOLD, 10)
    assert frozen > 0  # the heap was settled first
    assert promoting
    assert heap.promote_survivors not in gc.callbacks  # removed when the server stops


class _Node:
    def __init__(self) -> None:
        self.other: object = None


def test_survivors_of_a_middle_collection_are_frozen_and_the_sweep_frees_frozen_cycles() -> None:
    gc.callbacks.append(heap.promote_survivors)
    try:
        gc.collect()
        kept = [_Node() for _ in range(100)]
        _cycle_in_use = _Node()
        _cycle_in_use.other = _cycle_in_use
        gc.collect(0)  # young survivors move to the middle generation, not frozen yet
        assert any(o is kept[0] for o in gc.get_objects(1))
        before = gc.get_freeze_count()
        gc.collect(1)
        assert gc.get_freeze_count() >= before + len(kept)  # survivors frozen
        assert not any(o is kept[0] for o in gc.get_objects(2))  # not left in the oldest
        del _cycle_in_use  # now garbage, but frozen: only the sweep can free it
        assert not any(isinstance(o, _Node) and o.other is o for o in gc.get_objects())
        assert heap.sweep_frozen() >= 1
        assert gc.get_freeze_count() > 0  # frozen again after the sweep
    finally:
        gc.callbacks.remove(heap.promote_survivors)
        gc.unfreeze()


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


def test_settle_heap_sweeps_frozen_cycles_once_the_hour_has_passed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    try:
        node = _Node()
        node.other = node
        gc.freeze()  # frozen while in use
        del node
        monkeypatch.setattr(heap, "_last_unfreeze", 0.0)
        monkeypatch.setattr(heap, "UNFREEZE_EVERY", -1.0)  # the hour has passed
        heap.settle_heap()
        collectable = gc.get_objects()  # what the collections see (not the frozen)
        assert heap._last_unfreeze > 0.0
        assert not any(isinstance(o, _Node) for o in collectable)
        gc.unfreeze()
        assert not any(isinstance(o, _Node) and o.other is o for o in gc.get_objects())
    finally:
        gc.unfreeze()
