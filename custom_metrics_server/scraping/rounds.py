"""Scrape rounds: when each target of a scraper is scraped, how many at once and with what
deadline; run by the scraping core (:mod:`.core`) under the kubelet scraper and the pod
scraper.

This module owns :class:`ScrapeRounds`, the schedule alone: it is told which targets are due
(``prepare``), which listed targets were never scraped (``fresh``), how to scrape one
(``scrape``, which never raises and answers whether it succeeded) and which targets are failing
(a :class:`RoundBook`, such as :class:`~.target_book.TargetBook`). It keeps what readiness needs
to know about the first round (``first_round``, ``rounds_answered``, ``started_at``) and logs
one line when the first round with targets is done. It must not fetch, parse, store or log
per target.

The schedule, built so that no number of failing or hanging targets can starve the event loop
(the server shares it with every request and health probe):

* **Rounds never overlap.** Round *k* starts at its tick ``start + k * interval``; the first
  one as soon as ``synced`` returns (the target list has been listed). A round that is still
  running at the next tick (the loop was stalled, or every slot was taken) delays the next
  round until it ends, and the ticks it missed are skipped (counted as overruns), so work never
  piles up.
* **New targets at once.** Between rounds, targets that were never scraped (the list was
  empty when it synced, or a target joined) are scraped as soon as the owner says the list
  grew (:meth:`ScrapeRounds.notice`, with ``fresh`` naming them), not at the next tick: values
  after a start or a scale-up do not wait a whole interval. That catch-up takes the same
  slots, deadlines and pacing as a first round, and the book's summary line of a round.
* **Starts are spread** over the first half of the interval (target *i* of *n* at
  ``i * interval / 2n``), in the order ``prepare`` gives (least recently attempted first),
  woken at most every 10 ms; except in the first round with targets and in catch-ups, whose
  starts are only paced at ``first_starts_per_second`` (``FIRST_STARTS_PER_SECOND``, 1,000 a
  second: 3 targets start within 3 ms, 3,000 within 3 s or half the interval, whichever is
  shorter), so that values come first thing and thousands of failing targets still cannot
  take the event loop. Each scrape's deadline is the smaller of ``timeout`` and what is left
  of 90 % of the interval (never under 40 % of it), so a round normally ends before the next
  tick.
* **Bounded requests in flight**: at most ``concurrency`` scrapes at once. Targets whose last
  scrape failed take at most a quarter of the slots, so targets that hang until the deadline
  cannot hold up healthy ones. A target that gets no slot before the next tick waits for the
  next round, first in line then (counted as deferred).

Cost per round: O(1) per due target to schedule, one task per target scraped; at most
``concurrency`` of them alive at once. A catch-up costs what ``fresh`` costs to find the new
targets, then the same per target.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, Protocol

from custom_metrics_server.runtime.tasks import BackgroundTasks

__all__ = ["FIRST_STARTS_PER_SECOND", "RoundBook", "RoundCounters", "ScrapeRounds"]

#: Starts are spread over this share of the interval; scrapes end by `_ROUND_SHARE` of it.
_SPREAD: Final = 0.5
_ROUND_SHARE: Final = 0.9
#: The shortest deadline a scrape gets, as a share of the interval.
_FLOOR_SHARE: Final = 0.4
#: The dispatcher wakes at most this often (s): starts due within it go out together.
_TICK: Final = 0.01
#: Scrapes started per second, at most, in the first round and in catch-ups, by default:
#: values come first thing, and thousands of targets failing at once still cannot take the
#: event loop.
FIRST_STARTS_PER_SECOND: Final = 1000.0


class RoundBook(Protocol):
    """What the schedule needs to know and say about targets (`target_book.TargetBook`)."""

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
    overrun warning and the first round's line ("kubelet"), ``noun`` what one name is there
    ("node"), ``listing`` the list ``synced`` waits for ("node list"); ``advice`` says what to
    raise when rounds overrun. ``fresh()`` answers the listed targets never scraped and how
    many are listed (None: nothing to do), for catch-ups after :meth:`notice`; without it
    :meth:`notice` does nothing.
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
        fresh: Callable[[], tuple[list[str], int] | None] | None = None,
        noun: str = "target",
        listing: str = "target list",
        first_starts_per_second: float = FIRST_STARTS_PER_SECOND,
        logger: logging.Logger | None = None,
    ) -> None:
        if interval <= 0 or timeout <= 0:
            raise ValueError("interval and timeout must be positive")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if first_starts_per_second <= 0:
            raise ValueError("first_starts_per_second must be positive")
        self.interval = interval
        self.timeout = timeout
        self.concurrency = concurrency
        #: slots targets whose last scrape failed may take at once
        self.failing_concurrency = max(1, concurrency // 4)
        self.counters = RoundCounters()
        #: (answered, listed) of the first round (or catch-up) that listed any target; None
        #: before it
        self.first_round: tuple[int, int] | None = None
        #: rounds (and catch-ups) in which some target answered
        self.rounds_answered = 0
        #: loop time the target list synced (the rounds began); None before
        self.started_at: float | None = None
        self.first_starts_per_second = first_starts_per_second
        self._book = book
        self._prepare = prepare
        self._scrape = scrape
        self._work = work
        self._what = what
        self._noun = noun
        self._listing = listing
        self._advice = advice
        self._synced = synced
        self._fresh = fresh
        self._added = asyncio.Event()
        self._logger = logger or logging.getLogger(__name__)
        self._in_flight = 0
        self._failing_in_flight = 0
        self._slot_freed = asyncio.Event()
        self._overrunning = False

    @property
    def in_flight(self) -> int:
        """Scrapes running now."""
        return self._in_flight

    def notice(self) -> None:
        """Targets may have joined the list: scrape the ones never scraped (``fresh``) before
        the next round is due. O(1); the owner calls it when its list grows."""
        if self._fresh is not None:
            self._added.set()

    async def run(self) -> None:
        """Rounds on their ticks, forever (until cancelled)."""
        loop = asyncio.get_running_loop()
        if self._synced is not None:
            await self._synced()
        start = self.started_at = loop.time()
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
            await self._between_rounds(number - 1, start + number * self.interval)

    async def _between_rounds(self, number: int, until: float) -> None:
        """Wait for loop time `until`, scraping targets that join meanwhile (`notice`)."""
        loop = asyncio.get_running_loop()
        while (remaining := until - loop.time()) > 0:
            try:
                async with asyncio.timeout(remaining):
                    await self._added.wait()
            except TimeoutError:
                return
            self._added.clear()
            await self._catch_up(number, until)

    async def _catch_up(self, number: int, next_tick: float) -> None:
        """Scrape the listed targets never scraped yet (``fresh``), now, as round `number`."""
        if self._fresh is None:
            return
        found = self._fresh()
        if found is None:
            return
        new, listed = found
        if not new:
            return
        self._logger.debug("scraping %d new %s(s) before the next round", len(new), self._noun)
        started = asyncio.get_running_loop().time()
        self._book.start_round()
        results = await self._dispatch(
            new,
            number,
            started=started,
            next_tick=next_tick,
            spread=len(new) / self.first_starts_per_second,
        )
        answered = sum(results)
        self._book.summarise_round(number, listed, answered=answered, scraped=len(results))
        self._round_done(started, answered=answered, listed=listed)

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
        """Scrape the due targets, spread over the first half of the interval (paced only,
        in the first round with targets), at most `concurrency` at once; returns when every
        scrape started in it has ended."""
        prepared = self._prepare(number)
        if prepared is None:
            return
        due, listed = prepared
        counters = self.counters
        counters.rounds_started += 1
        self._book.start_round()
        spread = _SPREAD * self.interval
        if self.first_round is None:  # values are wanted as soon as the list is in
            spread = min(spread, len(due) / self.first_starts_per_second)
        results = await self._dispatch(
            due, number, started=started, next_tick=next_tick, spread=spread
        )
        counters.rounds_completed += 1
        counters.last_round_seconds = asyncio.get_running_loop().time() - started
        answered = sum(results)
        self._book.summarise_round(number, listed, answered=answered, scraped=len(results))
        self._round_done(started, answered=answered, listed=listed)

    def _round_done(self, started: float, *, answered: int, listed: int) -> None:
        """Book a round (or catch-up) for readiness; the first one with targets gets a line."""
        if answered:
            self.rounds_answered += 1
        if self.first_round is not None or not listed:
            # A round before the list listed anything says nothing about the targets.
            return
        self.first_round = (answered, listed)
        now = asyncio.get_running_loop().time()
        since = self.started_at if self.started_at is not None else started
        self._logger.info(
            "first %s scrape round done: %d of %d %ss answered in %.1fs (%.1fs after the "
            "%s synced)",
            self._what,
            answered,
            listed,
            self._noun,
            now - started,
            now - since,
            self._listing,
        )

    async def _dispatch(
        self,
        due: list[str],
        number: int,
        *,
        started: float,
        next_tick: float,
        spread: float,
    ) -> list[bool]:
        """Launch the scrapes of `due`, starts spread over `spread` seconds, at most
        `concurrency` at once, none after `next_tick`; their outcomes once all have ended."""
        loop = asyncio.get_running_loop()
        counters = self.counters
        book = self._book
        spacing = spread / len(due) if due else 0.0
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
        return list(await asyncio.gather(*launched)) if launched else []

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
