"""GC tuning: the serving threshold applies once the server is ready, in a tuned process only."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import shutil
import subprocess
from pathlib import Path

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

    monkeypatch.setattr(heap, "_server", True)
    monkeypatch.setattr(heap, "malloc_trim", lambda: trim)
    task = asyncio.create_task(heap.trim_heap(every=0.001))
    await asyncio.wait_for(done.wait(), timeout=30)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert calls[:3] == [0, 0, 0]


async def test_trim_heap_leaves_an_untuned_process_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "_server", False)
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


@pytest.mark.parametrize("version", [(3, 14), (3, 15), (3, 10)])
def test_tune_gc_leaves_other_collectors_alone_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, version: tuple[int, int]
) -> None:
    monkeypatch.setattr(heap, "_tuned", False)
    monkeypatch.setattr(heap, "_server", False)
    before = gc.get_threshold()
    with caplog.at_level(logging.WARNING, logger=heap.__name__):
        assert heap.tune_gc(version) is False
    assert gc.get_threshold() == before
    assert not heap._tuned  # so steady_gc leaves the collector alone too
    assert heap._server  # the malloc trim does not depend on the collector
    (record,) = caplog.records
    assert f"Python {version[0]}.{version[1]}: the garbage collector tuning" in record.message


@pytest.mark.parametrize("version", [(3, 11), (3, 12), (3, 13)])
def test_tune_gc_tunes_the_generational_collectors(
    monkeypatch: pytest.MonkeyPatch, version: tuple[int, int]
) -> None:
    monkeypatch.setattr(heap, "_tuned", False)
    before = gc.get_threshold()
    try:
        assert heap.tune_gc(version) is True
        assert gc.get_threshold()[0] == heap.GEN0_THRESHOLD
        assert heap._tuned
    finally:
        gc.set_threshold(*before)


# The tuning and the steady state on the real interpreters of every version requires-python
# admits that this machine has (pyenv's, when installed): heap.py needs only the standard
# library, so it runs by path without the package's dependencies.
HEAP_ON_ANOTHER_PYTHON = """
import asyncio, gc, importlib.util, sys
spec = importlib.util.spec_from_file_location("heap", sys.argv[1])
heap = importlib.util.module_from_spec(spec); spec.loader.exec_module(heap)
tuned = heap.tune_gc()
print(sys.version_info[:2], tuned, gc.get_threshold())
async def main():
    task = asyncio.create_task(heap.steady_gc(lambda: True, poll=0.01, sweep_every=3600))
    await asyncio.sleep(0.05)
    print(gc.get_threshold(), heap.promote_survivors in gc.callbacks, gc.get_freeze_count() > 0)
    task.cancel()
asyncio.run(main())
"""


@pytest.mark.parametrize("minor", [11, 12, 13])
def test_tuning_on_a_real_interpreter(minor: int) -> None:
    pythons = sorted(Path.home().glob(f".pyenv/versions/3.{minor}.*/bin/python3.{minor}"))
    found = shutil.which(f"python3.{minor}")
    candidates = [str(p) for p in pythons] + ([found] if found else [])
    if not candidates:
        pytest.skip(f"no CPython 3.{minor} on this machine (pyenv or python3.{minor} on PATH)")
    result = subprocess.run(
        [candidates[0], "-I", "-c", HEAP_ON_ANOTHER_PYTHON, heap.__file__],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    first, second = result.stdout.splitlines()
    assert first == f"(3, {minor}) True ({heap.GEN0_THRESHOLD}, 20, 10)", result
    assert second == f"({heap.STEADY_GEN0_THRESHOLD}, {heap.STEADY_GEN1_THRESHOLD}, 10) True True"
