"""The kubelet scraper: every node's ``/metrics/resource``, on a fixed cadence, into a
:class:`~custom_metrics_server.usage.UsageStore`.

This module owns the I/O of usage collection: which URL each node is read from (the API
server's node proxy by default, or the kubelet port directly), when (every ``interval``
seconds per node, the nodes' starts spread evenly over the interval so the API server and
kubelets see a steady trickle instead of a burst), how long a node may take (a per-node
timeout), what happens on failure (counted by reason, logged at WARNING once when a node
starts failing and at INFO when it answers again, never once per attempt) and when a
silent node's usage is dropped (after three intervals without an answer, or as soon as the
node leaves the node list). It reports readiness and statistics for self-metrics.

It must not parse text or compute rates (that is :mod:`..exposition` and :mod:`..usage`)
and does not decide what the usage means for any API.

Scheduling: round *k* starts at ``start + k * interval``; node *i* of the *n* listed nodes
(sorted by name) is scraped ``i * interval / n`` seconds into its round. A node whose
previous scrape is still running (only possible with ``timeout >= interval``) is skipped
for that round. A kubelet body that says ``scrape_error 1`` (its stats provider failed)
carries no usage and counts as a failure, so the node keeps its last usage until it ages
out instead of flapping to "no usage".
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Final, Literal, Self
from urllib.parse import quote

import httpx

from custom_metrics_server.domain import Readiness
from custom_metrics_server.exposition import parse_resource_metrics
from custom_metrics_server.kube.client import (
    USER_AGENT,
    BearerAuth,
    KubeApiError,
    KubeClient,
    read_capped,
)
from custom_metrics_server.kube.config import Connection
from custom_metrics_server.tasks import cancel_and_wait
from custom_metrics_server.tls import client_context
from custom_metrics_server.usage import UsageStore

__all__ = [
    "AGE_OUT_INTERVALS",
    "KubeletScraper",
    "ScrapeFailure",
    "ScraperStats",
    "kubelet_http_client",
]

logger = logging.getLogger(__name__)

#: A node's usage is dropped after this many intervals without an answer.
AGE_OUT_INTERVALS: Final = 3
KUBELET_PATH: Final = "/metrics/resource"
#: A kubelet's answer beyond this is a `too_large` failure, read no further: a 110-pod node
#: answers ~250 KiB, so 16 MiB only stops a broken or hostile source from exhausting memory.
MAX_BODY_BYTES: Final = 16 << 20

Source = Literal["proxy", "direct"]


class ScrapeFailure(Exception):
    """A node could not be scraped; ``reason`` is a short label for counting."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True, slots=True)
class ScraperStats:
    """Counters and gauges for self-metrics (a snapshot)."""

    rounds_started: int
    rounds_completed: int
    scrapes: int
    failures: int
    failures_by_reason: Mapping[str, int]
    skipped_in_flight: int
    nodes: int
    nodes_failing: int
    nodes_expired: int
    last_round_seconds: float | None
    last_scrape_seconds: float | None


@dataclass
class _NodeStatus:
    failing: bool = False
    consecutive_failures: int = 0
    last_reason: str = ""


@dataclass
class _Counters:
    rounds_started: int = 0
    rounds_completed: int = 0
    scrapes: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    skipped_in_flight: int = 0
    nodes_expired: int = 0
    last_round_seconds: float | None = None
    last_scrape_seconds: float | None = None


def kubelet_http_client(
    connection: Connection,
    *,
    ca_file: str | None = None,
    insecure: bool = False,
    timeout: float = 10.0,
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
        source: Source = "proxy",
        kubelet_port: int = 10250,
        kubelet_scheme: str = "https",
        node_address: Callable[[str], str | None] | None = None,
        kubelet_client: httpx.AsyncClient | None = None,
        kubelet_ca_file: str | None = None,
        kubelet_insecure_tls: bool = False,
        clock: Callable[[], float] = time.time,
        max_body_bytes: int = MAX_BODY_BYTES,
        target: str = "kubelet",
    ) -> None:
        if interval <= 0 or timeout <= 0:
            raise ValueError("interval and timeout must be positive")
        if source not in ("proxy", "direct"):
            raise ValueError(f"source must be 'proxy' or 'direct', not {source!r}")
        if source == "direct" and node_address is None:
            raise ValueError("source='direct' needs node_address (a node's InternalIP)")
        self._client = client
        self._nodes = nodes
        self._store = store
        self.interval = interval
        self.timeout = timeout
        self.max_body_bytes = max_body_bytes
        self.source: Source = source
        self._port = kubelet_port
        self._scheme = kubelet_scheme
        self._node_address = node_address
        self._kubelet_client = kubelet_client
        self._owns_kubelet_client = False
        self._kubelet_ca_file = kubelet_ca_file
        self._kubelet_insecure_tls = kubelet_insecure_tls
        self._clock = clock
        self.target = target  # what is scraped, for messages: "kubelet" or "node agent"
        self._status: dict[str, _NodeStatus] = {}
        self._in_flight: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._runner: asyncio.Task[None] | None = None
        self._counters = _Counters()
        self._first_round: tuple[int, int] | None = None  # (answered, listed)
        self._listed = 0

    # -- lifecycle --

    async def __aenter__(self) -> Self:
        if self.source == "direct" and self._kubelet_client is None:
            self._kubelet_client = kubelet_http_client(
                self._client.connection,
                ca_file=self._kubelet_ca_file,
                insecure=self._kubelet_insecure_tls,
                timeout=self.timeout,
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

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        number = 0
        while True:
            self._start_round()
            number += 1
            await asyncio.sleep(max(0.0, start + number * self.interval - loop.time()))

    # -- rounds --

    def _node_names(self) -> list[str] | None:
        try:
            return sorted(set(self._nodes()))
        except Exception:
            logger.exception("listing the nodes to scrape failed; skipping this round")
            return None

    def _start_round(self) -> None:
        names = self._node_names()
        if names is None:
            return
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
                ", ".join(expired[:10]) + (" ..." if len(expired) > 10 else ""),
            )
        self._counters.rounds_started += 1
        self._listed = len(names)
        task = asyncio.create_task(self._round(names), name="kubelet-scrape-round")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _round(self, names: list[str]) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        spacing = self.interval / len(names) if names else 0.0
        jobs = []
        for index, name in enumerate(names):
            if name in self._in_flight:
                self._counters.skipped_in_flight += 1
                continue
            self._in_flight.add(name)
            jobs.append(self._scrape_later(name, index * spacing))
        results = await asyncio.gather(*jobs)
        self._counters.rounds_completed += 1
        self._counters.last_round_seconds = loop.time() - started
        if self._first_round is None and names:
            # A round before the node watch listed anything says nothing about the kubelets.
            self._first_round = (sum(results), len(names))

    async def _scrape_later(self, name: str, delay: float) -> bool:
        try:
            if delay > 0:
                await asyncio.sleep(delay)
            return await self.scrape_node(name)
        finally:
            self._in_flight.discard(name)

    # -- one node --

    async def scrape_node(self, name: str) -> bool:
        """Scrape one node now and feed the store; False (counted, logged on change) when
        it failed. Never raises except for cancellation."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        self._counters.scrapes += 1
        try:
            try:
                async with asyncio.timeout(self.timeout):
                    body = await self._fetch(name)
            except TimeoutError:
                raise ScrapeFailure("timeout", f"no answer within {self.timeout:g}s") from None
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

    async def _fetch(self, name: str) -> bytes:
        if self.source == "proxy":
            path = f"/api/v1/nodes/{quote(name, safe='')}/proxy{KUBELET_PATH}"
            try:
                return await self._client.get_bytes(
                    path, deadline=self.timeout, limit=self.max_body_bytes
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
        request = self._kubelet_client.build_request("GET", url, timeout=self.timeout)
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
        if not status.failing:
            status.failing = True
            logger.warning(
                "scraping the %s of node %s failed (%s): %s; retrying every %gs, its "
                "usage is dropped after %d intervals without an answer",
                self.target,
                name,
                failure.reason,
                failure.message,
                self.interval,
                AGE_OUT_INTERVALS,
            )
        else:
            logger.debug("node %s still failing (%s): %s", name, failure.reason, failure.message)

    def _succeeded(self, name: str) -> None:
        status = self._status.setdefault(name, _NodeStatus())
        if status.failing:
            logger.info(
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
        return ScraperStats(
            rounds_started=counters.rounds_started,
            rounds_completed=counters.rounds_completed,
            scrapes=counters.scrapes,
            failures=sum(counters.failures.values()),
            failures_by_reason=MappingProxyType(dict(counters.failures)),
            skipped_in_flight=counters.skipped_in_flight,
            nodes=self._listed,
            nodes_failing=sum(1 for status in self._status.values() if status.failing),
            nodes_expired=counters.nodes_expired,
            last_round_seconds=counters.last_round_seconds,
            last_scrape_seconds=counters.last_scrape_seconds,
        )
