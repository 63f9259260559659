"""Two small concurrency idioms used by every long-running component.

* Step generators: a large build written as a generator that `yield`s every so often can run
  in one go (`drain`) or on the event loop in slices (`run_cooperatively`), letting requests
  in between slices instead of stalling for the whole build.
* `cancel_and_wait`: how background tasks are stopped (cancel all, then await each, so none
  is left running or unretrieved).
* `background`: a task that lives exactly as long as an `async with` block.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine, Generator, Iterable
from typing import Any, TypeVar, cast

T = TypeVar("T")


def drain(steps: Generator[None, None, T]) -> T:
    """Run a step generator to the end and return its result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return cast("T", done.value)


async def run_cooperatively(steps: Generator[None, None, T]) -> T:
    """Run a step generator on the event loop, yielding to other tasks after every step."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return cast("T", done.value)
        await asyncio.sleep(0)


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any] | None]) -> None:
    """Cancel the tasks, then wait for each to finish (their cancellation is swallowed)."""
    pending = [task for task in tasks if task is not None]
    for task in pending:
        task.cancel()
    for task in pending:
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def background(work: Coroutine[Any, Any, None], *, name: str) -> AsyncIterator[None]:
    """Run `work` as a task while the block runs; cancel it (and wait) when the block ends."""
    task = asyncio.create_task(work, name=name)
    try:
        yield
    finally:
        await cancel_and_wait([task])
