"""A bounded set of daemon threads for blocking calls made from the event loop.

`BoundedThreads(size)` runs at most `size` calls at once. What it promises, and why it is not a
`concurrent.futures.ThreadPoolExecutor`:

* A slot is held from the moment a call starts until the call *returns*, not until its caller
  stops waiting: a call that hangs keeps its thread and its slot, so a backend whose calls hang
  degrades only itself (its later calls wait for a slot, then time out), never the loop.
* A caller waits for a slot on the event loop, cancellably (its deadline cancels the wait); a
  call whose caller gave up before it got a slot is never started. An executor would queue it
  and run it later, for nobody.
* The threads are daemon threads, created on demand up to `size`: a hung call cannot keep the
  process from exiting (executor threads are joined at interpreter exit).

It must not know what the calls do. Cost: one slot acquisition, one queue hand-off and one
`call_soon_threadsafe` per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, Final, TypeVar

__all__ = ["BoundedThreads"]

T = TypeVar("T")
A = TypeVar("A")

_STOP: Final = None
_Work = tuple[Callable[[Any], Any], Any, asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


class BoundedThreads:
    """At most `size` blocking calls at once, each on a daemon thread named `name-N`."""

    def __init__(self, size: int, *, name: str) -> None:
        if size < 1:
            raise ValueError(f"a thread pool needs at least one thread, not {size}")
        self.size = size
        self.name = name
        self._slots: asyncio.Semaphore | None = None  # made on the loop that first uses it
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._busy = 0
        self._lock = threading.Lock()
        self._closed = False

    @property
    def busy(self) -> int:
        """Calls running now (a hung call counts until it returns)."""
        return self._busy

    async def run(self, function: Callable[[A], T], argument: A) -> T:
        """`function(argument)` on one of the threads, once a slot is free. Cancelling the
        caller while it waits for a slot means the call never starts; cancelling it while the
        call runs leaves the call running (Python cannot stop a thread) with its slot held."""
        if self._closed:
            raise RuntimeError(f"the {self.name} thread pool is closed")
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.size)
        slots = self._slots
        await slots.acquire()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            self._busy += 1
            if len(self._threads) < min(self._busy, self.size):
                self._spawn()
        self._work.put((function, argument, loop, future))
        return await future

    def close(self) -> None:
        """Let every idle thread exit; a thread busy with a hung call exits when it returns
        (or with the process: it is a daemon)."""
        self._closed = True
        for _ in self._threads:
            self._work.put(_STOP)

    def _spawn(self) -> None:
        thread = threading.Thread(
            target=self._serve, name=f"{self.name}-{len(self._threads)}", daemon=True
        )
        self._threads.append(thread)
        thread.start()

    def _serve(self) -> None:
        while (work := self._work.get()) is not _STOP:
            function, argument, loop, future = work
            try:
                result, error = function(argument), None
            except BaseException as err:  # handed to the caller, whatever it is
                result, error = None, err
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
                loop.call_soon_threadsafe(self._finish, future, result, error)

    def _finish(
        self, future: asyncio.Future[Any], result: Any, error: BaseException | None
    ) -> None:
        with self._lock:
            self._busy -= 1
        assert self._slots is not None
        self._slots.release()
        if future.cancelled():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
