"""The oldest and newest timestamp of a memoised list answer, kept change by change: the
freshness of a `pods/*` answer (`pod_usage_answers`) without a pass over its samples.

Cost: O(log n) a change (two heaps with lazy deletion; rebuilt when their dead entries
outnumber the live ones), O(1) amortised a read.
"""

from __future__ import annotations

from collections.abc import Iterable
from heapq import heapify, heappop, heappush

__all__ = ["StampBounds"]


class StampBounds:
    """The oldest and newest of a multiset of timestamps, kept change by change: O(log n) a
    change (two heaps with lazy deletion; rebuilt when their dead entries outnumber the live
    ones), O(1) amortised a read."""

    __slots__ = ("counts", "high", "low")

    def __init__(self, stamps: Iterable[float]) -> None:
        self.counts: dict[float, int] = {}
        for stamp in stamps:
            self.counts[stamp] = self.counts.get(stamp, 0) + 1
        self._rebuild()

    def _rebuild(self) -> None:
        self.low = list(self.counts)
        heapify(self.low)
        self.high = [-stamp for stamp in self.counts]
        heapify(self.high)

    def replace(self, old: float | None, new: float | None) -> None:
        """One sample's timestamp `old` became `new` (None: no sample)."""
        counts = self.counts
        if old is not None:
            left = counts[old] - 1
            if left:
                counts[old] = left
            else:
                del counts[old]
        if new is not None:
            if new in counts:
                counts[new] += 1
            else:
                counts[new] = 1
                heappush(self.low, new)
                heappush(self.high, -new)
        if len(self.low) > 2 * len(counts) + 64:
            self._rebuild()

    def bounds(self) -> tuple[float, float] | None:
        """(oldest, newest), None when there is no sample."""
        counts, low, high = self.counts, self.low, self.high
        if not counts:
            return None
        while low[0] not in counts:
            heappop(low)
        while -high[0] not in counts:
            heappop(high)
        return low[0], -high[0]
