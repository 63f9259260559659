"""Bounded expiring caches and single-flight de-duplication for the review webhooks.

`TtlCache` mirrors client-go's `LRUExpireCache` closely enough for decisions: entries expire
by their own TTL, the cache holds at most `capacity` entries (the oldest inserted is dropped
first, and a full cache first drops the expired entries at its old end), and `get` never
returns an expired entry. An expired entry behind a live one stays until it is read or reaches
the old end (with one TTL per cache, insertion order is expiry order). `SingleFlight` makes
concurrent identical lookups share one call, run as a detached task so one cancelled request
does not fail the others (upstream: a detached 30 s context).

Must not: cache errors (callers only `put` answers). `get`/`put` are O(1) amortised.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    """key -> (expiry, value), insertion-ordered, at most `capacity` entries."""

    def __init__(self, capacity: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._capacity = capacity
        self._clock = clock
        self._entries: dict[K, tuple[float, V]] = {}

    def get(self, key: K) -> V | None:
        """The live value for `key`, or None."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[0] <= self._clock():
            del self._entries[key]
            return None
        return entry[1]

    def put(self, key: K, value: V, ttl: float) -> None:
        """Store `value` for `ttl` seconds (a TTL <= 0 stores nothing)."""
        if ttl <= 0:
            return
        entries = self._entries
        entries.pop(key, None)
        now = self._clock()
        if len(entries) >= self._capacity:
            # Oldest first: expired ones, then live ones while still full. Not a scan of the
            # whole cache (that was O(capacity) per put once full: ~3 ms at 65,536 entries).
            while entries:
                oldest = next(iter(entries))
                if len(entries) < self._capacity and entries[oldest][0] > now:
                    break
                del entries[oldest]
        entries[key] = (now + ttl, value)

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget everything."""
        self._entries.clear()


def _consume(task: asyncio.Task[object]) -> None:
    """Mark a failure as retrieved even when every waiter was cancelled (no asyncio warning)."""
    if not task.cancelled():
        task.exception()


class SingleFlight(Generic[K, V]):
    """Runs one call per key at a time; later callers await the same result."""

    def __init__(self, *, timeout: float = 30.0) -> None:
        self._timeout = timeout
        self._running: dict[K, asyncio.Task[V]] = {}

    async def do(self, key: K, call: Callable[[], Awaitable[V]]) -> V:
        """The result of `call()`, shared with concurrent callers of the same key."""
        task = self._running.get(key)
        if task is None:

            async def run() -> V:
                try:
                    # asyncio.timeout, not wait_for: no second task per call (3.11's wait_for
                    # runs the call in a task of its own).
                    async with asyncio.timeout(self._timeout):
                        return await call()
                finally:
                    self._running.pop(key, None)

            task = asyncio.ensure_future(run())
            task.add_done_callback(_consume)
            self._running[key] = task
        return await asyncio.shield(task)
