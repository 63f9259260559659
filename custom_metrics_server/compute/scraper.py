"""The kubelet scraper: every node's ``/metrics/resource``, on a fixed cadence, into a
:class:`~custom_metrics_server.compute.usage.UsageStore`.

This module owns the I/O of usage collection: which URL each node is read from (the API
server's node proxy by default, or the kubelet port directly), when, how many at once, how long
a node may take, what happens on failure (counted by reason, backed off, logged once when a
node starts failing and once when it answers again, summarised per round when many change at
once) and when a silent node's usage is dropped (after three intervals without an answer, or
as soon as the node leaves the node list). It reports readiness and self-metrics.

It must not parse text or compute rates (that is :mod:`.kubelet_reader` and :mod:`.usage`)
and does not decide what the usage means for any API.

Scheduling, built so that no number of failing or hanging kubelets can starve the event loop
(the server shares it with every request and health probe):

* **Rounds never overlap.** Round *k* starts at its tick ``start + k * interval``; the first
  one as soon as the node list has synced (``nodes_synced``). A round that is still running at
  the next tick (the loop was stalled, or every slot was taken) delays the next round until it
  ends, and the ticks it missed are skipped (counted as overruns), so work never piles up.
* **Starts are spread** over the first half of the interval (node *i* of *n* at
  ``i * interval / 2n``), least recently attempted first, woken at most every 10 ms; each
  scrape's deadline is the smaller of ``timeout`` and what is left of 90 % of the interval
  (never under 40 % of it), so a round normally ends before the next tick.
* **Bounded requests in flight**: at most ``concurrency`` scrapes at once, over the scraper's
  own connection pool of that size (never the pool of the watches and reviews). Nodes whose
  last scrape failed take at most a quarter of the slots, so kubelets that hang until the
  deadline cannot hold up healthy ones. A node that gets no slot before the next tick waits
  for the next round, first in line then (counted as deferred).
* **Backoff**: a node that failed *k* times in a row is tried again after ``2**(k-1)`` rounds,
  at most every ``MAX_BACKOFF_ROUNDS`` rounds, until it answers.

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
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Final, Literal, Self
from urllib.parse import quote

import httpx
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from custom_metrics_server.compute.kubelet_reader import parse_resource_metrics
from custom_metrics_server.compute.scrape_failure import ScrapeFailure
from custom_metrics_server.compute.usage import UsageStore
from custom_metrics_server.domain import Readiness
from custom_metrics_server.kube.client import (
    USER_AGENT,
    BearerAuth,
    KubeApiError,
    KubeClient,
    read_capped,
)
from custom_metrics_server.kube.config import Connection
from custom_metrics_server.runtime.tasks import cancel_and_wait
from custom_metrics_server.runtime.tls import client_context

__all__ = [
    "AGE_OUT_INTERVALS",
    "DEFAULT_CONCURRENCY",
    "MAX_BACKOFF_ROUNDS",
    "KubeletScraper",
    "ScraperCollector",
    "ScraperStats",
    "kubelet_http_client",
]

logger = logging.getLogger(__name__)

#: A node's usage is dropped after this many intervals without an answer.
AGE_OUT_INTERVALS: Final = 3
#: A node failing again and again is tried at least this often (in rounds).
MAX_BACKOFF_ROUNDS: Final = 8
#: Scrapes in flight at once, by default (`--kubelet-scrape-concurrency`).
DEFAULT_CONCURRENCY: Final = 32
KUBELET_PATH: Final = "/metrics/resource"
#: A kubelet's answer beyond this is a `too_large` failure, read no further: a 110-pod node
#: answers ~250 KiB, so 16 MiB only stops a broken or hostile source from exhausting memory.
MAX_BODY_BYTES: Final = 16 << 20
#: Starts are spread over this share of the interval; scrapes end by `_ROUND_SHARE` of it.
_SPREAD: Final = 0.5
_ROUND_SHARE: Final = 0.9
#: The shortest deadline a scrape gets, as a share of the interval.
_FLOOR_SHARE: Final = 0.4
#: The dispatcher wakes at most this often (s): starts due within it go out together.
_TICK: Final = 0.01
#: Per round, this many nodes that start failing (or answer again) get their own log line;
#: the rest are summed up in one line at the end of the round.
_LOG_NODES: Final = 5

Source = Literal["proxy", "direct"]


@dataclass(frozen=True, slots=True)
class ScraperStats:
    """Counters and gauges for self-metrics (a snapshot)."""

    rounds_started: int
    rounds_completed: int
    rounds_overrun: int
    scrapes: int
    failures: int
    failures_by_reason: Mapping[str, int]
    deferred: int
    in_flight: int
    concurrency: int
    nodes: int
    nodes_failing: int
    nodes_backing_off: int
    nodes_expired: int
    last_round_seconds: float | None
    last_scrape_seconds: float | None


@dataclass(slots=True)
class _NodeStatus:
    failing: bool = False
    consecutive_failures: int = 0
    last_reason: str = ""
    #: the round of the last attempt (-1: never attempted)
    last_round: int = -1


@dataclass
class _Counters:
    rounds_started: int = 0
    rounds_completed: int = 0
    rounds_overrun: int = 0
    scrapes: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    deferred: int = 0
    nodes_expired: int = 0
    last_round_seconds: float | None = None
    last_scrape_seconds: float | None = None


@dataclass
class _RoundLog:
    """Nodes that changed state in the current round, for one summary line."""

    new_failures: Counter[str] = field(default_factory=Counter)
    new_failing_nodes: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)


def kubelet_http_client(
    connection: Connection,
    *,
    ca_file: str | None = None,
    insecure: bool = False,
    timeout: float = 10.0,
    max_connections: int = DEFAULT_CONCURRENCY,
) -> httpx.AsyncClient:
    """An HTTP client for talking to kubelets directly: the kubelets' serving CA
    (``ca_file``, else the cluster CA of ``connection``; ``insecure`` skips verification as
    metrics-server's ``--kubelet-insecure-tls`` does), the bearer token and client
    certificate of ``connection`` (the kubelet authorises them through the API server)."""
    context = client_context(
        ca_file or connection.ca_file,
        insecure=insecure,
        cert_file=connection.cert_file if connection.key_file else None,
        key_file=connection.key_file,
    )
    return httpx.AsyncClient(
        verify=context,
        timeout=timeout,
        auth=BearerAuth(connection),
        headers={"User-Agent": USER_AGENT, "Accept": "text/plain"},
        follow_redirects=False,
        limits=httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        ),
    )


class KubeletScraper:
    """Scrapes every node's kubelet into ``store`` while entered (``async with``)."""

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
        if source not in ("proxy", "direct"):
            raise ValueError(f"source must be 'proxy' or 'direct', not {source!r}")
        if source == "direct" and node_address is None:
            raise ValueError("source='direct' needs node_address (a node's InternalIP)")
        self._client = client
        self._nodes = nodes
        self._nodes_synced = nodes_synced
        self._store = store
        self.interval = interval
        self.timeout = timeout
        self.concurrency = concurrency
        #: slots nodes whose last scrape failed may take at once
        self.failing_concurrency = max(1, concurrency // 4)
        self.max_body_bytes = max_body_bytes
        self.source: Source = source
        self._port = kubelet_port
        self._scheme = kubelet_scheme
        self._node_address = node_address
        self._kubelet_client = kubelet_client
        self._owns_kubelet_client = False
        self._proxy_client: KubeClient | None = None
        self._kubelet_ca_file = kubelet_ca_file
        self._kubelet_insecure_tls = kubelet_insecure_tls
        self._clock = clock
        self.target = target  # what is scraped, for messages: "kubelet" or "node agent"
        self._status: dict[str, _NodeStatus] = {}
        self._tasks: set[asyncio.Task[bool]] = set()
        self._runner: asyncio.Task[None] | None = None
        self._counters = _Counters()
        self._first_round: tuple[int, int] | None = None  # (answered, listed)
        self._listed = 0
        self._in_flight = 0
        self._failing_in_flight = 0
        self._slot_freed = asyncio.Event()
        self._round_log = _RoundLog()
        self._overrunning = False

    # -- lifecycle --

    async def __aenter__(self) -> Self:
        if self.source == "direct" and self._kubelet_client is None:
            self._kubelet_client = kubelet_http_client(
                self._client.connection,
                ca_file=self._kubelet_ca_file,
                insecure=self._kubelet_insecure_tls,
                timeout=self.timeout,
                max_connections=self.concurrency,
            )
            self._owns_kubelet_client = True
        self._runner = asyncio.create_task(self._run(), name="kubelet-scraper")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await cancel_and_wait([*self._tasks, self._runner])
        self._tasks.clear()
        self._runner = None
        if self._owns_kubelet_client and self._kubelet_client is not None:
            await self._kubelet_client.aclose()
            self._kubelet_client = None
            self._owns_kubelet_client = False
        if self._proxy_client is not None:
            await self._proxy_client.aclose()
            self._proxy_client = None

    def _proxy(self) -> KubeClient:
        """The scraper's own pool to the API server (the node proxy), made on first use."""
        if self._proxy_client is None:
            self._proxy_client = KubeClient(
                self._client.connection, timeout=self.timeout, max_connections=self.concurrency
            )
        return self._proxy_client

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        if self._nodes_synced is not None:
            await self._nodes_synced()
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
                logger.info("%s scrape rounds are back on schedule", self.target)
            await asyncio.sleep(max(0.0, start + number * self.interval - loop.time()))

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

    def _due(self, status: _NodeStatus | None, number: int) -> bool:
        """Whether a node is due in round `number` (backoff after consecutive failures)."""
        if status is None or status.consecutive_failures == 0:
            return True
        wait = min(1 << (status.consecutive_failures - 1), MAX_BACKOFF_ROUNDS)
        return number - status.last_round >= wait

    def _prepare(self, number: int) -> tuple[list[str], int] | None:
        """The nodes due this round, least recently attempted first, and how many are listed;
        forgets nodes that left the list and expires silent ones. O(n log n)."""
        names = self._node_names()
        if names is None:
            return None
        listed = set(names)
        for gone in [name for name in self._status if name not in listed]:
            del self._status[gone]
        for gone in [name for name in self._store.nodes() if name not in listed]:
            self._store.forget_node(gone)
        expired = self._store.expire(self._clock(), AGE_OUT_INTERVALS * self.interval)
        if expired:
            self._counters.nodes_expired += len(expired)
            logger.info(
                "dropped the usage of %d node(s) silent for %d intervals: %s",
                len(expired),
                AGE_OUT_INTERVALS,
                _sample(expired),
            )
        self._listed = len(names)
        status = self._status
        due = [name for name in names if self._due(status.get(name), number)]
        due.sort(key=lambda name: status[name].last_round if name in status else -1)
        return due, len(names)

    async def _round(self, number: int, started: float, next_tick: float) -> None:
        """Scrape the due nodes, spread over the first half of the interval, at most
        `concurrency` at once; returns when every scrape started in it has ended."""
        prepared = self._prepare(number)
        if prepared is None:
            return
        due, listed = prepared
        self._counters.rounds_started += 1
        self._round_log = _RoundLog()
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
            status = self._status.setdefault(name, _NodeStatus())
            failing = status.consecutive_failures > 0
            if failing and self._failing_in_flight >= self.failing_concurrency:
                self._counters.deferred += 1  # its turn comes first next round
                continue
            if now >= next_tick or not await self._free_slot(next_tick):
                self._counters.deferred += len(due) - index
                break
            now = loop.time()
            status.last_round = number
            deadline = min(self.timeout, max(ends_by - now, floor))
            launched.append(self._launch(name, deadline, failing=failing))
        results = await asyncio.gather(*launched) if launched else []
        self._counters.rounds_completed += 1
        self._counters.last_round_seconds = loop.time() - started
        self._summarise_round(number, listed, answered=sum(results), scraped=len(results))
        if self._first_round is None and listed:
            # A round before the node watch listed anything says nothing about the kubelets.
            self._first_round = (sum(results), listed)

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
        task = asyncio.create_task(self.scrape_node(name, deadline=deadline), name=f"scrape-{name}")
        self._tasks.add(task)

        def done(finished: asyncio.Task[bool]) -> None:
            self._tasks.discard(finished)
            self._in_flight -= 1
            if failing:
                self._failing_in_flight -= 1
            self._slot_freed.set()

        task.add_done_callback(done)
        return task

    def _summarise_round(self, number: int, listed: int, *, answered: int, scraped: int) -> None:
        """One line for what the per-node lines left out (many nodes changing at once)."""
        log = self._round_log
        new = len(log.new_failing_nodes)
        if new > _LOG_NODES:
            reasons = ", ".join(f"{reason} {count}" for reason, count in log.new_failures.items())
            logger.warning(
                "%s scrape round %d: %d of %d listed node(s) started failing (%s): %s; "
                "%d of %d scraped answered; failing nodes are retried with backoff (at most "
                "every %d rounds)",
                self.target,
                number,
                new,
                listed,
                reasons,
                _sample(log.new_failing_nodes),
                answered,
                scraped,
                MAX_BACKOFF_ROUNDS,
            )
        if len(log.recovered) > _LOG_NODES:
            logger.info(
                "%s scrape round %d: %d node(s) answer again: %s",
                self.target,
                number,
                len(log.recovered),
                _sample(log.recovered),
            )

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
                    body = await self._fetch(name, seconds)
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
            self._failed(name, failure)
            return False
        except Exception as err:  # a bug must not stop the other nodes' scrapes
            logger.exception("scraping node %s failed unexpectedly", name)
            self._failed(name, ScrapeFailure("internal", repr(err)))
            return False
        finally:
            self._counters.last_scrape_seconds = loop.time() - started
        self._succeeded(name)
        return True

    async def _fetch(self, name: str, deadline: float) -> bytes:
        if self.source == "proxy":
            path = f"/api/v1/nodes/{quote(name, safe='')}/proxy{KUBELET_PATH}"
            try:
                return await self._proxy().get_bytes(
                    path, deadline=deadline, limit=self.max_body_bytes
                )
            except KubeApiError as err:
                if err.reason == "TooLarge":
                    raise ScrapeFailure("too_large", err.message) from err
                if isinstance(err.__cause__, httpx.TimeoutException):
                    raise ScrapeFailure("timeout", err.message) from err
                if err.code:
                    raise ScrapeFailure(f"http_{err.code}", err.message) from err
                raise ScrapeFailure("unreachable", err.message) from err
        address = self._node_address(name) if self._node_address else None
        if not address:
            if self.target == "kubelet":
                raise ScrapeFailure("no_address", "the node has no InternalIP address")
            raise ScrapeFailure("no_address", f"no {self.target} runs on the node")
        host = f"[{address}]" if ":" in address else address
        url = f"{self._scheme}://{host}:{self._port}{KUBELET_PATH}"
        assert self._kubelet_client is not None
        request = self._kubelet_client.build_request("GET", url, timeout=deadline)
        try:
            response = await self._kubelet_client.send(request, stream=True)
            try:
                if response.status_code >= 300:
                    head = await anext(response.aiter_bytes(), b"")  # for the log, not all
                    text = head[:300].decode("utf-8", "replace").strip()
                    raise ScrapeFailure(f"http_{response.status_code}", f"GET {url}: {text}")
                return await read_capped(response, self.max_body_bytes, what=f"GET {url}")
            finally:
                await response.aclose()
        except KubeApiError as err:  # only read_capped's TooLarge
            raise ScrapeFailure("too_large", err.message) from err
        except httpx.TimeoutException as err:
            raise ScrapeFailure("timeout", f"GET {url}: {err!r}") from err
        except httpx.HTTPError as err:
            raise ScrapeFailure("unreachable", f"GET {url}: {err!r}") from err

    def _failed(self, name: str, failure: ScrapeFailure) -> None:
        self._counters.failures[failure.reason] += 1
        status = self._status.setdefault(name, _NodeStatus())
        status.consecutive_failures += 1
        status.last_reason = failure.reason
        if status.failing:
            logger.debug("node %s still failing (%s): %s", name, failure.reason, failure.message)
            return
        status.failing = True
        log = self._round_log
        log.new_failures[failure.reason] += 1
        log.new_failing_nodes.append(name)
        level = logging.WARNING if len(log.new_failing_nodes) <= _LOG_NODES else logging.DEBUG
        logger.log(
            level,
            "scraping the %s of node %s failed (%s): %s; retrying with backoff (at most every "
            "%d rounds of %gs), its usage is dropped after %d intervals without an answer",
            self.target,
            name,
            failure.reason,
            failure.message,
            MAX_BACKOFF_ROUNDS,
            self.interval,
            AGE_OUT_INTERVALS,
        )

    def _succeeded(self, name: str) -> None:
        status = self._status.setdefault(name, _NodeStatus())
        if status.failing:
            recovered = self._round_log.recovered
            recovered.append(name)
            logger.log(
                logging.INFO if len(recovered) <= _LOG_NODES else logging.DEBUG,
                "the %s of node %s answers again after %d failed scrape(s)",
                self.target,
                name,
                status.consecutive_failures,
            )
        status.failing = False
        status.consecutive_failures = 0
        status.last_reason = ""

    # -- reporting --

    def readiness(self) -> Readiness:
        """Ready once the first round has completed, whatever its outcome; the reason
        says so when no node answered it."""
        if self._first_round is None:
            if self._runner is None:
                return Readiness(False, "the kubelet scraper is not running")
            return Readiness(False, "waiting for the first round of kubelet scrapes")
        answered, listed = self._first_round
        if listed and not answered:
            return Readiness(True, f"no kubelet answered the first scrape round (0 of {listed})")
        return Readiness(True)

    def failing_nodes(self) -> dict[str, str]:
        """Nodes whose last scrape failed, with the reason. O(nodes)."""
        return {name: s.last_reason for name, s in self._status.items() if s.failing}

    def stats(self) -> ScraperStats:
        """A snapshot of the counters. O(nodes)."""
        counters = self._counters
        failing = [status for status in self._status.values() if status.failing]
        return ScraperStats(
            rounds_started=counters.rounds_started,
            rounds_completed=counters.rounds_completed,
            rounds_overrun=counters.rounds_overrun,
            scrapes=counters.scrapes,
            failures=sum(counters.failures.values()),
            failures_by_reason=MappingProxyType(dict(counters.failures)),
            deferred=counters.deferred,
            in_flight=self._in_flight,
            concurrency=self.concurrency,
            nodes=self._listed,
            nodes_failing=len(failing),
            nodes_backing_off=sum(1 for status in failing if status.consecutive_failures > 1),
            nodes_expired=counters.nodes_expired,
            last_round_seconds=counters.last_round_seconds,
            last_scrape_seconds=counters.last_scrape_seconds,
        )


class ScraperCollector(Collector):
    """The scraper's self-metrics, read from `stats()` when `/metrics` is scraped."""

    def __init__(self, scraper: KubeletScraper) -> None:
        self._scraper = scraper

    def collect(self) -> Iterator[Metric]:
        """One family per figure; O(nodes) (the stats snapshot)."""
        stats = self._scraper.stats()
        prefix = "custom_metrics_server_kubelet_scrape"
        yield CounterMetricFamily(
            f"{prefix}_rounds", "Scrape rounds completed.", value=stats.rounds_completed
        )
        yield CounterMetricFamily(
            f"{prefix}_rounds_overrun",
            "Rounds that ran past the next round's start (the next one waited, never overlapped).",
            value=stats.rounds_overrun,
        )
        scrapes = CounterMetricFamily(
            f"{prefix}s", "Node scrapes by outcome (ok, or the failure reason).", labels=["outcome"]
        )
        scrapes.add_metric(["ok"], stats.scrapes - stats.failures - stats.in_flight)
        for reason, count in sorted(stats.failures_by_reason.items()):
            scrapes.add_metric([reason], count)
        yield scrapes
        yield CounterMetricFamily(
            f"{prefix}_deferred",
            "Node scrapes pushed to the next round (no free slot before the next tick).",
            value=stats.deferred,
        )
        yield GaugeMetricFamily(
            "custom_metrics_server_kubelet_scrapes_in_flight",
            "Node scrapes running now (bounded by --kubelet-scrape-concurrency).",
            value=stats.in_flight,
        )
        nodes = GaugeMetricFamily(
            "custom_metrics_server_kubelet_scrape_nodes",
            "Nodes by scrape state: listed, failing (last scrape failed), backing_off "
            "(failed twice or more in a row, tried less often).",
            labels=["state"],
        )
        nodes.add_metric(["listed"], stats.nodes)
        nodes.add_metric(["failing"], stats.nodes_failing)
        nodes.add_metric(["backing_off"], stats.nodes_backing_off)
        yield nodes
        if stats.last_round_seconds is not None:
            yield GaugeMetricFamily(
                f"{prefix}_last_round_duration_seconds",
                "Wall time of the last completed round.",
                value=stats.last_round_seconds,
            )


def _sample(names: Sequence[str], limit: int = 10) -> str:
    """The first few names, for a log line that must stay one line."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
