"""The kubelet scraper: every node's ``/metrics/resource``, on a fixed cadence, into a
:class:`~custom_metrics_server.usage.store.UsageStore`.

This module owns what the kubelet scrape does its own way, over the scraping core
(:mod:`.core`): which nodes are scraped (the node list), how a node is reached
(:mod:`.kubelet_client`), how its body is read (:mod:`kubelet_format.rows`) and fed to the
store, when a silent node's usage is dropped (after three intervals without an answer, or as
soon as the node leaves the node list), readiness and the counters of its self-metrics
(:mod:`.scraper_metrics`). The core owns the rounds, the deadlines, the classification of
failures, and which nodes are failing, their backoff and the log lines about them
(:mod:`.target_book`).

It must not parse text or compute rates (that is :mod:`kubelet_format.rows` and
:mod:`usage.store`) and does not decide what the usage means for any API.

The schedule (:mod:`.rounds`, the same as the pod scraper's): rounds never overlap,
the first one starts as soon as ``nodes_synced`` returns (the Kubernetes backend: every watched
list has synced, so the first round does not compete with the pods' initial list), nodes that join
between rounds are scraped at once (``notice_nodes``, called by the node watch's sink), and so
are failing nodes that became reachable (``notice_nodes(names)``: a node turned Ready, a node
agent appeared or turned ready), whatever their backoff, starts
are spread over the first half of the interval except in the first round and in those
catch-ups, which are only paced at ``FIRST_STARTS_PER_SECOND`` (1,000 a second) so that usage
comes first thing, each scrape's deadline ends the round before the next tick, at most
``concurrency`` scrapes are in flight over the scraper's own connection pool of that size
(never the pool of the watches and reviews), and nodes whose last scrape failed take at most a
quarter of the slots.

* **Backoff**: a node that failed *k* times in a row is tried again after ``2**(k-1)`` rounds,
  at most every ``MAX_BACKOFF_ROUNDS`` rounds, until it answers (:mod:`.target_book`).

A kubelet body that says ``scrape_error 1`` (its stats provider failed) carries no usage and
counts as a failure, so the node keeps its last usage until it ages out instead of flapping to
"no usage".

Cost per round: O(n log n) to order the n listed nodes, O(1) per node to schedule, one task and
one HTTP request per node scraped; at most ``concurrency`` of them alive at once.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Collection, Iterable
from types import TracebackType
from typing import Final, Self

from custom_metrics_server.domain import Readiness
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kubelet_format.rows import read_usage_rows
from custom_metrics_server.scraping.core import ScrapeCore, ScrapeParts, ScrapeStats, ScrapeWords
from custom_metrics_server.scraping.failure import ScrapeFailure
from custom_metrics_server.scraping.kubelet_client import MAX_BODY_BYTES, KubeletFetcher, Source
from custom_metrics_server.scraping.rounds import FIRST_STARTS_PER_SECOND
from custom_metrics_server.scraping.target_book import sample_names
from custom_metrics_server.usage.store import UsageStore

__all__ = ["AGE_OUT_INTERVALS", "DEFAULT_CONCURRENCY", "FIRST_STARTS_PER_SECOND", "KubeletScraper"]

logger = logging.getLogger(__name__)

#: A node's usage is dropped after this many intervals without an answer.
AGE_OUT_INTERVALS: Final = 3
#: Scrapes in flight at once, by default (`--kubelet-scrape-concurrency`).
DEFAULT_CONCURRENCY: Final = 32


class KubeletScraper:
    """Scrapes every node's kubelet into ``store`` while entered (``async with``);
    ``nodes`` is its :class:`~.target_book.TargetBook` (which nodes fail, and why)."""

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
        agent_tls: ssl.SSLContext | None = None,
        kubelet_ca_file: str | None = None,
        kubelet_insecure_tls: bool = False,
        nodes_synced: Callable[[], Awaitable[None]] | None = None,
        clock: Callable[[], float] = time.time,
        max_body_bytes: int = MAX_BODY_BYTES,
        target: str = "kubelet",
    ) -> None:
        self._nodes = nodes
        self._store = store
        self.interval = interval
        self.timeout = timeout
        self.concurrency = concurrency
        self._clock = clock
        self.target = target  # what is scraped, for messages: "kubelet" or "node agent"
        self._nodes_expired = 0
        self._core: ScrapeCore[str] = ScrapeCore(
            ScrapeParts(
                listing=self._node_names,
                prune=self._prune,
                find=_itself,
                fetch=self._fetch,
                take=self._take,
            ),
            words=ScrapeWords(
                target=target,
                what=target,
                noun="node",
                listing="node list",
                advice="raise --kubelet-scrape-concurrency or --metric-resolution",
            ),
            interval=interval,
            timeout=timeout,
            concurrency=concurrency,
            age_out_intervals=AGE_OUT_INTERVALS,
            clock=clock,
            logger=logger,
            synced=nodes_synced,
        )
        self._fetcher = KubeletFetcher(
            client,
            timeout=timeout,
            concurrency=concurrency,
            source=source,
            kubelet_port=kubelet_port,
            kubelet_scheme=kubelet_scheme,
            node_address=node_address,
            agent_tls=agent_tls,
            kubelet_ca_file=kubelet_ca_file,
            kubelet_insecure_tls=kubelet_insecure_tls,
            max_body_bytes=max_body_bytes,
            target=target,
        )
        #: which nodes fail, and why
        self.nodes = self._core.book
        #: slots nodes whose last scrape failed may take at once
        self.failing_concurrency = self._core.rounds.failing_concurrency

    # -- lifecycle --

    async def __aenter__(self) -> Self:
        self._fetcher.open()
        self._core.start("kubelet-scraper")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._core.stop()
        await self._fetcher.aclose()

    def notice_nodes(self, reachable: Iterable[str] = ()) -> None:
        """Nodes may have joined the list: scrape the ones never scraped before the next
        round is due; and ``reachable`` nodes (a node turned Ready, its agent appeared or
        turned ready) at once too if their last scrape failed, instead of after their
        backoff. O(1) + O(len(reachable)); the node watch's sink calls it on ADDED events,
        relists and Ready transitions, the agent directory when a node's agent changes."""
        self._core.notice(reachable)

    # -- the core's parts --

    def _node_names(self) -> list[str] | None:
        try:
            return sorted(set(self._nodes()))
        except Exception:
            logger.exception("listing the nodes to scrape failed; skipping this round")
            return None

    def _prune(self, listed: set[str]) -> None:
        """Forget the usage of nodes that left the list and expire silent ones. O(n)."""
        for gone in [name for name in self._store.nodes() if name not in listed]:
            self._store.forget_node(gone)
        expired = self._store.expire(self._clock(), AGE_OUT_INTERVALS * self.interval)
        if expired:
            self._nodes_expired += len(expired)
            logger.info(
                "dropped the usage of %d node(s) silent for %d intervals: %s",
                len(expired),
                AGE_OUT_INTERVALS,
                sample_names(expired),
            )

    def _fetch(self, name: str, seconds: float) -> Awaitable[bytes]:
        return self._fetcher.fetch(name, seconds)

    def _take(self, name: str, _: str, body: bytes, now: float) -> None:
        """Read a kubelet body into the store. O(length of the body)."""
        try:
            # No await from here to the store: `known` must still be the store's.
            rows = read_usage_rows(body, default_time=now, known=self._store.known(name))
        except ValueError as err:
            raise ScrapeFailure("parse", f"unreadable metrics: {err}") from err
        if rows.scrape_error:
            raise ScrapeFailure(
                "kubelet_error", "the kubelet reports scrape_error (its stats provider failed)"
            )
        self._store.apply_rows(name, rows, now)

    # -- one node --

    async def scrape_node(self, name: str, *, deadline: float | None = None) -> bool:
        """Scrape one node now (within `deadline` s, default `timeout`) and feed the store;
        False (counted, logged on change) when it failed. Never raises except for
        cancellation."""
        return await self._core.scrape(name, deadline)

    # -- reporting --

    def readiness(self) -> Readiness:
        """Whether usage is available, for `/readyz?verbose`: not ready until the first round
        with nodes has completed, whatever its outcome; then ready, with a note while usage
        is only partly there (rates need a second answer of each kubelet) or when no node
        answered the first round. O(1)."""
        core = self._core
        rounds = core.rounds
        if rounds.first_round is None:
            if not core.work.running:
                return Readiness(False, f"the {self.target} scraper is not running")
            if rounds.started_at is None:
                return Readiness(False, "usage not available yet: waiting for the node list")
            if not core.listed and not core.scrapes:
                return Readiness(False, "usage not available yet: no node is listed")
            return Readiness(
                False, f"usage not available yet: the first {self.target} scrape round is running"
            )
        _, listed = rounds.first_round
        if not rounds.rounds_answered:
            return Readiness(
                True,
                f"usage not available: no {self.target} answered the first scrape round "
                f"(0 of {listed})",
            )
        if rounds.rounds_answered < 2:
            return Readiness(
                True,
                f"usage partly available: {self.target}s answered one scrape round so far; "
                f"CPU rates need a second answer (next round within {self.interval:g}s)",
            )
        return Readiness(True)

    def stats(self) -> ScrapeStats:
        """A snapshot of the counters (its targets are nodes). O(nodes)."""
        return self._core.stats(expired=self._nodes_expired)


def _itself(name: str) -> str:
    """A node's target is its name (every listed node is scraped)."""
    return name
