"""The `metric-definitions` backend's tick: what it does with the definitions the catalog serves,
in work proportional to what changed or is due, never to the number of definitions.

Each tick (the backend runs one every second, and `COALESCE` after a watch event, so that a burst
of events is one tick):

1. close the sources the catalog retired (`Catalog.retired`);
2. enter the sources it started since (`Catalog.started`, a queue);
3. pop from a heap of (time, sequence, state) the serving definitions whose time has come: a
   refresh due (once per `interval`), or values that may differ without one: the oldest value
   passing `maxAge`, the source's `next_change` (a schedule's next window edge or UTC offset
   change, a polled read going stale), or every tick for a source that does not say (`pods`:
   its scraper reads on its own cadence). A state has one live entry (its `wake` is the
   entry's sequence); the entries of retired, replaced or refused states, and those superseded,
   are skipped when they come up (lazy deletion);
4. refresh the due ones (`CONCURRENCY` at a time);
5. check the scrape-target limits of the namespaces the catalog decided again and of those
   looked at (a source's `targets` changes only at a refresh or a `next_change`);
6. record each looked-at definition's last value, its time and count, and `has_value` (the
   status's Ready, `?explain=1` and the status page read them), and plan its next look: the
   earliest of its next refresh and the instant its values may next differ.

Serving never waits for a tick: the catalog makes a source at the event, and deletes at the event.

Cost of a tick: O(k log n) for the k definitions started, due or expiring of the n serving, plus
O(d log d) for the d serving definitions of the namespaces checked; nothing for the rest. The
heap holds one live entry per entered serving definition, plus stale ones until their time (at
most an `interval`).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import time
from collections.abc import Callable
from typing import Final

from custom_metrics_server.backends.definitions.catalog import Catalog
from custom_metrics_server.backends.definitions.source import SourceError, Value, changes_at
from custom_metrics_server.backends.definitions.state import State
from custom_metrics_server.errors import BackendUnavailable

__all__ = ["COALESCE", "CONCURRENCY", "SLICE", "TICK", "Ticker"]

logger = logging.getLogger(__name__)

#: Source refreshes in flight at once.
CONCURRENCY: Final = 16
#: Seconds between ticks when nothing changed.
TICK: Final = 1.0
#: Seconds a tick waits after a change, for the rest of a burst of watch events.
COALESCE: Final = 0.1
#: Sources entered or definitions recorded between two yields to the event loop.
SLICE: Final = 1_000


class Ticker:
    """The tick over `catalog` (see the module); `values(state, now)` is the definition's
    values after `maxAge` and the failure policy (the backend's, as serving reads them)."""

    def __init__(
        self,
        catalog: Catalog,
        values: Callable[[State, float], list[Value]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.catalog = catalog
        self._values = values
        self._clock = clock
        self._limit = asyncio.Semaphore(CONCURRENCY)
        #: (when, sequence, state): when each entered serving definition is next looked at
        self.schedule: list[tuple[float, int, State]] = []
        self._sequence = itertools.count()
        #: definitions recorded by the ticks so far (tests count the work by it)
        self.visited = 0

    def current(self, state: State) -> bool:
        """Still the serving definition of its metric, with its source (not retired,
        replaced, refused or deleted since it was queued). O(1)."""
        key = (state.definition.namespace, state.definition.metric)
        return state.source is not None and self.catalog.serving.get(key) is state

    def _plan(self, state: State, when: float) -> None:
        """Look at `state` again at `when` (its older entry, if any, goes stale). O(log n)."""
        sequence = next(self._sequence)
        state.wake = sequence
        heapq.heappush(self.schedule, (when, sequence, state))

    async def tick(self) -> None:
        """One tick (see the module). O(k log n) for the k definitions started or due of the
        n serving, plus the checked namespaces' definitions."""
        catalog = self.catalog
        while catalog.retired:
            await self.close(catalog.retired.pop())
        now = self._clock()
        looked: dict[int, State] = {}
        failed: set[int] = set()
        started, catalog.started = catalog.started, []
        for index, state in enumerate(started):
            if index % SLICE == SLICE - 1:
                await asyncio.sleep(0)
            source = state.source
            if source is None or state.entered or not self.current(state):
                continue
            state.entered = True
            looked[id(state)] = state
            try:
                await source.__aenter__()
            except Exception as err:
                # Refreshed from the next tick on (`next_refresh` is still 0).
                self.failed(state, f"starting the source: {err}", now)
                failed.add(id(state))
        schedule = self.schedule
        while schedule and schedule[0][0] <= now:
            _, sequence, state = heapq.heappop(schedule)
            if sequence == state.wake and state.entered and self.current(state):
                looked.setdefault(id(state), state)
        due = []
        for key, state in looked.items():
            if state.next_refresh <= now and key not in failed:
                state.next_refresh = now + state.definition.interval
                due.append(state)
        if due:
            await asyncio.gather(*(self.refresh(state) for state in due))
        catalog.check_targets(state.definition.namespace for state in looked.values())
        now = self._clock()
        for index, state in enumerate(looked.values()):
            if index % SLICE == SLICE - 1:
                await asyncio.sleep(0)
            if not self.current(state):
                continue  # refused (targets) or gone meanwhile: its next start plans it again
            self.visited += 1
            upcoming = self.record(state, now)
            self._plan(state, min(state.next_refresh, upcoming))

    async def refresh(self, state: State) -> None:
        """One read of the definition's source; its error kept, or cleared."""
        source = state.source
        if source is None:
            return
        async with self._limit:
            try:
                await source.refresh()
            except SourceError as err:
                self.failed(state, str(err), self._clock())
            except Exception as err:
                logger.exception(
                    "metric definition %s/%s: the source raised", *state.definition.key
                )
                self.failed(state, f"{type(err).__name__}: {err}", self._clock())
            else:
                state.last_error = None

    def failed(self, state: State, message: str, now: float) -> None:
        """Keep a failure (logged when the source starts failing)."""
        if state.last_error is None:
            logger.info(
                "metric definition %s/%s: source failing: %s", *state.definition.key, message
            )
        state.last_error, state.last_error_time = message, now

    async def close(self, source: object) -> None:
        """Stop a source's work (a failure logged, never raised)."""
        exit_ = getattr(source, "__aexit__", None)
        if exit_ is None:
            return
        try:
            await exit_(None, None, None)
        except Exception:
            logger.exception("metric definitions: closing a source raised")

    def record(self, state: State, now: float) -> float:
        """Keep the definition's values now (last value, count, time, `has_value`); returns
        when they may next differ without a refresh: the source's `next_change`, or the oldest
        value's passing `maxAge`. O(values)."""
        source = state.source
        upcoming = math.inf if source is None else changes_at(source, now)
        try:
            values = self._values(state, now)
        except BackendUnavailable:
            state.has_value = False
            return upcoming
        state.has_value = bool(values)
        if values:
            state.last_good = values
            state.last_value = math.fsum(value.value for value in values)
            state.last_value_time = max(value.timestamp for value in values)
            state.value_count = len(values)
            max_age = state.definition.max_age
            if max_age is not None:
                upcoming = min(upcoming, min(value.timestamp for value in values) + max_age)
        return upcoming
