"""JSON POSTs to kube-apiserver over the lean keep-alive HTTP/1.1 pool: what the delegated
authentication and authorization webhooks send (TokenReview, SubjectAccessReview), once per
request that misses their caches.

Why not `KubeClient.post_json` (httpx): per call httpx builds its `Request`/`Response`/`URL`/
`Headers` models, runs its auth generator and scans httpcore's connection pool for expired
connections (a `poll()` per pooled connection): more CPU than computing the answer it
guards. This client writes one request head built from pre-encoded parts and waits for one
future (`http_client.http11.Http11Pool`), a fraction of that (docs/performance.md, "The lean
HTTP/1.1 client against httpx").

Same contract as `KubeClient.post_json`, so the webhooks' retry policy and error mapping are
unchanged (`security.webhook`): a non-2xx answer raises `KubeApiError` with the `Status`
fields (`error_from_response`), a transport failure `KubeApiError` with code 0 whose message
names the failure as httpx did (`ConnectError`: not retried; `ReadTimeout`, `ReadError`:
retried), an undecodable body `orjson.JSONDecodeError`. The connection's CA, client
certificate and host name verification are `Connection.ssl_context()`'s, and the bearer token
is re-read as `Connection.bearer_token` does (token files rotate). Where the lean pool cannot
go (an environment proxy that names the API server, a non-HTTP scheme), calls go through the
given `KubeClient` (httpx), as before.

The pool, the request heads and the error mapping are `kube.lean_api.LeanApi`'s (the
reflectors' list pages use it too). Cost per call on a kept-alive connection: one orjson
encode, a head of ~300 bytes joined from cached parts, one transport write, one future and one
timer, one orjson decode.
"""

from __future__ import annotations

from typing import Any

import orjson

from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kube.lean_api import LeanApi

__all__ = ["ReviewClient"]


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
        self._api = LeanApi(
            self.connection,
            timeout=timeout,
            max_connections=max_connections,
            max_idle=max_idle,
        )

    @property
    def lean(self) -> bool:
        """Whether calls go through the lean pool (else through httpx)."""
        return self._api.lean

    async def post_json(self, path: str, body: Any) -> Any:
        """POST `body` as JSON and decode the answer (`KubeClient.post_json`'s contract)."""
        return (await self.post_json_status(path, body))[1]

    async def post_json_status(self, path: str, body: Any) -> tuple[int, Any]:
        """`post_json`, with the (2xx) status code beside the decoded answer."""
        if not self._api.lean:
            return await self.client.post_json_status(path, body)
        status, answer = await self._api.exchange("POST", path, content=orjson.dumps(body))
        return status, orjson.loads(answer)

    async def aclose(self) -> None:
        """Close the lean pool (the fallback client is its owner's to close)."""
        await self._api.aclose()
