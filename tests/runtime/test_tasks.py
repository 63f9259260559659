"""runtime.tasks: BackgroundTasks, background(), cancel_and_wait and step generators."""

from __future__ import annotations

import asyncio
from collections.abc import Generator

import pytest

from custom_metrics_server.runtime.tasks import (
    BackgroundTasks,
    background,
    drain,
    run_cooperatively,
)


async def _forever(started: list[str], name: str) -> None:
    started.append(name)
    await asyncio.Event().wait()


async def test_stop_cancels_every_task_and_waits_for_it() -> None:
    started: list[str] = []
    tasks = BackgroundTasks()
    first = tasks.start(_forever(started, "a"), name="a")
    second = tasks.start(_forever(started, "b"), name="b")
    await asyncio.sleep(0)
    assert started == ["a", "b"]
    assert (first.get_name(), len(tasks), tasks.running) == ("a", 2, True)
    await tasks.stop()
    assert first.cancelled()
    assert second.cancelled()
    assert not tasks.running


async def test_a_transient_task_is_let_go_when_it_ends() -> None:
    tasks = BackgroundTasks()
    done = tasks.start(asyncio.sleep(0, result=7), name="short", transient=True)
    assert await done == 7
    await asyncio.sleep(0)  # the done callback runs
    assert not tasks.running


async def test_a_crashed_task_surfaces_at_stop() -> None:
    async def crash() -> None:
        raise RuntimeError("boom")

    tasks = BackgroundTasks()
    tasks.start(crash(), name="crash")
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="boom"):
        await tasks.stop()


async def test_the_context_manager_and_background_stop_their_tasks() -> None:
    started: list[str] = []
    async with BackgroundTasks() as tasks:
        task = tasks.start(_forever(started, "x"), name="x")
        await asyncio.sleep(0)
    assert task.cancelled()
    async with background(_forever(started, "y"), name="y"):
        await asyncio.sleep(0)
    assert started == ["x", "y"]
    assert not [t for t in asyncio.all_tasks() if t.get_name() in ("x", "y")]


def _steps(log: list[int]) -> Generator[None, None, int]:
    for index in range(3):
        log.append(index)
        yield
    return 42


async def test_step_generators_run_in_one_go_or_in_slices() -> None:
    log: list[int] = []
    assert drain(_steps(log)) == 42
    assert await run_cooperatively(_steps(log)) == 42
    assert log == [0, 1, 2, 0, 1, 2]
