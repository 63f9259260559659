"""The kubelet scraper: every node's ``/metrics/resource``, on a fixed cadence, into a
:class:`~custom_metrics_server.compute.usage.UsageStore`.

This module owns the schedule of usage collection: when each node is scraped, how many at
once, how long a node may take, and when a silent node's usage is dropped (after three
intervals without an answer, or as soon as the node leaves the node list). It reports
readiness and the counters of its self-metrics (:mod:`.scraper_metrics`). How a node is
reached and why a fetch failed is :mod:`.kubelet_client`; which nodes are failing, their
backoff and the log lines about them are :mod:`.scrape_nodes`.

It must not parse text or compute rates (that is :mod:`.kubelet_reader` and :mod:`.usage`)
and does not decide what the usage means for any API.

Scheduling, built so that no number of failing or hanging kubelets can starve the event loop
(the server shares it with every request and health probe):

* **Rounds never overlap.** Round *k* starts at its tick ``start + k * interval``; the first
  one as soon as ``nodes_synced`` returns (the Kubernetes backend: every watched list has
  synced, so the first round does not compete with the initial list of the pods). A round
  that is still running at the next tick (the loop was stalled, or every slot was taken)
  delays the next round until it ends, and the ticks it missed are skipped (counted as
  overruns), so work never piles up.
* **New nodes at once.** Between rounds, nodes that were never scraped (the node list was
  empty when it synced, or a node joined) are scraped as soon as the node watch reports them
  (``notice_nodes``), not at the next tick: usage after a start or a scale-up does not wait a
  whole interval. That catch-up takes the same slots, deadlines and pacing as a first round.
* **Starts are spread** over the first half of the interval (node *i* of *n* at
  ``i * interval / 2n``), least recently attempted first, woken at most every 10 ms; except
  in the first round with nodes and in catch-ups, whose starts are only paced at
  ``FIRST_STARTS_PER_SECOND`` (1,000 a second: 3 nodes start within 3 ms, 3,000 within 3 s
  or half the interval, whichever is shorter), so that usage comes first thing and thousands
  of failing kubelets still cannot take the event loop. Each scrape's deadline is
  the smaller of ``timeout`` and what is left of 90 % of the interval (never under 40 % of
  it), so a round normally ends before the next tick.
* **Bounded requests in flight**: at most ``concurrency`` scrapes at once, over the scraper's
  own connection pool of that size (never the pool of the watches and reviews). Nodes whose
  last scrape failed take at most a quarter of the slots, so kubelets that hang until the
  deadline cannot hold up healthy ones. A node that gets no slot before the next tick waits
  for the next round, first in line then (counted as deferred).
* **Backoff**: a node that failed *k* times in a row is tried again after ``2**(k-1)`` rounds,
  at most every ``MAX_BACKOFF_ROUNDS`` rounds, until it answers (:mod:`.scrape_nodes`).

A kubelet body that says ``scrape_error 1`` (its stats provider failed) carries no usage and
counts as a failure, so the node keeps its last usage until it ages out instead of flapping to
"no usage".

Cost per round: O(n log n) to order the n listed nodes, O(1) per node to schedule, one task and
one HTTP request per node scraped; at most ``concurrency`` of them alive at once.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from types import MappingProxyType, TracebackType
from typing import Final, Self

import httpx

from custom_metrics_server.compute.kubelet_client import MAX_BODY_BYTES, KubeletFetcher, Source
from custom_metrics_server.compute.kubelet_reader import parse_resource_metrics
from custom_metrics_server.compute.scrape_failure import ScrapeFailure
from custom_metrics_server.compute.scrape_nodes import NodeBook, sample_names
from custom_metrics_server.compute.scraper_metrics import ScraperStats
from custom_metrics_server.compute.usage import UsageStore
from custom_metrics_server.domain import Readiness
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.runtime.tasks import BackgroundTasks

__all__ = ["AGE_OUT_INTERVALS", "DEFAULT_CONCURRENCY", "KubeletScraper"]

logger = logging.getLogger(__name__)

#: A node's usage is dropped after this many intervals without an answer.
AGE_OUT_INTERVALS: Final = 3
#: Scrapes in flight at once, by default (`--kubelet-scrape-concurrency`).
DEFAULT_CONCURRENCY: Final = 32
#: Starts are spread over this share of the interval; scrapes end by `_ROUND_SHARE` of it.
_SPREAD: Final = 0.5
_ROUND_SHARE: Final = 0.9
#: The shortest deadline a scrape gets, as a share of the interval.
_FLOOR_SHARE: Final = 0.4
#: The dispatcher wakes at most this often (s): starts due within it go out together.
_TICK: Final = 0.01
#: Scrapes started per second, at most, in the first round and when nodes join: usage comes
#: first thing, and thousands of kubelets failing at once still cannot take the event loop.
FIRST_STARTS_PER_SECOND: Final = 1000.0


@dataclass
class _Counters:
    rounds_started: int = 0
    rounds_completed: int = 0
    rounds_overrun: int = 0
    scrapes: int = 0
    deferred: int = 0
    nodes_expired: int = 0
    last_round_seconds: float | None = None
    last_scrape_seconds: float | None = None


class KubeletScraper:
    """Scrapes every node's kubelet into ``store`` while entered (``async with``);
    ``nodes`` is its :class:`~.scrape_nodes.NodeBook` (which nodes fail, and why)."""

    def __init__(
        self,
        client: KubeClient,
        *,
        nodes: Callable[[], Collection[str]],
        store: UsageStore,
        interval: float = 15.0,
        timeout: float = 10.0,
        concurrency: int = DEFAULT_CONCURRENCY,
        source: Source = "proxy",
        kubelet_port: int = 10250,
        kubelet_scheme: str = "https",
        node_address: Callable[[str], str | None] | None = None,
        kubelet_client: httpx.AsyncClient | None = None,
        kubelet_ca_file: str | None = None,
        kubelet_insecure_tls: bool = False,
        nodes_synced: Callable[[], Awaitable[None]] | None = None,
        clock: Callable[[], float] = time.time,
        max_body_bytes: int = MAX_BODY_BYTES,
        target: str = "kubelet",
    ) -> None:
        if interval <= 0 or timeout <= 0:
            raise ValueError("interval and timeout must be positive")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self._fetcher = KubeletFetcher(
            client,
            timeout=timeout,
            concurrency=concurrency,
            source=source,
            kubelet_port=kubelet_port,
            kubelet_scheme=kubelet_scheme,
            node_address=node_address,
            kubelet_client=kubelet_client,
            kubelet_ca_file=kubelet_ca_file,
            kubelet_insecure_tls=kubelet_insecure_tls,
            max_body_bytes=max_body_bytes,
            target=target,
        )
        self._nodes = nodes
        self._nodes_synced = nodes_synced
        self._store = store
        self.interval = interval
        self.timeout = timeout
        self.concurrency = concurrency
        #: slots nodes whose last scrape failed may take at once
        self.failing_concurrency = max(1, concurrency // 4)
        self._clock = clock
        self.target = target  # what is scraped, for messages: "kubelet" or "node agent"
        self.nodes = NodeBook(target=target, interval=interval, age_out_intervals=AGE_OUT_INTERVALS)
        #: the round loop and the scrapes in flight (let go as each one ends)
        self._work = BackgroundTasks()
        self._counters = _Counters()
        self._first_round: tuple[int, int] | None = None  # (answered, listed)
        self._rounds_answered = 0  # rounds (and catch-ups) in which some node answered
        self._nodes_added = asyncio.Event()
        self._started_at: float | None = None  # loop time the node list synced
        self._listed = 0
        self._in_flight = 0
        self._failing_in_flight = 0
        self._slot_freed = asyncio.Event()
        self._overrunning = False

    # -- lifecycle --

    async def __aenter__(self) -> Self:
        self._fetcher.open()
        self._work.start(self._run(), name="kubelet-scraper")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._work.stop()
        await self._fetcher.aclose()

    def notice_nodes(self) -> None:
        """Nodes may have joined the list: scrape the ones never scraped before the next
        round is due. O(1); the node watch's sink calls it on ADDED events and relists."""
        self._nodes_added.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        if self._nodes_synced is not None:
            await self._nodes_synced()
        start = self._started_at = loop.time()
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
                logger.info("%s scrape rounds are back on schedule", self.target)
            await self._between_rounds(number - 1, start + number * self.interval)

    async def _between_rounds(self, number: int, until: float) -> None:
        """Wait for loop time `until`, scraping nodes that join meanwhile (`notice_nodes`)."""
        loop = asyncio.get_running_loop()
        while (remaining := until - loop.time()) > 0:
            try:
                async with asyncio.timeout(remaining):
                    await self._nodes_added.wait()
            except TimeoutError:
                return
            self._nodes_added.clear()
            await self._catch_up(number, until)

    async def _catch_up(self, number: int, next_tick: float) -> None:
        """Scrape the listed nodes never scraped yet, now. O(n) to find them."""
        names = self._node_names()
        if not names:
            return
        new = [name for name in names if not self.nodes.known(name)]
        if not new:
            return
        logger.debug("scraping %d new node(s) before the next round", len(new))
        started = asyncio.get_running_loop().time()
        self._listed = len(names)
        self.nodes.start_round()
        results = await self._dispatch(
            new,
            number,
            started=started,
            next_tick=next_tick,
            spread=len(new) / FIRST_STARTS_PER_SECOND,
        )
        answered = sum(results)
        self.nodes.summarise_round(number, len(names), answered=answered, scraped=len(results))
        self._round_done(started, answered=answered, listed=len(names))

    def _overrun(self, took: float, missed: int) -> None:
        self._counters.rounds_overrun += 1
        if self._overrunning:
            return
        self._overrunning = True
        logger.warning(
            "a %s scrape round took %.1fs, longer than the %gs interval: skipping %d round(s) "
            "(rounds never overlap); if it keeps happening, raise --kubelet-scrape-concurrency "
            "or --metric-resolution",
            self.target,
            took,
            self.interval,
            missed,
        )

    # -- rounds --

    def _node_names(self) -> list[str] | None:
        try:
            return sorted(set(self._nodes()))
        except Exception:
            logger.exception("listing the nodes to scrape failed; skipping this round")
            return None

    def _prepare(self, number: int) -> tuple[list[str], int] | None:
        """The nodes due this round, least recently attempted first, and how many are listed;
        forgets nodes that left the list and expires silent ones. O(n log n)."""
        names = self._node_names()
        if names is None:
            return None
        listed = set(names)
        self.nodes.forget(listed)
        for gone in [name for name in self._store.nodes() if name not in listed]:
            self._store.forget_node(gone)
        expired = self._store.expire(self._clock(), AGE_OUT_INTERVALS * self.interval)
        if expired:
            self._counters.nodes_expired += len(expired)
            logger.info(
                "dropped the usage of %d node(s) silent for %d intervals: %s",
                len(expired),
                AGE_OUT_INTERVALS,
                sample_names(expired),
            )
        self._listed = len(names)
        return self.nodes.due(names, number), len(names)

    async def _round(self, number: int, started: float, next_tick: float) -> None:
        """Scrape the due nodes, spread over the first half of the interval, at most
        `concurrency` at once; returns when every scrape started in it has ended."""
        prepared = self._prepare(number)
        if prepared is None:
            return
        due, listed = prepared
        self._counters.rounds_started += 1
        self.nodes.start_round()
        spread = _SPREAD * self.interval
        if self._first_round is None:  # usage is wanted as soon as the node list is in
            spread = min(spread, len(due) / FIRST_STARTS_PER_SECOND)
        results = await self._dispatch(
            due, number, started=started, next_tick=next_tick, spread=spread
        )
        self._counters.rounds_completed += 1
        self._counters.last_round_seconds = asyncio.get_running_loop().time() - started
        self.nodes.summarise_round(number, listed, answered=sum(results), scraped=len(results))
        self._round_done(started, answered=sum(results), listed=listed)

    def _round_done(self, started: float, *, answered: int, listed: int) -> None:
        """Book a round (or catch-up) for readiness; the first one with nodes gets a line."""
        if answered:
            self._rounds_answered += 1
        if self._first_round is not None or not listed:
            # A round before the node watch listed anything says nothing about the kubelets.
            return
        self._first_round = (answered, listed)
        loop = asyncio.get_running_loop()
        since = self._started_at if self._started_at is not None else started
        logger.info(
            "first %s scrape round done: %d of %d nodes answered in %.1fs (%.1fs after the "
            "node list synced)",
            self.target,
            answered,
            listed,
            loop.time() - started,
            loop.time() - since,
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
            failing = self.nodes.is_failing(name)
            if failing and self._failing_in_flight >= self.failing_concurrency:
                self._counters.deferred += 1  # its turn comes first next round
                continue
            if now >= next_tick or not await self._free_slot(next_tick):
                self._counters.deferred += len(due) - index
                break
            now = loop.time()
            self.nodes.attempted(name, number)
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
        task = self._work.start(
            self.scrape_node(name, deadline=deadline), name=f"scrape-{name}", transient=True
        )

        def done(finished: asyncio.Task[bool]) -> None:
            self._in_flight -= 1
            if failing:
                self._failing_in_flight -= 1
            self._slot_freed.set()

        task.add_done_callback(done)
        return task

    # -- one node --

    async def scrape_node(self, name: str, *, deadline: float | None = None) -> bool:
        """Scrape one node now (within `deadline` s, default `timeout`) and feed the store;
        False (counted, logged on change) when it failed. Never raises except for
        cancellation."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        seconds = self.timeout if deadline is None else deadline
        self._counters.scrapes += 1
        try:
            try:
                async with asyncio.timeout(seconds):
                    body = await self._fetcher.fetch(name, seconds)
            except TimeoutError:
                raise ScrapeFailure("timeout", f"no answer within {seconds:g}s") from None
            now = self._clock()
            try:
                scrape = parse_resource_metrics(body, default_time=now)
            except ValueError as err:
                raise ScrapeFailure("parse", f"unreadable metrics: {err}") from err
            if scrape.scrape_error:
                raise ScrapeFailure(
                    "kubelet_error", "the kubelet reports scrape_error (its stats provider failed)"
                )
            self._store.apply(name, scrape, now)
        except ScrapeFailure as failure:
            self.nodes.failed(name, failure)
            return False
        except Exception as err:  # a bug must not stop the other nodes' scrapes
            logger.exception("scraping node %s failed unexpectedly", name)
            self.nodes.failed(name, ScrapeFailure("internal", repr(err)))
            return False
        finally:
            self._counters.last_scrape_seconds = loop.time() - started
        self.nodes.succeeded(name)
        return True

    # -- reporting --

    def readiness(self) -> Readiness:
        """Whether usage is available, for `/readyz?verbose`: not ready until the first round
        with nodes has completed, whatever its outcome; then ready, with a note while usage
        is only partly there (rates need a second answer of each kubelet) or when no node
        answered the first round. O(1)."""
        if self._first_round is None:
            if not self._work.running:
                return Readiness(False, f"the {self.target} scraper is not running")
            if self._started_at is None:
                return Readiness(False, "usage not available yet: waiting for the node list")
            if not self._listed and not self._counters.scrapes:
                return Readiness(False, "usage not available yet: no node is listed")
            return Readiness(
                False, f"usage not available yet: the first {self.target} scrape round is running"
            )
        _, listed = self._first_round
        if not self._rounds_answered:
            return Readiness(
                True,
                f"usage not available: no {self.target} answered the first scrape round "
                f"(0 of {listed})",
            )
        if self._rounds_answered < 2:
            return Readiness(
                True,
                f"usage partly available: {self.target}s answered one scrape round so far; "
                f"CPU rates need a second answer (next round within {self.interval:g}s)",
            )
        return Readiness(True)

    def stats(self) -> ScraperStats:
        """A snapshot of the counters. O(nodes)."""
        counters = self._counters
        failing = self.nodes.failing()
        return ScraperStats(
            rounds_started=counters.rounds_started,
            rounds_completed=counters.rounds_completed,
            rounds_overrun=counters.rounds_overrun,
            scrapes=counters.scrapes,
            failures=sum(self.nodes.failures.values()),
            failures_by_reason=MappingProxyType(dict(self.nodes.failures)),
            deferred=counters.deferred,
            in_flight=self._in_flight,
            concurrency=self.concurrency,
            nodes=self._listed,
            nodes_failing=len(failing),
            nodes_backing_off=sum(1 for _, times in failing.values() if times > 1),
            nodes_expired=counters.nodes_expired,
            last_round_seconds=counters.last_round_seconds,
            last_scrape_seconds=counters.last_scrape_seconds,
        )
