"""The recent changes of a store, in order, for readers that remember where they read up to.

A memoised answer over thousands of objects (`pods/*` over a namespace) is checked against
the store in O(its objects) by comparing everything it was computed from; on a large cluster
that pass is mostly cache misses (docs/performance.md, "Memos of the Kubernetes backend").
With a journal
the answer remembers two positions (the pods' and the usage store's) and looks only at what
was written since: O(changes). A reader that fell too far behind (more changes than its
answer has objects, or older than the journal keeps) is told so and checks everything.

Writers `append` (amortised O(1)); the journal keeps between `limit / 2` and `limit` entries.
"""

from __future__ import annotations

from typing import Final, Generic, TypeVar

__all__ = ["LIMIT", "Journal"]

T = TypeVar("T")

#: Entries kept: a reader answering less often than this many changes checks everything.
LIMIT: Final = 65_536


class Journal(Generic[T]):
    """Append-only entries numbered from 0; `since(position)` gives those from `position`."""

    __slots__ = ("_base", "_items", "_limit")

    def __init__(self, limit: int = LIMIT) -> None:
        self._base = 0  # the number of the first entry kept
        self._items: list[T] = []
        self._limit = limit

    @property
    def position(self) -> int:
        """The number the next entry will get: a reader's mark after reading everything."""
        return self._base + len(self._items)

    def append(self, item: T) -> None:
        """Record one change. Amortised O(1): the older half is dropped when full."""
        items = self._items
        items.append(item)
        if len(items) > self._limit:
            drop = len(items) // 2
            del items[:drop]
            self._base += drop

    def since(self, position: int, most: int) -> list[T] | None:
        """The entries from `position` on, or None when they are more than `most` or no
        longer kept. O(entries returned)."""
        start = position - self._base
        if start < 0 or len(self._items) - start > most:
            return None
        return self._items[start:]
