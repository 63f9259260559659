"""The pod scraper: every target's `/metrics`, on a fixed cadence, into a `SeriesStore`.

This module owns how a target is reached and read: directly at the pod IP
(`source: direct`, one kept-alive connection per target), or through the API server's pod
proxy (`source: proxy`: `GET /api/v1/namespaces/{ns}/pods/[https:]{pod}:{port}/proxy{path}`
with the server's credentials, over one pool of `concurrency` connections to the API server),
with the lean HTTP/1.1 client (`http_client.http11`, cheaper than httpx: docs/performance.md,
"The lean HTTP/1.1 client against httpx"), a body cap (`maxBodyBytes`, read no further), and
how its body is read into the store. The rest is the scraping core the kubelet scraper runs on
too (`scraping.core`): the schedule (`scraping.rounds`: rounds never overlap, the first one as
soon as the pod list has synced and paced at 1,000 starts a second, pods that start serving
between rounds scraped at once (`PodTargets.added`), other starts spread over the first half
of the interval, at most `concurrency` scrapes in flight, failing targets at most a quarter of
them), the per-target deadline, the classification of failures, and the book of failing targets
and their backoff (`scraping.target_book.TargetBook`: a target that failed k times in a row is
tried again after 2^(k-1) rounds, at most every 8).

Every expected failure has a short reason (`timeout`, `too_large`, `http_<code>`,
`unreachable`, `parse`), counted and logged when a target starts failing and when it answers
again. It must not decide what values mean (`series`) or which pods are targets (`targets`).

Cost per round: O(n log n) to order the n targets, one task and one request per target
scraped, the exposition reader's cost per body (O(length) in the regex engine, plus the
selected lines).
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Final, Self
from urllib.parse import quote, urlsplit

from custom_metrics_server import __version__
from custom_metrics_server.backends.pod_metrics.config import PodMetricsConfig
from custom_metrics_server.backends.pod_metrics.exposition import ExpositionError, read_exposition
from custom_metrics_server.backends.pod_metrics.series import SeriesStore
from custom_metrics_server.backends.pod_metrics.targets import PodTargets, Target
from custom_metrics_server.domain import Readiness
from custom_metrics_server.http_client.http11 import (
    BodyTooLarge,
    Http11Pool,
    TransportError,
    TransportTimeout,
)
from custom_metrics_server.kube.config import Connection
from custom_metrics_server.runtime.tls import client_context
from custom_metrics_server.scraping.core import ScrapeCore, ScrapeParts, ScrapeStats, ScrapeWords
from custom_metrics_server.scraping.failure import ScrapeFailure

__all__ = ["PodScraper"]

logger = logging.getLogger(__name__)

USER_AGENT: Final = f"custom-metrics-server/v{__version__}"
#: The classic text format first (the reader reads OpenMetrics text too).
ACCEPT: Final = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
#: The text of an error answer kept for the log.
_ERROR_TEXT: Final = 200


class PodScraper:
    """Scrapes every target of `targets` into `store` while entered (`async with`)."""

    def __init__(
        self,
        targets: PodTargets,
        store: SeriesStore,
        config: PodMetricsConfig,
        *,
        connection: Connection | None,
        synced: Callable[[], Awaitable[None]] | None = None,
        clock: Callable[[], float] = time.time,
        name: str = "pod-metrics",
    ) -> None:
        if config.source == "proxy" and connection is None:
            raise ValueError("source 'proxy' needs the API server's connection")
        self.targets = targets
        self.store = store
        self.config = config
        self.name = name
        self._connection = connection
        self._clock = clock
        self.core: ScrapeCore[Target] = ScrapeCore(
            ScrapeParts(
                listing=self._names,
                prune=self._prune,
                find=targets.targets.get,
                fetch=self._fetch,
                take=self._take,
            ),
            words=ScrapeWords(
                target="metrics endpoint",
                what="pod metrics",
                noun="pod",
                listing="pod list",
                advice="raise concurrency or interval in the pod-metrics settings",
                dropped=f"its series are absent {config.stale_after:g}s after its last answer",
            ),
            interval=config.interval,
            timeout=config.timeout,
            concurrency=config.concurrency,
            age_out_intervals=max(1, round(config.stale_after / config.interval)),
            clock=clock,
            logger=logger,
            synced=synced,
        )
        #: which targets fail, and why
        self.book = self.core.book
        self.rounds = self.core.rounds
        targets.added = self.core.notice
        self._direct: dict[tuple[str, str, int], Http11Pool] = {}
        self._proxy: Http11Pool | None = None
        self._proxy_prefix = ""
        self._proxy_host = ""
        self._tls: ssl.SSLContext | None = None

    # -- lifecycle --

    async def __aenter__(self) -> Self:
        if self.config.source == "proxy":
            self._proxy = self._proxy_pool()
        self.core.start(f"{self.name}-scraper")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.core.stop()
        pools = list(self._direct.values())
        self._direct.clear()
        if self._proxy is not None:
            pools.append(self._proxy)
            self._proxy = None
        for pool in pools:
            await pool.aclose()

    def _proxy_pool(self) -> Http11Pool:
        assert self._connection is not None
        parts = urlsplit(self._connection.host)
        https = parts.scheme == "https"
        host = parts.hostname or "localhost"
        port = parts.port or (443 if https else 80)
        self._proxy_prefix = parts.path.rstrip("/")
        self._proxy_host = parts.netloc
        return Http11Pool(
            host=host,
            port=port,
            ssl_context=self._connection.ssl_context() if https else None,
            server_hostname=self._connection.tls_server_name or host if https else None,
            timeout=self.config.timeout,
            max_connections=self.config.concurrency,
            max_idle=self.config.concurrency,
        )

    # -- rounds --

    def _names(self) -> list[str]:
        return sorted(self.targets.targets)

    def _prune(self, listed: set[str]) -> None:
        """Forget the series of targets that left, expire silent ones' and close the pools
        of origins no target has any more. O(n)."""
        store = self.store
        for gone in [name for name in store.targets() if name not in listed]:
            store.forget(gone)
        store.expire(self._clock())
        origins = {
            (target.scheme, target.address, target.port) for target in self.targets.targets.values()
        }
        for origin in [origin for origin in self._direct if origin not in origins]:
            pool = self._direct.pop(origin)
            self.core.work.start(pool.aclose(), name=f"close-{origin[1]}", transient=True)

    async def scrape(self, name: str, deadline: float | None = None) -> bool:
        """Scrape one target now (within `deadline` s, default `timeout`) into the store;
        False (counted, logged on change) when it failed. Never raises but for cancellation."""
        return await self.core.scrape(name, deadline)

    def _take(self, name: str, target: Target, body: bytes, now: float) -> None:
        """Read a body into the store. O(length of the body) plus the selected lines."""
        try:
            reading = read_exposition(
                body.decode("utf-8", "replace"),
                target.selection,
                limit=self.config.max_series_per_target,
            )
        except ExpositionError as err:
            raise ScrapeFailure("parse", f"unreadable metrics: {err}") from err
        self.store.apply(name, reading.samples, now, overflow=reading.overflow)

    async def _fetch(self, target: Target, _: float) -> bytes:
        if self.config.source == "proxy":
            if self._proxy is None:
                self._proxy = self._proxy_pool()
            pool = self._proxy
            prefix = "https:" if target.scheme == "https" else ""
            path = (
                f"{self._proxy_prefix}/api/v1/namespaces/{quote(target.namespace, safe='')}"
                f"/pods/{prefix}{quote(target.pod, safe='')}:{target.port}/proxy{target.path}"
            )
            headers = f"Host: {self._proxy_host}\r\n"
            assert self._connection is not None
            token = self._connection.bearer_token()
            if token:
                headers += f"Authorization: Bearer {token}\r\n"
            where = f"GET {path} (pod proxy)"
        else:
            origin = (target.scheme, target.address, target.port)
            found = self._direct.get(origin)
            if found is None:
                found = self._direct[origin] = self._direct_pool(target)
            pool = found
            path = target.path
            host = f"[{target.address}]" if ":" in target.address else target.address
            headers = f"Host: {host}:{target.port}\r\n"
            where = f"GET {target.scheme}://{host}:{target.port}{path}"
        head = (
            f"GET {path} HTTP/1.1\r\n{headers}User-Agent: {USER_AGENT}\r\nAccept: {ACCEPT}\r\n\r\n"
        ).encode("latin-1")
        try:
            answer = await pool.request(head, limit=self.config.max_body_bytes)
        except BodyTooLarge as err:
            raise ScrapeFailure("too_large", f"{where}: {err}") from err
        except TransportTimeout as err:
            raise ScrapeFailure("timeout", f"{where}: {err}") from err
        except TransportError as err:
            raise ScrapeFailure("unreachable", f"{where}: {err}") from err
        if answer.status != 200:
            text = answer.body[:_ERROR_TEXT].decode("utf-8", "replace").strip()
            raise ScrapeFailure(f"http_{answer.status}", f"{where}: {text}")
        return answer.body

    def _direct_pool(self, target: Target) -> Http11Pool:
        context = None
        if target.scheme == "https":
            if self._tls is None:
                self._tls = client_context(
                    self.config.tls_ca_file, insecure=self.config.tls_insecure_skip_verify
                )
            context = self._tls
        return Http11Pool(
            host=target.address,
            port=target.port,
            ssl_context=context,
            timeout=self.config.timeout,
            max_connections=1,
            max_idle=1,
            # A pod's address is inside the cluster network: direct, whatever the environment's
            # proxy (as Prometheus scrapes without `proxy_from_environment`).
            trust_env=False,
        )

    # -- reporting --

    def readiness(self) -> Readiness:
        """Whether a first round has ended (values need a round, counters two); with no
        target at all, a round that found none."""
        if not self.rounds.counters.rounds_completed:
            return Readiness(False, "waiting for the first round of pod scrapes")
        answered, listed = self.rounds.first_round or (0, 0)
        if listed and not answered:
            return Readiness(True, f"no pod answered the first scrape round (0 of {listed})")
        return Readiness(True)

    def stats(self) -> ScrapeStats:
        """A snapshot of the counters (its targets are pods; the series kept are the
        store's). O(targets)."""
        return self.core.stats()
