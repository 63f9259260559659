"""Calls to kube-apiserver over the lean keep-alive HTTP/1.1 pool (`http_client.http11`), for the
two kinds of call where httpx's per-call cost showed: the reviews of the delegated webhooks
(`review_client`) and the list pages of the reflectors (`LeanListClient`).

Why: per call httpx builds its `Request`/`Response`/`URL`/`Headers` models, runs its auth
generator, scans httpcore's pool and reads the body through anyio streams: for a review more
than the answer it guards costs, for list pages a share of a large cluster's ingest
(docs/performance.md, "The lean HTTP/1.1 client against httpx").

`LeanApi` holds the pool for one `Connection` and answers `call(method, path, query=...,
content=...)` with the body of a 2xx answer. The contract is `KubeClient`'s: a non-2xx answer
raises `KubeApiError` from its `Status` body (`error_from_response`; 410 is `GoneError`), a
transport failure `KubeApiError` with code 0 whose message names the failure as httpx did
(`ConnectError`, `ConnectTimeout`: the connection could not be made; `ReadTimeout`,
`ReadError`: it broke), which the webhooks' retry policy reads. The CA, client certificate and
host name verification are `Connection.ssl_context()`'s; the bearer token is re-read as
`Connection.bearer_token` does (token files rotate). `lean` is False where the pool cannot go
(an environment proxy that names the API server, a non-HTTP scheme): callers then use httpx.

Cost per call on a kept-alive connection: a head of ~300 bytes joined from cached parts, one
transport write, one future and one timer, plus O(answer bytes) to read it.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final
from urllib.parse import urlencode, urlsplit

import orjson

from custom_metrics_server.http_client.http11 import (
    Http11Pool,
    TransportError,
    TransportTimeout,
    names_a_proxy,
)
from custom_metrics_server.kube.client import (
    USER_AGENT,
    KubeApiError,
    KubeClient,
    error_from_response,
)
from custom_metrics_server.kube.config import Connection

__all__ = ["LeanApi", "LeanListClient"]

#: Headers of every call, after the request line and Host.
_FIXED: Final = (
    f"User-Agent: {USER_AGENT}\r\nAccept: application/json\r\nAccept-Encoding: gzip\r\n"
).encode()
_JSON_BODY: Final = b"Content-Type: application/json\r\n"


class LeanApi:
    """The lean pool to one API server; see the module docstring."""

    def __init__(
        self,
        connection: Connection,
        *,
        timeout: float = 10.0,
        max_connections: int = 100,
        max_idle: int = 32,
    ) -> None:
        self.connection = connection
        self._pool: Http11Pool | None = None
        self._host_line = b""
        self._prefix = ""
        url = urlsplit(connection.host)
        if (
            url.scheme not in ("http", "https")
            or not url.hostname
            or not url.netloc.isascii()
            or names_a_proxy(url)
        ):
            return
        https = url.scheme == "https"
        context: ssl.SSLContext | None = connection.ssl_context() if https else None
        self._pool = Http11Pool(
            host=url.hostname,
            port=url.port or (443 if https else 80),
            ssl_context=context,
            # The name verified is the URL's host, as with httpx (KubeClient): lists, watches
            # and reviews agree on what a kubeconfig's server certificate must name.
            server_hostname=url.hostname if https else None,
            timeout=timeout,
            max_connections=max_connections,
            max_idle=max_idle,
        )
        self._host_line = f"Host: {url.netloc.rpartition('@')[2]}\r\n".encode("ascii")
        self._prefix = url.path.rstrip("/")

    @property
    def lean(self) -> bool:
        """Whether calls can go through the lean pool (else the caller uses httpx)."""
        return self._pool is not None

    async def call(
        self, method: str, path: str, *, query: str = "", content: bytes | None = None
    ) -> bytes:
        """The body of a 2xx answer to `method path?query` (with a JSON `content`); the errors
        of the module docstring. Only when `lean`."""
        return (await self.exchange(method, path, query=query, content=content))[1]

    async def exchange(
        self, method: str, path: str, *, query: str = "", content: bytes | None = None
    ) -> tuple[int, bytes]:
        """`call`, with the 2xx status code beside the body."""
        pool = self._pool
        if pool is None:
            raise KubeApiError(0, "", "the lean pool cannot reach this API server")
        target = self._prefix + path + ("?" + query if query else "")
        try:
            authorization = self.connection.authorization_line()
        except ValueError as err:
            raise KubeApiError(0, "", str(err)) from None
        parts = [
            f"{method} {target} HTTP/1.1\r\n".encode("ascii"),
            self._host_line,
            _FIXED,
            authorization,
        ]
        if content is not None:
            parts += (_JSON_BODY, b"Content-Length: %d\r\n" % len(content))
        parts.append(b"\r\n")
        call = f"{method} {self.connection.host}{self._prefix}{path}"  # no query: no selectors
        try:
            answer = await pool.request(b"".join(parts), content or b"")
        except TransportTimeout as err:
            kind = "ConnectTimeout" if str(err).startswith("could not connect") else "ReadTimeout"
            raise KubeApiError(0, "", f"{method} {path}: {kind}({err})", call=call) from err
        except TransportError as err:
            kind = "ConnectError" if isinstance(err.__cause__, OSError) else "ReadError"
            raise KubeApiError(0, "", f"{method} {path}: {kind}({err})", call=call) from err
        if answer.status >= 300 or answer.status < 200:
            error = error_from_response(answer.status, answer.body)
            error.call = call
            raise error
        return answer.status, answer.body

    async def aclose(self) -> None:
        """Close the pool."""
        if self._pool is not None:
            await self._pool.aclose()


class LeanListClient:
    """A reflector's client (`kube.watcher.ListWatchClient`): list pages through `LeanApi`,
    watches through the given `KubeClient` (a stream that lasts minutes gains nothing from it).
    Falls back to the client for everything where the pool cannot go."""

    def __init__(self, client: KubeClient, *, timeout: float = 10.0, max_connections: int = 8):
        self.client = client
        self._lean = LeanApi(
            client.connection,
            timeout=timeout,
            max_connections=max_connections,
            max_idle=max_connections,
        )

    async def get_raw(self, path: str, params: Mapping[str, str] | None = None) -> bytes:
        """GET a JSON document's bytes, undecoded."""
        if not self._lean.lean:
            return await self.client.get_raw(path, params)
        return await self._lean.call("GET", path, query=urlencode(params or {}))

    async def get_json(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        """GET a JSON document."""
        return orjson.loads(await self.get_raw(path, params))

    def watch(
        self, path: str, params: Mapping[str, str], *, read_timeout: float
    ) -> AsyncIterator[dict[str, Any]]:
        """`KubeClient.watch`."""
        return self.client.watch(path, params, read_timeout=read_timeout)

    def watch_lines(
        self, path: str, params: Mapping[str, str], *, read_timeout: float
    ) -> AsyncIterator[str]:
        """`KubeClient.watch_lines`."""
        return self.client.watch_lines(path, params, read_timeout=read_timeout)

    async def aclose(self) -> None:
        """Close the lean pool (the `KubeClient` is its owner's to close)."""
        await self._lean.aclose()
