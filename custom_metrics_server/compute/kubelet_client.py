"""How the kubelet scraper reaches one node's ``/metrics/resource``: the URL, the connection
pools, the body cap and the reason of every failure.

This module owns :class:`KubeletFetcher`: a node's body through the API server's node proxy
(``source="proxy"``, the default, over the fetcher's own pool so scrapes never queue behind the
watches and reviews) or from the kubelet port directly (``source="direct"``, with the kubelets'
serving CA and the cluster credentials, as metrics-server's ``--kubelet-*`` flags), read up to
``max_body_bytes``. Every expected failure is a :class:`~.scrape_failure.ScrapeFailure` with a
short reason (``timeout``, ``too_large``, ``http_<code>``, ``unreachable``, ``no_address``).
It must not schedule, retry, log or parse: that is :mod:`.scraper` and :mod:`.kubelet_reader`.

Cost: one HTTP request per fetch, at most ``concurrency`` connections per pool; the body is
read in chunks and never beyond the cap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Literal
from urllib.parse import quote

import httpx

from custom_metrics_server.compute.scrape_failure import ScrapeFailure
from custom_metrics_server.kube.client import (
    USER_AGENT,
    BearerAuth,
    KubeApiError,
    KubeClient,
    read_capped,
)
from custom_metrics_server.kube.config import Connection
from custom_metrics_server.runtime.tls import client_context

__all__ = ["KUBELET_PATH", "MAX_BODY_BYTES", "KubeletFetcher", "Source", "kubelet_http_client"]

KUBELET_PATH: Final = "/metrics/resource"
#: A kubelet's answer beyond this is a `too_large` failure, read no further: a 110-pod node
#: answers ~250 KiB, so 16 MiB only stops a broken or hostile source from exhausting memory.
MAX_BODY_BYTES: Final = 16 << 20

Source = Literal["proxy", "direct"]


def kubelet_http_client(
    connection: Connection,
    *,
    ca_file: str | None = None,
    insecure: bool = False,
    timeout: float = 10.0,
    max_connections: int,
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
        kubelet_client: httpx.AsyncClient | None = None,
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
        self._kubelet_client = kubelet_client
        self._owns_kubelet_client = False
        self._proxy_client: KubeClient | None = None
        self._kubelet_ca_file = kubelet_ca_file
        self._kubelet_insecure_tls = kubelet_insecure_tls
        self.max_body_bytes = max_body_bytes
        self.target = target  # what is scraped, for messages: "kubelet" or "node agent"

    def open(self) -> None:
        """Make the direct pool (``source="direct"`` without a given client)."""
        if self.source == "direct" and self._kubelet_client is None:
            self._kubelet_client = kubelet_http_client(
                self._client.connection,
                ca_file=self._kubelet_ca_file,
                insecure=self._kubelet_insecure_tls,
                timeout=self.timeout,
                max_connections=self.concurrency,
            )
            self._owns_kubelet_client = True

    async def aclose(self) -> None:
        """Close the pools this fetcher made (a given kubelet client stays open)."""
        if self._owns_kubelet_client and self._kubelet_client is not None:
            await self._kubelet_client.aclose()
            self._kubelet_client = None
            self._owns_kubelet_client = False
        if self._proxy_client is not None:
            await self._proxy_client.aclose()
            self._proxy_client = None

    def _proxy(self) -> KubeClient:
        """The fetcher's own pool to the API server (the node proxy), made on first use."""
        if self._proxy_client is None:
            self._proxy_client = KubeClient(
                self._client.connection, timeout=self.timeout, max_connections=self.concurrency
            )
        return self._proxy_client

    async def fetch(self, name: str, deadline: float) -> bytes:
        """Node ``name``'s body within ``deadline`` seconds, or a :class:`ScrapeFailure`."""
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
