"""JSON POSTs to kube-apiserver over the lean keep-alive HTTP/1.1 pool: what the delegated
authentication and authorization webhooks send (TokenReview, SubjectAccessReview), once per
request that misses their caches.

Why not `KubeClient.post_json` (httpx): per call httpx builds its `Request`/`Response`/`URL`/
`Headers` models, runs its auth generator and scans httpcore's connection pool for expired
connections (a `poll()` per pooled connection); that was about 1.5-2 ms of CPU per review on
the build machine (docs/envelope.md, "Where the time goes", item 4), more than computing
the answer it guards. This client writes one request head built from pre-encoded parts and
waits for one future (`runtime.http11.Http11Pool`): ~0.1 ms per review (measured in
`benchmarks/review_client.py`).

Same contract as `KubeClient.post_json`, so the webhooks' retry policy and error mapping are
unchanged (`security.webhook`): a non-2xx answer raises `KubeApiError` with the `Status`
fields (`error_from_response`), a transport failure `KubeApiError` with code 0 whose message
names the failure as httpx did (`ConnectError`: not retried; `ReadTimeout`, `ReadError`:
retried), an undecodable body `orjson.JSONDecodeError`. The connection's CA, client
certificate and host name verification are `Connection.ssl_context()`'s, and the bearer token
is re-read as `Connection.bearer_token` does (token files rotate). Where the lean pool cannot
go (an environment proxy that names the API server, a non-HTTP scheme), calls go through the
given `KubeClient` (httpx), as before.

Cost per call on a kept-alive connection: one orjson encode, a head of ~300 bytes joined from
cached parts, one transport write, one future and one timer, one orjson decode.
"""

from __future__ import annotations

import ssl
from typing import Any, Final
from urllib.parse import urlsplit

import orjson

from custom_metrics_server.kube.client import (
    USER_AGENT,
    KubeApiError,
    KubeClient,
    error_from_response,
)
from custom_metrics_server.runtime.http11 import (
    Http11Pool,
    TransportError,
    TransportTimeout,
    names_a_proxy,
)

__all__ = ["ReviewClient"]

#: Headers of every review request, after the request line and Host.
_FIXED: Final = (
    f"User-Agent: {USER_AGENT}\r\nAccept: application/json\r\nAccept-Encoding: gzip\r\n"
    "Content-Type: application/json\r\n"
).encode()


class ReviewClient:
    """`post_json` (the webhooks' `JsonPoster`) to one API server; see the module docstring.

    `max_connections` bounds the reviews in flight (httpx's pool had 100); `max_idle` are kept
    alive between bursts."""

    def __init__(
        self,
        client: KubeClient,
        *,
        timeout: float = 10.0,
        max_connections: int = 100,
        max_idle: int = 32,
    ) -> None:
        self.client = client  # the fallback, and what start-up checks and messages name
        self.connection = client.connection
        self._pool: Http11Pool | None = None
        self._host_line = b""
        self._prefix = ""
        self._token: str | None = None
        self._token_line = b""
        url = urlsplit(self.connection.host)
        if (
            url.scheme not in ("http", "https")
            or not url.hostname
            or not url.netloc.isascii()
            or names_a_proxy(url)
        ):
            return
        https = url.scheme == "https"
        context: ssl.SSLContext | None = self.connection.ssl_context() if https else None
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
        """Whether calls go through the lean pool (else through httpx)."""
        return self._pool is not None

    def _authorization(self) -> bytes:
        """The `Authorization` header line of the current token; O(1) while it is unchanged."""
        token = self.connection.bearer_token()
        if token != self._token:
            if token and any(char in token for char in "\r\n\x00"):
                raise KubeApiError(0, "", "the bearer token has a line break or NUL")
            self._token_line = f"Authorization: Bearer {token}\r\n".encode() if token else b""
            self._token = token
        return self._token_line

    async def post_json(self, path: str, body: Any) -> Any:
        """POST `body` as JSON and decode the answer (`KubeClient.post_json`'s contract)."""
        pool = self._pool
        if pool is None:
            return await self.client.post_json(path, body)
        content = orjson.dumps(body)
        target = self._prefix + path
        head = b"".join(
            (
                f"POST {target} HTTP/1.1\r\n".encode("ascii"),
                self._host_line,
                _FIXED,
                self._authorization(),
                b"Content-Length: %d\r\n\r\n" % len(content),
            )
        )
        call = f"POST {self.connection.host}{target}"
        try:
            answer = await pool.request(head, content)
        except TransportTimeout as err:
            # httpx's names, which `security.webhook.should_retry` reads: timeouts are retried,
            # a connection that cannot be made (refused, unknown host, TLS) is not.
            kind = "ConnectTimeout" if str(err).startswith("could not connect") else "ReadTimeout"
            raise KubeApiError(0, "", f"POST {path}: {kind}({err})", call=call) from err
        except TransportError as err:
            kind = "ConnectError" if isinstance(err.__cause__, OSError) else "ReadError"
            raise KubeApiError(0, "", f"POST {path}: {kind}({err})", call=call) from err
        if answer.status >= 300 or answer.status < 200:
            error = error_from_response(answer.status, answer.body)
            error.call = call
            raise error
        return orjson.loads(answer.body)

    async def aclose(self) -> None:
        """Close the lean pool (the fallback client is its owner's to close)."""
        if self._pool is not None:
            await self._pool.aclose()
