"""Scrape rounds: when each target of a scraper is scraped, how many at once and with what
deadline; shared by the kubelet scraper (:mod:`.scraper`) and the pod scraper
(:mod:`custom_metrics_server.backends.pod_metrics.scraper`).

This module owns :class:`ScrapeRounds`, the schedule alone: it is told which targets are due
(``prepare``), how to scrape one (``scrape``, which never raises and answers whether it
succeeded) and which targets are failing (a :class:`RoundBook`, such as
:class:`~.scrape_nodes.NodeBook`). It must not fetch, parse, store or log per target.

The schedule, built so that no number of failing or hanging targets can starve the event loop
(the server shares it with every request and health probe):

* **Rounds never overlap.** Round *k* starts at its tick ``start + k * interval``; the first
  one as soon as ``synced`` returns (the target list has been listed). A round that is still
  running at the next tick (the loop was stalled, or every slot was taken) delays the next
  round until it ends, and the ticks it missed are skipped (counted as overruns), so work never
  piles up.
* **Starts are spread** over the first half of the interval (target *i* of *n* at
  ``i * interval / 2n``), in the order ``prepare`` gives (least recently attempted first),
  woken at most every 10 ms; each scrape's deadline is the smaller of ``timeout`` and what is
  left of 90 % of the interval (never under 40 % of it), so a round normally ends before the
  next tick.
* **Bounded requests in flight**: at most ``concurrency`` scrapes at once. Targets whose last
  scrape failed take at most a quarter of the slots, so targets that hang until the deadline
  cannot hold up healthy ones. A target that gets no slot before the next tick waits for the
  next round, first in line then (counted as deferred).

Cost per round: O(1) per due target to schedule, one task per target scraped; at most
``concurrency`` of them alive at once.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, Protocol

from custom_metrics_server.runtime.tasks import BackgroundTasks

__all__ = ["RoundBook", "RoundCounters", "ScrapeRounds"]

#: Starts are spread over this share of the interval; scrapes end by `_ROUND_SHARE` of it.
_SPREAD: Final = 0.5
_ROUND_SHARE: Final = 0.9
#: The shortest deadline a scrape gets, as a share of the interval.
_FLOOR_SHARE: Final = 0.4
#: The dispatcher wakes at most this often (s): starts due within it go out together.
_TICK: Final = 0.01


class RoundBook(Protocol):
    """What the schedule needs to know and say about targets (`scrape_nodes.NodeBook`)."""

    def is_failing(self, name: str) -> bool:
        """Whether the last scrape of `name` failed."""
        ...

    def attempted(self, name: str, number: int) -> None:
        """`name` is scraped in round `number`."""
        ...

    def start_round(self) -> None:
        """A round begins."""
        ...

    def summarise_round(self, number: int, listed: int, *, answered: int, scraped: int) -> None:
        """A round ended: `scraped` targets were scraped, `answered` of them successfully."""
        ...


@dataclass
class RoundCounters:
    """What the schedule counts, for self-metrics."""

    rounds_started: int = 0
    rounds_completed: int = 0
    rounds_overrun: int = 0
    deferred: int = 0
    last_round_seconds: float | None = None


class ScrapeRounds:
    """Runs scrape rounds while :meth:`run` runs (see the module).

    ``prepare(number)`` answers the targets due in round ``number`` in the order they should
    start, and how many are listed (None skips the round); ``scrape(name, deadline)`` scrapes
    one within ``deadline`` seconds and answers whether it succeeded (it must not raise).
    ``work`` holds the scrape tasks (the owner stops it). ``what`` names the targets in the
    overrun warning ("kubelet"), ``advice`` says what to raise when rounds overrun.
    """

    def __init__(
        self,
        *,
        interval: float,
        timeout: float,
        concurrency: int,
        book: RoundBook,
        prepare: Callable[[int], tuple[list[str], int] | None],
        scrape: Callable[[str, float], Coroutine[Any, Any, bool]],
        work: BackgroundTasks,
        what: str,
        advice: str,
        synced: Callable[[], Awaitable[None]] | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        if interval <= 0 or timeout <= 0:
            raise ValueError("interval and timeout must be positive")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.interval = interval
        self.timeout = timeout
        self.concurrency = concurrency
        #: slots targets whose last scrape failed may take at once
        self.failing_concurrency = max(1, concurrency // 4)
        self.counters = RoundCounters()
        #: (answered, listed) of the first round that listed any target; None before it
        self.first_round: tuple[int, int] | None = None
        self._book = book
        self._prepare = prepare
        self._scrape = scrape
        self._work = work
        self._what = what
        self._advice = advice
        self._synced = synced
        self._logger = logger or logging.getLogger(__name__)
        self._in_flight = 0
        self._failing_in_flight = 0
        self._slot_freed = asyncio.Event()
        self._overrunning = False

    @property
    def in_flight(self) -> int:
        """Scrapes running now."""
        return self._in_flight

    async def run(self) -> None:
        """Rounds on their ticks, forever (until cancelled)."""
        loop = asyncio.get_running_loop()
        if self._synced is not None:
            await self._synced()
        start = loop.time()
        number = 0
        while True:
            started = loop.time()
            next_tick = start + (number + 1) * self.interval
            await self._round(number, started, next_tick)
            now = loop.time()
            number += 1
            if now > next_tick:
                missed = math.ceil((now - next_tick) / self.interval)
                self._overrun(now - started, missed)
                number += missed
            elif self._overrunning:
                self._overrunning = False
                self._logger.info("%s scrape rounds are back on schedule", self._what)
            await asyncio.sleep(max(0.0, start + number * self.interval - loop.time()))

    def _overrun(self, took: float, missed: int) -> None:
        self.counters.rounds_overrun += 1
        if self._overrunning:
            return
        self._overrunning = True
        self._logger.warning(
            "a %s scrape round took %.1fs, longer than the %gs interval: skipping %d round(s) "
            "(rounds never overlap); if it keeps happening, %s",
            self._what,
            took,
            self.interval,
            missed,
            self._advice,
        )

    async def _round(self, number: int, started: float, next_tick: float) -> None:
        """Scrape the due targets, spread over the first half of the interval, at most
        `concurrency` at once; returns when every scrape started in it has ended."""
        prepared = self._prepare(number)
        if prepared is None:
            return
        due, listed = prepared
        counters = self.counters
        counters.rounds_started += 1
        book = self._book
        book.start_round()
        loop = asyncio.get_running_loop()
        spacing = _SPREAD * self.interval / len(due) if due else 0.0
        ends_by = started + _ROUND_SHARE * self.interval
        floor = min(self.timeout, _FLOOR_SHARE * self.interval)
        launched: list[asyncio.Task[bool]] = []
        for index, name in enumerate(due):
            now = loop.time()
            wait = started + index * spacing - now
            if wait > _TICK:
                await asyncio.sleep(wait)
                now = loop.time()
            failing = book.is_failing(name)
            if failing and self._failing_in_flight >= self.failing_concurrency:
                counters.deferred += 1  # its turn comes first next round
                continue
            if now >= next_tick or not await self._free_slot(next_tick):
                counters.deferred += len(due) - index
                break
            now = loop.time()
            book.attempted(name, number)
            deadline = min(self.timeout, max(ends_by - now, floor))
            launched.append(self._launch(name, deadline, failing=failing))
        results = await asyncio.gather(*launched) if launched else []
        counters.rounds_completed += 1
        counters.last_round_seconds = loop.time() - started
        answered = sum(results)
        book.summarise_round(number, listed, answered=answered, scraped=len(results))
        if self.first_round is None and listed:
            # A round before the target list listed anything says nothing about the targets.
            self.first_round = (answered, listed)

    async def _free_slot(self, until: float) -> bool:
        """Wait for a free slot, at most until loop time `until`; False if none came."""
        loop = asyncio.get_running_loop()
        while self._in_flight >= self.concurrency:
            remaining = until - loop.time()
            if remaining <= 0:
                return False
            self._slot_freed.clear()
            try:
                async with asyncio.timeout(remaining):
                    await self._slot_freed.wait()
            except TimeoutError:
                return False
        return True

    def _launch(self, name: str, deadline: float, *, failing: bool) -> asyncio.Task[bool]:
        self._in_flight += 1
        if failing:
            self._failing_in_flight += 1
        task = self._work.start(self._scrape(name, deadline), name=f"scrape-{name}", transient=True)

        def done(finished: asyncio.Task[bool]) -> None:
            self._in_flight -= 1
            if failing:
                self._failing_in_flight -= 1
            self._slot_freed.set()

        task.add_done_callback(done)
        return task
