"""The scraping core: what every scraper of many targets does the same way, under the kubelet
scraper (:mod:`.kubelet_scraper`) and the pod scraper
(:mod:`custom_metrics_server.backends.pod_metrics.scraper`).

This module owns :class:`ScrapeCore`, which runs a scraper's rounds (:mod:`.rounds`: never
overlapping, bounded concurrency, a deadline per target, failing targets at most a quarter of
the slots), keeps its book of targets (:mod:`.target_book`: which are failing and why, their
backoff, the log lines a change of state deserves), and scrapes one target: the deadline, the
classification of what went wrong (:class:`~.failure.ScrapeFailure` for every expected
failure, ``internal`` with a traceback for a bug, which must not stop the other targets'
scrapes), the book-keeping and the counters of its self-metrics (scrapes, the last scrape's
seconds, targets listed), and the one snapshot of them both scrapers' self-metrics read
(:class:`ScrapeStats`, :meth:`ScrapeCore.stats`).

A scraper gives the core only what differs (:class:`ScrapeParts`): which targets are listed
(``listing``), what to forget and expire when the list is read for a round (``prune``), what a
target is (``find``), how its body is fetched (``fetch``) and how it is read and where its
results go (``take``), and the words of its log lines (:class:`ScrapeWords`). It must not know
what a target is, how it is reached or what its body means.

Cost: a round is O(n log n) to order the n listed targets (the book), O(1) per target to
schedule and book, one task per target scraped plus what the parts cost; a catch-up is O(n).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Generic, TypeVar

from custom_metrics_server.runtime.tasks import BackgroundTasks
from custom_metrics_server.scraping.failure import ScrapeFailure
from custom_metrics_server.scraping.rounds import ScrapeRounds
from custom_metrics_server.scraping.target_book import TargetBook

__all__ = ["ScrapeCore", "ScrapeParts", "ScrapeStats", "ScrapeWords"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ScrapeWords:
    """The words of a scraper's log lines: ``target`` what is scraped ("kubelet"), ``what``
    whose rounds they are ("kubelet", "pod metrics"), ``noun`` what one name is ("node"),
    ``listing`` the list the first round waits for ("node list"), ``advice`` what to raise when
    rounds overrun, ``dropped`` what happens to a silent target's values (None: its usage is
    dropped after the age-out)."""

    target: str
    what: str
    noun: str
    listing: str
    advice: str
    dropped: str | None = None


@dataclass(frozen=True, slots=True)
class ScrapeParts(Generic[T]):
    """What one scraper does its own way; ``T`` is what a target is.

    ``listing()`` answers the listed names, sorted (None: listing failed, skip the round);
    ``prune(listed)`` forgets and expires what the scraper keeps about targets no longer
    listed or silent; ``find(name)`` answers the target (None: it left after the round was
    prepared, so its scrape is skipped, not counted); ``fetch(target, seconds)`` its body;
    ``take(name, target, body, now)`` reads the body and stores the results, with no await
    in between. ``fetch`` and ``take`` raise :class:`ScrapeFailure` for every expected
    failure."""

    listing: Callable[[], list[str] | None]
    prune: Callable[[set[str]], None]
    find: Callable[[str], T | None]
    fetch: Callable[[T, float], Awaitable[bytes]]
    take: Callable[[str, T, bytes, float], None]


@dataclass(frozen=True, slots=True)
class ScrapeStats:
    """A snapshot of a scraper's counters, for its self-metrics (the kubelet scraper's and the
    pod scraper's alike): its rounds, its scrapes and their failures by reason, and its
    targets (listed when the list was last read, failing, backing off: failed twice or more in
    a row). ``expired`` counts targets whose values were dropped after the age-out, where the
    scraper counts them (the kubelet scraper; 0 otherwise)."""

    rounds_started: int
    rounds_completed: int
    rounds_overrun: int
    deferred: int
    scrapes: int
    failures_by_reason: Mapping[str, int]
    in_flight: int
    concurrency: int
    targets: int
    targets_failing: int
    targets_backing_off: int
    expired: int
    last_round_seconds: float | None
    last_scrape_seconds: float | None

    @property
    def failures(self) -> int:
        """Failed scrapes, whatever the reason."""
        return sum(self.failures_by_reason.values())


class ScrapeCore(Generic[T]):
    """Rounds, the book and one target's scrape for a scraper (see the module); the owner
    runs it with :meth:`start` and :meth:`stop`. ``book`` and ``rounds`` are readable (tests,
    readiness, self-metrics); ``work`` holds its tasks, and may take the owner's transient
    ones."""

    def __init__(
        self,
        parts: ScrapeParts[T],
        *,
        words: ScrapeWords,
        interval: float,
        timeout: float,
        concurrency: int,
        age_out_intervals: int,
        clock: Callable[[], float],
        logger: logging.Logger,
        synced: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._parts = parts
        self._clock = clock
        self._logger = logger
        self._noun = words.noun
        self.timeout = timeout
        self.book = TargetBook(
            target=words.target,
            interval=interval,
            age_out_intervals=age_out_intervals,
            noun=words.noun,
            dropped=words.dropped,
            logger=logger,
        )
        #: the round loop, the scrapes in flight and the owner's transient tasks
        self.work = BackgroundTasks()
        self.rounds = ScrapeRounds(
            interval=interval,
            timeout=timeout,
            concurrency=concurrency,
            book=self.book,
            prepare=self._prepare,
            scrape=self.scrape,
            work=self.work,
            what=words.what,
            advice=words.advice,
            synced=synced,
            fresh=self._fresh,
            noun=words.noun,
            listing=words.listing,
            logger=logger,
        )
        #: scrapes started (the skipped ones of targets that left aside), since start
        self.scrapes = 0
        self.last_scrape_seconds: float | None = None
        #: targets listed when the list was last read (0 before)
        self.listed = 0
        #: failing targets to scrape in the next catch-up, whatever their backoff
        self._urged: set[str] = set()

    # -- lifecycle --

    def start(self, name: str) -> None:
        """Run the rounds, as task `name`, until :meth:`stop`."""
        self.work.start(self.rounds.run(), name=name)

    async def stop(self) -> None:
        """Stop the rounds and every scrape in flight."""
        await self.work.stop()

    def notice(self, reachable: Iterable[str] = ()) -> None:
        """Targets may have joined the list: scrape the ones never scraped before the next
        round is due; and ``reachable`` ones at once too if their last scrape failed, instead
        of after their backoff. O(1) + O(len(reachable))."""
        self._urged.update(reachable)
        self.rounds.notice()

    def stats(self, *, expired: int = 0) -> ScrapeStats:
        """A snapshot of the counters (``expired``: see :class:`ScrapeStats`). O(targets)."""
        rounds = self.rounds
        counters = rounds.counters
        failing = self.book.failing()
        return ScrapeStats(
            rounds_started=counters.rounds_started,
            rounds_completed=counters.rounds_completed,
            rounds_overrun=counters.rounds_overrun,
            deferred=counters.deferred,
            scrapes=self.scrapes,
            failures_by_reason=MappingProxyType(dict(self.book.failures)),
            in_flight=rounds.in_flight,
            concurrency=rounds.concurrency,
            targets=self.listed,
            targets_failing=len(failing),
            targets_backing_off=sum(1 for _, times in failing.values() if times > 1),
            expired=expired,
            last_round_seconds=counters.last_round_seconds,
            last_scrape_seconds=self.last_scrape_seconds,
        )

    # -- rounds --

    def _prepare(self, number: int) -> tuple[list[str], int] | None:
        """The targets due in round `number`, least recently attempted first, and how many
        are listed; forgets what left the list. O(n log n)."""
        names = self._parts.listing()
        if names is None:
            return None
        listed = set(names)
        self.book.forget(listed)
        self._parts.prune(listed)
        self.listed = len(names)
        return self.book.due(names, number), len(names)

    def _fresh(self) -> tuple[list[str], int] | None:
        """The listed targets never scraped yet and the failing ones urged by :meth:`notice`,
        for a catch-up, and how many are listed. O(n)."""
        urged, self._urged = self._urged, set()
        names = self._parts.listing()
        if not names:
            return None
        self.listed = len(names)
        book = self.book
        fresh = [
            name
            for name in names
            if not book.known(name) or (name in urged and book.is_failing(name))
        ]
        return fresh, len(names)

    # -- one target --

    async def scrape(self, name: str, deadline: float | None = None) -> bool:
        """Scrape one target now (within `deadline` s, default `timeout`); False (counted,
        logged on change) when it failed. Never raises except for cancellation."""
        parts = self._parts
        target = parts.find(name)
        if target is None:
            return True  # it left after the round was prepared: nothing to say about it
        loop = asyncio.get_running_loop()
        started = loop.time()
        seconds = self.timeout if deadline is None else deadline
        self.scrapes += 1
        try:
            try:
                async with asyncio.timeout(seconds):
                    body = await parts.fetch(target, seconds)
            except TimeoutError:
                raise ScrapeFailure("timeout", f"no answer within {seconds:g}s") from None
            parts.take(name, target, body, self._clock())
        except ScrapeFailure as failure:
            self.book.failed(name, failure)
            return False
        except Exception as err:  # a bug must not stop the other targets' scrapes
            self._logger.exception("scraping %s %s failed unexpectedly", self._noun, name)
            self.book.failed(name, ScrapeFailure("internal", repr(err)))
            return False
        finally:
            self.last_scrape_seconds = loop.time() - started
        self.book.succeeded(name)
        return True
