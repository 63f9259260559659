"""What the sources that read on request share (`prometheus`, `formula`, `http`): the values of
the last good read, kept until they go stale.

`refresh()` (once per `interval`, by the backend's tick) calls the subclass's `read()`; its
values replace the kept ones, and a read that raises `SourceError` clears them (an answer
over a limit, a formula without an input: never half-served). The kept values are served by
`values(now)` while the last good read is at most `STALE_INTERVALS` intervals old, as the
`pods` source's series go stale after three scrape intervals; then they are absent (the
definition's `absent` and `failure` decide). A value's timestamp is the reader's: the
evaluation time Prometheus gives, or the read's own. Between reads they change only when they go
stale (`next_change`).

PURE: no I/O (the subclasses do theirs in `read`). Cost: `values` O(values kept).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from types import TracebackType
from typing import Final, Self

from custom_metrics_server.backends.definitions.source import SourceError, Value

__all__ = ["STALE_INTERVALS", "Polled"]

#: Intervals after the last good read past which its values are not served.
STALE_INTERVALS: Final = 3


class Polled:
    """A source whose `refresh` reads values (see the module)."""

    def __init__(self, interval: float, *, clock: Callable[[], float] = time.time) -> None:
        self.interval = interval
        self.clock = clock
        self._values: list[Value] = []
        self._read_at: float | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    async def read(self) -> list[Value]:
        """One read (the subclass's); `SourceError` with a reason when there is no value."""
        raise NotImplementedError

    async def refresh(self) -> None:
        """Read; keep the values, or clear them and raise the reason."""
        try:
            found = await self.read()
        except SourceError:
            self._values, self._read_at = [], None
            raise
        self._values, self._read_at = found, self.clock()

    def values(self, now: float) -> list[Value]:
        """The last good read's values while fresh. O(values)."""
        read_at = self._read_at
        if read_at is None or now - read_at > STALE_INTERVALS * self.interval:
            return []
        return list(self._values)

    def next_change(self, now: float) -> float:
        """When the kept values go stale (the next read, due before, replaces them anyway);
        `math.inf` once stale or without a read. O(1)."""
        read_at = self._read_at
        if read_at is None:
            return math.inf
        stale = read_at + STALE_INTERVALS * self.interval
        return stale if stale >= now else math.inf

    def targets(self) -> int:
        """None by default (see `Source.targets`)."""
        return 0
