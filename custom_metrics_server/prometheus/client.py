"""An async client of the Prometheus HTTP API (`/api/v1/query`, `/api/v1/series`).

Works with any engine that speaks it (Prometheus, Thanos, Mimir, VictoriaMetrics). Requests
are GET unless the encoded form is long (or `verb="POST"`): a long query string is what gives
prometheus-adapter users 414s
(https://github.com/kubernetes-sigs/prometheus-adapter/issues/668). Transient failures
(connection errors, 502/503/504, 429) are retried at most `retries` times with full-jitter
backoff, always inside the caller's deadline. Every failure is a `PrometheusError` whose `kind`
says what happened:
`unavailable`, `timeout` or `rejected` (the engine refused the query: a configuration
problem, never retried).

Bearer tokens are re-read from `token_file` when the file changes (projected tokens rotate).

Owns sending: GET or POST, the request head, retries and the connection pool; reading answers is
`prometheus.answers`', the connection's settings `prometheus.connection`'s.
"""

from __future__ import annotations

import asyncio
import base64
import random
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal
from urllib.parse import unquote, urlencode, urlsplit

from custom_metrics_server import __version__
from custom_metrics_server.http_client.http11 import (
    Http11Pool,
    TransportError,
    TransportTimeout,
)
from custom_metrics_server.prometheus.answers import PrometheusError, SeriesReader, decode
from custom_metrics_server.prometheus.connection import (
    TokenFile,
    header_problem,
    ssl_context,
)
from custom_metrics_server.prometheus.metric_registry import SeriesShape
from custom_metrics_server.prometheus.rules import ServerConfig

USER_AGENT: Final = f"custom-metrics-server/v{__version__}"
#: Longer encoded forms go as POST bodies; many proxies cap request lines at 4-8 KiB.
MAX_GET_QUERY: Final = 4096
#: Instant queries whose URL-encoded form a client keeps (the same PromQL recurs per object).
_ENCODED_CACHE: Final = 4096


class PrometheusClient:
    """One Prometheus-compatible server.

    Calls go through `http_client.http11.Http11Pool` (a lean keep-alive HTTP/1.1 pool), through
    the environment's proxy when it names one for the server (`http_client.proxy`).
    """

    def __init__(
        self,
        server: ServerConfig,
        *,
        timeout: float = 10.0,
        retries: int = 2,
        verb: Literal["GET", "POST"] = "GET",
        observe: Callable[[str, str, str, float], None] | None = None,
    ) -> None:
        self.server = server
        self.timeout = timeout
        self.retries = retries
        self.verb = verb
        self._observe = observe
        self._token = TokenFile(server.token_file) if server.token_file else None
        # The URL-encoded form of recent instant queries (urlencode is ~10 µs a query).
        self._encoded: dict[str, str] = {}
        url = urlsplit(server.url.rstrip("/"))
        self._base_path = url.path
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        headers.update(dict(server.headers))
        self._problem: str | None = None
        context = ssl_context(server)
        https = url.scheme == "https"
        self._pool = Http11Pool(
            host=url.hostname or "",
            port=url.port or (443 if https else 80),
            ssl_context=context,
            server_hostname=url.hostname,
            timeout=timeout,
            max_connections=64,
            max_idle=16,
        )
        # The head every call shares: custom headers replace ours case-insensitively (as
        # httpx's client headers did); credentials in the URL are Basic auth (as httpx did,
        # over a bearer token).
        merged: dict[str, tuple[str, str]] = {}
        for name, value in (("Host", url.netloc.rpartition("@")[2]), *headers.items()):
            merged[name.lower()] = (name, value)
            self._problem = self._problem or header_problem(name, value)
        # Credentials, first found wins (httpx's order): the URL's, the token file's, a
        # configured Authorization header.
        configured = merged.pop("authorization", None)
        self._configured_auth = (
            f"{configured[0]}: {configured[1]}\r\n".encode("latin-1", "replace")
            if configured
            else b""
        )
        self._basic: bytes | None = None
        if url.username is not None:
            userinfo = f"{unquote(url.username)}:{unquote(url.password or '')}"
            basic = base64.b64encode(userinfo.encode()).decode()
            self._basic = f"Authorization: Basic {basic}\r\n".encode()
        self._head = "".join(f"{name}: {value}\r\n" for name, value in merged.values()).encode(
            "latin-1", "replace"
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._pool.aclose()

    async def query(
        self, expression: str, *, at: float | None = None, compress: bool = True
    ) -> Mapping[str, Any]:
        """An instant query; returns the `data` object (`resultType`, `result`).

        `compress=False` asks for an uncompressed answer: for an answer of one series (a
        single object's query) gzip costs Prometheus about 0.5 ms of CPU and saves nothing.

        Cost: O(len(query) + answer); about 55 µs of CPU for a one-series answer over a
        kept-alive connection: the encoded form (kept per expression), the pool's ~35 µs
        (one write, one future), one orjson decode and the histogram observation."""
        if at is None:
            encoded = self._encoded.get(expression)
            if encoded is None:
                encoded = urlencode([("query", expression)])
                if len(self._encoded) >= _ENCODED_CACHE:
                    self._encoded.clear()
                self._encoded[expression] = encoded
        else:
            encoded = urlencode([("query", expression), ("time", f"{at:.3f}")])
        data = await self._call("/api/v1/query", encoded, "query", compress=compress)
        if not isinstance(data, Mapping):
            raise PrometheusError("unavailable", "query answer has no data object")
        return data

    async def series_shapes(self, match: str, *, start: float, end: float) -> set[SeriesShape]:
        """The distinct (name, label names) of `/api/v1/series` for one selector over
        [start, end], read as a stream: memory holds one series at a time, never the listing
        (upstream's listing of every series is what grew prometheus-adapter to gigabytes)."""
        form = [("match[]", match), ("start", f"{start:.3f}"), ("end", f"{end:.3f}")]
        shapes: set[SeriesShape] = await self._call(
            "/api/v1/series", urlencode(form), "series", stream=True
        )
        return shapes

    async def _call(
        self,
        path: str,
        encoded: str,
        kind: str,
        *,
        stream: bool = False,
        compress: bool = True,
    ) -> Any:
        use_post = self.verb == "POST" or len(encoded) > MAX_GET_QUERY
        attempt = 0
        started = time.perf_counter()
        outcome = "error"
        try:
            while True:
                try:
                    result = await self._once_pool(
                        path, encoded, use_post, stream=stream, compress=compress
                    )
                    outcome = "ok"
                    return result
                except PrometheusError as err:
                    outcome = err.kind
                    if err.kind == "rejected" or attempt >= self.retries:
                        raise
                attempt += 1
                # Full jitter (AWS architecture blog): spreads retries of many replicas.
                await asyncio.sleep(random.uniform(0, 0.05 * 2**attempt))  # noqa: S311
        finally:
            if self._observe is not None:
                self._observe(self.server.name, kind, outcome, time.perf_counter() - started)

    async def _once_pool(
        self, path: str, encoded: str, use_post: bool, *, stream: bool, compress: bool
    ) -> Any:
        """One attempt through the lean pool.

        Cost: the request head is one f-string over pre-encoded headers; then the pool's one
        write and one future (:meth:`.Http11Pool.request`) and one orjson decode."""
        if self._problem is not None:
            raise PrometheusError("unavailable", f"{self._where()}: {self._problem}")
        extra = b"Accept-Encoding: gzip\r\n" if compress or stream else b""
        if self._basic is not None:
            extra += self._basic
        elif self._token is not None and (token := self._token.token()):
            if header_problem("Authorization", token) is not None:
                raise PrometheusError(
                    "unavailable", f"{self._where()}: the bearer token has a line break"
                )
            extra += f"Authorization: Bearer {token}\r\n".encode("latin-1", "replace")
        else:
            extra += self._configured_auth
        if use_post:
            body = encoded.encode()
            head = (
                (
                    f"POST {self._base_path}{path} HTTP/1.1\r\n"
                    "Content-Type: application/x-www-form-urlencoded\r\n"
                    f"Content-Length: {len(body)}\r\n"
                ).encode()
                + self._head
                + extra
                + b"\r\n"
            )
        else:
            body = b""
            head = (
                f"GET {self._base_path}{path}?{encoded} HTTP/1.1\r\n".encode()
                + self._head
                + extra
                + b"\r\n"
            )
        reader = SeriesReader() if stream else None
        try:
            answer = await self._pool.request(
                head, body, sink=reader.feed if reader is not None else None
            )
        except TransportTimeout as err:
            raise PrometheusError(
                "timeout", f"{self._where()} did not answer within {self.timeout:g}s"
            ) from err
        except TransportError as err:
            raise PrometheusError(
                "unavailable", f"{self._where()} is unreachable: {err or type(err).__name__}"
            ) from err
        if reader is not None and answer.status == 200:
            return reader.finish(self._where())
        return decode(answer.status, answer.reason, answer.body, self._where)

    def _where(self) -> str:
        return f"Prometheus server {self.server.name!r} ({self.server.url})"
