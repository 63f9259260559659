"""The concurrency idioms every long-running component uses, and nothing else.

* Step generators: a large build written as a generator that `yield`s every so often can run
  in one go (`drain`) or on the event loop in slices (`run_cooperatively`), letting requests
  in between slices instead of stalling for the whole build.
* `BackgroundTasks`: the named background tasks of one component, started by `start` (usually
  in its `__aenter__`) and stopped together by `stop` (in its `__aexit__`), or by leaving an
  `async with` block. Every component that starts work uses it, so none hand-writes the
  start/cancel/wait dance.
* `cancel_and_wait`: how tasks are stopped (cancel all, then await each, so none is left
  running or unretrieved).
* `background`: one task that lives exactly as long as an `async with` block.

It must not know what the tasks do. Cost: O(tasks) to stop; O(1) to start one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine, Generator, Iterable
from types import TracebackType
from typing import Any, Self, TypeVar, cast

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


class BackgroundTasks:
    """The background tasks of one component: named, started one by one, stopped together.

    A task is held until `stop()`, which cancels every task held and then waits for each; a
    task that ended with an exception other than its cancellation makes `stop()` raise it, so
    a crashed loop is never silent. A task started with `transient=True` is let go as soon as it
    ends (its result is awaited elsewhere), so an owner of many short tasks holds only the
    running ones. Usable as `async with BackgroundTasks() as tasks:` too.
    """

    __slots__ = ("_tasks",)

    def __init__(self) -> None:
        self._tasks: dict[asyncio.Task[Any], None] = {}  # insertion-ordered set

    def start(
        self, work: Coroutine[Any, Any, T], *, name: str, transient: bool = False
    ) -> asyncio.Task[T]:
        """Run `work` as the task `name` until it ends or `stop()` is called. O(1)."""
        task = asyncio.create_task(work, name=name)
        self._tasks[task] = None
        if transient:
            task.add_done_callback(self._forget)
        return task

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self._tasks.pop(task, None)

    @property
    def running(self) -> bool:
        """Whether any task is held (started and not yet stopped, or still running)."""
        return bool(self._tasks)

    def __len__(self) -> int:
        return len(self._tasks)

    async def stop(self) -> None:
        """Cancel every task held, then wait for each. O(tasks)."""
        tasks = list(self._tasks)
        self._tasks.clear()
        await cancel_and_wait(tasks)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


@contextlib.asynccontextmanager
async def background(work: Coroutine[Any, Any, None], *, name: str) -> AsyncIterator[None]:
    """Run `work` as a task while the block runs; cancel it (and wait) when the block ends."""
    async with BackgroundTasks() as tasks:
        tasks.start(work, name=name)
        yield
