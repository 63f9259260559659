"""How the kubelet scraper reaches one node's ``/metrics/resource``: the URL, the connection
pools, the body cap and the reason of every failure.

This module owns :class:`KubeletFetcher`: a node's body through the API server's node proxy
(``source="proxy"``, the default, over the fetcher's own pool so scrapes never queue behind the
watches and reviews) or from the kubelet port directly (``source="direct"``, with the kubelets'
serving CA and the cluster credentials, as metrics-server's ``--kubelet-*`` flags; or, for node
agents, with their CA and no credentials: ``agent_tls``), read up to
``max_body_bytes``. Every expected failure is a :class:`~.failure.ScrapeFailure` with a
short reason (``timeout``, ``too_large``, ``http_<code>``, ``unreachable``, ``no_address``).
It must not schedule, retry, log or parse: that is :mod:`.kubelet_scraper` and
:mod:`kubelet_format.rows`.

**The lean client.** Requests go through
:class:`~custom_metrics_server.http_client.http11.Http11Pool` (keep-alive HTTP/1.1 over asyncio
protocols, answers parsed by httptools): one pre-built request head, one transport write and one
future per scrape, a small fraction of httpx's CPU (docs/performance.md, "The lean HTTP/1.1
client against httpx"). Through the node proxy that is one pool of at
most ``concurrency`` connections to the API server, with its CA, client certificate and bearer
token (re-read from a token file as :class:`~..kube.config.Connection` does). Direct, one small
pool per kubelet address, at most ``concurrency`` of them kept (least recently used first out,
as httpx's keep-alive limit did). An environment proxy (``HTTPS_PROXY``, ...) that names the
target is the pool's business (:mod:`~custom_metrics_server.http_client.proxy`).

Cost: one HTTP request per fetch, at most ``concurrency`` connections per pool; the body is
read in pieces and never beyond the cap. Per scrape on a kept-alive connection: the request
head (a few string joins), one write, one future, the answer's parse in C.
"""

from __future__ import annotations

import collections
import ssl
from collections.abc import Callable
from typing import Final, Literal
from urllib.parse import SplitResult, quote, urlsplit

from custom_metrics_server.http_client.http11 import (
    BodyTooLarge,
    Http11Pool,
    TransportError,
    TransportTimeout,
)
from custom_metrics_server.kube.client import (
    USER_AGENT,
    KubeClient,
    error_from_response,
)
from custom_metrics_server.kube.config import Connection
from custom_metrics_server.runtime.tls import client_context
from custom_metrics_server.scraping.failure import ScrapeFailure

__all__ = ["KUBELET_PATH", "MAX_BODY_BYTES", "KubeletFetcher", "Source"]

KUBELET_PATH: Final = "/metrics/resource"
#: A kubelet's answer beyond this is a `too_large` failure, read no further: a 110-pod node
#: answers ~250 KiB, so 16 MiB only stops a broken or hostile source from exhausting memory.
MAX_BODY_BYTES: Final = 16 << 20

Source = Literal["proxy", "direct"]

#: Headers of every scrape request (after the request line and Host): the kubelet's text,
#: gzipped when it likes (as httpx asked, and Go's transport asks for metrics-server).
_FIXED_HEADERS: Final = (
    f"User-Agent: {USER_AGENT}\r\nAccept: text/plain\r\nAccept-Encoding: gzip\r\n".encode()
)


def _kubelet_context(connection: Connection, ca_file: str | None, insecure: bool) -> ssl.SSLContext:
    return client_context(
        ca_file or connection.ca_file,
        insecure=insecure,
        cert_file=connection.cert_file if connection.key_file else None,
        key_file=connection.key_file,
    )


class _Origin:
    """One origin's lean pool and the fixed part of its request heads."""

    __slots__ = ("host_line", "in_flight", "pool", "prefix")

    def __init__(self, pool: Http11Pool, netloc: str, prefix: str = "") -> None:
        self.pool = pool
        self.host_line = f"Host: {netloc}\r\n".encode("ascii")
        self.prefix = prefix  # a path the API server is served under (rare)
        self.in_flight = 0


def _origin(
    url: SplitResult, context: ssl.SSLContext | None, *, timeout: float, connections: int
) -> _Origin:
    https = url.scheme == "https"
    host = url.hostname or ""
    pool = Http11Pool(
        host=host,
        port=url.port or (443 if https else 80),
        ssl_context=context if https else None,
        server_hostname=host if https else None,
        timeout=timeout,
        max_connections=connections,
        max_idle=connections,
    )
    return _Origin(pool, url.netloc.rpartition("@")[2], url.path.rstrip("/"))


class KubeletFetcher:
    """One node's ``/metrics/resource`` body per :meth:`fetch`; :meth:`open` before the first
    fetch and :meth:`aclose` after the last (they make and close the pools it owns)."""

    def __init__(
        self,
        client: KubeClient,
        *,
        timeout: float,
        concurrency: int,
        source: Source = "proxy",
        kubelet_port: int = 10250,
        kubelet_scheme: str = "https",
        node_address: Callable[[str], str | None] | None = None,
        agent_tls: ssl.SSLContext | None = None,
        kubelet_ca_file: str | None = None,
        kubelet_insecure_tls: bool = False,
        max_body_bytes: int = MAX_BODY_BYTES,
        target: str = "kubelet",
    ) -> None:
        if source not in ("proxy", "direct"):
            raise ValueError(f"source must be 'proxy' or 'direct', not {source!r}")
        if source == "direct" and node_address is None:
            raise ValueError("source='direct' needs node_address (a node's InternalIP)")
        self._client = client
        self.timeout = timeout
        self.concurrency = concurrency
        self.source: Source = source
        self._port = kubelet_port
        self._scheme = kubelet_scheme
        self._node_address = node_address
        self._kubelet_ca_file = kubelet_ca_file
        self._kubelet_insecure_tls = kubelet_insecure_tls
        self.max_body_bytes = max_body_bytes
        self.target = target  # what is scraped, for messages: "kubelet" or "node agent"
        self._connection = client.connection
        self._proxy_origin: _Origin | None = None
        self._proxy_checked = False
        #: direct scrapes: a lean pool per kubelet (host, port), least recently used first
        self._kubelets: collections.OrderedDict[tuple[str, int], _Origin] = (
            collections.OrderedDict()
        )
        # Node agents (`agent_tls`): their TLS context, and never the cluster's credentials (a
        # compromised agent pod must not collect the server's token).
        self._kubelet_context: ssl.SSLContext | None = agent_tls
        self._credentials = agent_tls is None

    def open(self) -> None:
        """Nothing to make up front: every pool is made on first use (so :meth:`fetch` also
        works without it)."""

    async def aclose(self) -> None:
        """Close the pools this fetcher made."""
        origins = list(self._kubelets.values())
        self._kubelets.clear()
        if self._proxy_origin is not None:
            origins.append(self._proxy_origin)
            self._proxy_origin = None
            self._proxy_checked = False
        for origin in origins:
            await origin.pool.aclose()

    # -- through the API server's node proxy --

    def _lean_proxy(self) -> _Origin | None:
        """The fetcher's own lean pool to the API server, made on first use; None when the
        API server's URL is not one an HTTP client can use (an unknown scheme, no host)."""
        if not self._proxy_checked:
            self._proxy_checked = True
            connection = self._client.connection
            url = urlsplit(connection.host)
            if url.scheme in ("http", "https") and url.hostname and url.netloc.isascii():
                context = connection.ssl_context() if url.scheme == "https" else None
                self._proxy_origin = _origin(
                    url, context, timeout=self.timeout, connections=self.concurrency
                )
        return self._proxy_origin

    async def fetch(self, name: str, deadline: float) -> bytes:
        """Node ``name``'s body within ``deadline`` seconds, or a :class:`ScrapeFailure`.

        Cost: one request on a kept-alive connection of the lean pool (a new connection the
        first time, or after the kubelet's pool was let go); O(body) to read it."""
        if self.source == "proxy":
            path = f"/api/v1/nodes/{quote(name, safe='')}/proxy{KUBELET_PATH}"
            origin = self._lean_proxy()
            if origin is None:
                raise ScrapeFailure(
                    "unreachable",
                    f"the API server URL {self._client.connection.host!r} is unusable",
                )
            return await self._lean_get(origin, path)
        address = self._node_address(name) if self._node_address else None
        if not address:
            if self.target == "kubelet":
                raise ScrapeFailure("no_address", "the node has no InternalIP address")
            raise ScrapeFailure("no_address", f"no {self.target} runs on the node")
        host = f"[{address}]" if ":" in address else address
        url = f"{self._scheme}://{host}:{self._port}{KUBELET_PATH}"
        if self._scheme not in ("http", "https") or not host.isascii():
            raise ScrapeFailure("unreachable", f"GET {url}: not an http(s) URL of ASCII")
        origin = self._kubelet_origin(address, host)
        origin.in_flight += 1
        try:
            return await self._lean_get(origin, KUBELET_PATH, shown=url)
        finally:
            origin.in_flight -= 1
            self._let_go()

    async def _lean_get(self, origin: _Origin, path: str, *, shown: str = "") -> bytes:
        """One GET through a lean pool, every failure a :class:`ScrapeFailure`."""
        shown = shown or path
        authorization = b""
        if self._credentials:
            try:
                authorization = self._connection.authorization_line()
            except ValueError as err:
                raise ScrapeFailure("unreachable", str(err)) from None
        head = b"".join(
            (
                f"GET {origin.prefix}{path} HTTP/1.1\r\n".encode(),
                origin.host_line,
                _FIXED_HEADERS,
                authorization,
                b"\r\n",
            )
        )
        try:
            answer = await origin.pool.request(head, limit=self.max_body_bytes)
        except BodyTooLarge:
            raise ScrapeFailure(
                "too_large", f"GET {shown}: the body is over {self.max_body_bytes} bytes"
            ) from None
        except TransportTimeout as err:
            raise ScrapeFailure("timeout", f"GET {shown}: {err}") from err
        except TransportError as err:
            raise ScrapeFailure("unreachable", f"GET {shown}: {err}") from err
        if answer.status >= 300:
            if self.source == "proxy":
                message = error_from_response(answer.status, answer.body).message
            else:
                message = f"GET {shown}: " + answer.body[:300].decode("utf-8", "replace").strip()
            raise ScrapeFailure(f"http_{answer.status}", message)
        return answer.body

    # -- direct to the kubelets --

    def _kubelet_origin(self, address: str, host: str) -> _Origin:
        """The lean pool of one kubelet (made on first use, most recently used last)."""
        key = (address, self._port)
        origin = self._kubelets.get(key)
        if origin is not None:
            self._kubelets.move_to_end(key)
            return origin
        url = urlsplit(f"{self._scheme}://{host}:{self._port}")
        if self._scheme == "https" and self._kubelet_context is None:
            self._kubelet_context = _kubelet_context(
                self._client.connection, self._kubelet_ca_file, self._kubelet_insecure_tls
            )
        origin = _origin(url, self._kubelet_context, timeout=self.timeout, connections=1)
        # One kept-alive connection per kubelet (a node is scraped once per round); more at
        # once only where addresses are shared (the scraper bounds them in all).
        origin.pool.max_connections = self.concurrency
        self._kubelets[key] = origin
        return origin

    def _let_go(self) -> None:
        """Close the least recently used kubelet pools beyond ``concurrency`` (httpx kept as
        many keep-alive connections), skipping any with a scrape in flight. O(pools closed),
        O(in flight) at worst."""
        excess = len(self._kubelets) - self.concurrency
        if excess <= 0:
            return
        idle = [key for key, origin in self._kubelets.items() if not origin.in_flight][:excess]
        for key in idle:
            self._kubelets.pop(key).pool.close()
