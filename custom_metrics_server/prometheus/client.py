"""An async client of the Prometheus HTTP API (`/api/v1/query`, `/api/v1/series`).

Works with any engine that speaks it (Prometheus, Thanos, Mimir, VictoriaMetrics). Requests
are GET unless the encoded form is long (or `verb="POST"`): a long query string is what gives
prometheus-adapter users 414s (peers.md §3 pain 12). Transient failures (connection errors,
502/503/504, 429) are retried at most `retries` times with full-jitter backoff, always inside
the caller's deadline. Every failure is a `PrometheusError` whose `kind` says what happened:
`unavailable`, `timeout` or `rejected` (the engine refused the query: a configuration
problem, never retried).

Bearer tokens are re-read from `token_file` when the file changes (projected tokens rotate).
"""

from __future__ import annotations

import asyncio
import os
import random
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal
from urllib.parse import urlencode

import httpx
import orjson

from custom_metrics_server import __version__
from custom_metrics_server.prometheus.rules import ServerConfig

USER_AGENT: Final = f"custom-metrics-server/v{__version__}"
#: Longer encoded forms go as POST bodies; many proxies cap request lines at 4-8 KiB.
MAX_GET_QUERY: Final = 4096

ErrorKind = Literal["unavailable", "timeout", "rejected"]


class PrometheusError(Exception):
    """A failed call; `kind` is `unavailable`, `timeout` or `rejected`."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind


class _TokenFile:
    """A bearer token file, re-read when its mtime or size changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[float, int] | None = None
        self._token = ""

    def token(self) -> str:
        try:
            status = os.stat(self.path)
        except OSError:
            return self._token
        stamp = (status.st_mtime, status.st_size)
        if stamp != self._stamp:
            try:
                with open(self.path, encoding="utf-8") as handle:
                    self._token = handle.read().strip()
                self._stamp = stamp
            except OSError:
                pass
        return self._token


def _ssl_context(server: ServerConfig) -> ssl.SSLContext | bool:
    if not server.url.startswith("https://"):
        return True
    context = ssl.create_default_context(cafile=server.ca_file)
    if server.insecure_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if server.client_cert_file:
        context.load_cert_chain(server.client_cert_file, server.client_key_file)
    return context


class PrometheusClient:
    """One Prometheus-compatible server."""

    def __init__(
        self,
        server: ServerConfig,
        *,
        timeout: float = 10.0,
        retries: int = 2,
        verb: Literal["GET", "POST"] = "GET",
        observe: Callable[[str, str, str, float], None] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.server = server
        self.timeout = timeout
        self.retries = retries
        self.verb = verb
        self._observe = observe
        self._token = _TokenFile(server.token_file) if server.token_file else None
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        headers.update(dict(server.headers))
        self._http = httpx.AsyncClient(
            base_url=server.url.rstrip("/"),
            verify=_ssl_context(server),
            headers=headers,
            timeout=httpx.Timeout(timeout),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
            transport=transport,
            follow_redirects=False,
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def query(self, expression: str, *, at: float | None = None) -> Mapping[str, Any]:
        """An instant query; returns the `data` object (`resultType`, `result`)."""
        form = [("query", expression)]
        if at is not None:
            form.append(("time", f"{at:.3f}"))
        data = await self._call("/api/v1/query", form, "query")
        if not isinstance(data, Mapping):
            raise PrometheusError("unavailable", "query answer has no data object")
        return data

    async def series(self, match: str, *, start: float, end: float) -> Sequence[Mapping[str, str]]:
        """`/api/v1/series` for one selector over [start, end]: one label set per series."""
        form = [("match[]", match), ("start", f"{start:.3f}"), ("end", f"{end:.3f}")]
        data = await self._call("/api/v1/series", form, "series")
        if not isinstance(data, list):
            raise PrometheusError("unavailable", "series listing did not return a list")
        return data

    async def _call(self, path: str, form: list[tuple[str, str]], kind: str) -> Any:
        encoded = urlencode(form)
        use_post = self.verb == "POST" or len(encoded) > MAX_GET_QUERY
        attempt = 0
        started = time.perf_counter()
        outcome = "error"
        try:
            while True:
                try:
                    result = await self._once(path, encoded, use_post)
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

    async def _once(self, path: str, encoded: str, use_post: bool) -> Any:
        headers = {}
        if self._token is not None and (token := self._token.token()):
            headers["Authorization"] = f"Bearer {token}"
        try:
            if use_post:
                headers["Content-Type"] = "application/x-www-form-urlencoded"
                response = await self._http.post(path, content=encoded, headers=headers)
            else:
                response = await self._http.get(f"{path}?{encoded}", headers=headers)
        except httpx.TimeoutException as err:
            raise PrometheusError(
                "timeout", f"{self._where()} did not answer within {self.timeout:g}s"
            ) from err
        except httpx.HTTPError as err:
            raise PrometheusError(
                "unavailable", f"{self._where()} is unreachable: {err or type(err).__name__}"
            ) from err
        return self._decode(response)

    def _where(self) -> str:
        return f"Prometheus server {self.server.name!r} ({self.server.url})"

    def _decode(self, response: httpx.Response) -> Any:
        status = response.status_code
        try:
            document = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            document = None
        if status == 200 and isinstance(document, dict) and document.get("status") == "success":
            return document.get("data")
        detail = ""
        error_type = ""
        if isinstance(document, dict):
            detail = str(document.get("error", ""))
            error_type = str(document.get("errorType", ""))
        if status == 200:
            # Not the API's envelope: a proxy's page, a truncated body, another service.
            raise PrometheusError(
                "unavailable", f"{self._where()} answered 200 with a malformed body"
            )
        if not detail:
            detail = response.text.strip()[:300] or response.reason_phrase
        message = f"{self._where()} answered {status}: {detail}"
        if error_type == "timeout" or status == 504:
            raise PrometheusError("timeout", message)
        if status in (400, 422) and error_type in ("bad_data", "execution"):
            raise PrometheusError("rejected", message)
        # 5xx, 429, 401/403 (credentials), 404 (wrong URL): unavailable until an operator or
        # the engine fixes it; the metric's configuration is not at fault.
        raise PrometheusError("unavailable", message)
