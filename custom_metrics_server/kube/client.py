"""A thin async client for kube-apiserver over httpx: JSON GET/POST, text GET (node proxy),
and line-delimited watch streams. Failures become `KubeApiError` with the Status fields,
the original exception chained; no `kubernetes` client models anywhere.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Generator, Mapping
from typing import Any

import httpx
import orjson

from custom_metrics_server import __version__
from custom_metrics_server.kube.config import Connection

USER_AGENT = f"custom-metrics-server/v{__version__}"


class KubeApiError(Exception):
    """kube-apiserver answered with an error, or could not be reached (`code` 0); `call` is
    the request that failed (`GET https://host/path`), when known, for start-up messages."""

    def __init__(self, code: int, reason: str, message: str, *, call: str = "") -> None:
        super().__init__(f"{code} {reason}: {message}" if code else message)
        self.code = code
        self.reason = reason
        self.message = message
        self.call = call


async def read_capped(response: httpx.Response, limit: int | None, *, what: str) -> bytes:
    """A streamed response's body, refused (`KubeApiError` reason `TooLarge`) past `limit`."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if limit is not None and size > limit:
            raise KubeApiError(0, "TooLarge", f"{what}: the body is over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class GoneError(KubeApiError):
    """410 Gone: the resourceVersion is too old; the caller must relist."""


class BearerAuth(httpx.Auth):
    """Sets the current bearer token on every request (token files rotate)."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        token = self._connection.bearer_token()
        if token:
            request.headers["Authorization"] = f"Bearer {token}"
        yield request


def error_from_response(status: int, body: bytes) -> KubeApiError:
    """The error a non-2xx answer stands for, using its `Status` body when there is one."""
    reason, message = "", body.decode("utf-8", "replace").strip()[:500]
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        document = None
    if isinstance(document, dict) and document.get("kind") == "Status":
        reason = str(document.get("reason", ""))
        message = str(document.get("message", message))
    cls = GoneError if status == 410 else KubeApiError
    return cls(status, reason, message or httpx.codes.get_reason_phrase(status))


def _call(request: httpx.Request) -> str:
    """`GET https://host/path` (no query string: selectors and tokens stay out of logs)."""
    return f"{request.method} {request.url.copy_with(query=None)}"


class KubeClient:
    """One connection pool to kube-apiserver (at most `max_connections` connections)."""

    def __init__(
        self, connection: Connection, *, timeout: float = 10.0, max_connections: int = 100
    ) -> None:
        self.connection = connection
        self._http = httpx.AsyncClient(
            base_url=connection.host,
            verify=connection.ssl_context(),
            timeout=timeout,
            auth=BearerAuth(connection),
            headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
            follow_redirects=False,
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _send(self, request: httpx.Request, *, stream: bool = False) -> httpx.Response:
        try:
            response = await self._http.send(request, stream=stream)
        except httpx.HTTPError as err:
            message = f"{request.method} {request.url.path}: {err!r}"
            raise KubeApiError(0, "", message, call=_call(request)) from err
        if response.status_code >= 300:
            body = await response.aread()
            await response.aclose()
            error = error_from_response(response.status_code, body)
            error.call = _call(request)
            raise error
        return response

    async def get_json(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        """GET a JSON document."""
        return orjson.loads(await self.get_raw(path, params))

    async def get_raw(self, path: str, params: Mapping[str, str] | None = None) -> bytes:
        """GET a JSON document's bytes, undecoded (a schema decoder reads them)."""
        response = await self._send(self._http.build_request("GET", path, params=params))
        return response.content

    async def post_json(self, path: str, body: Any) -> Any:
        """POST a JSON document (TokenReview, SubjectAccessReview) and decode the answer."""
        return (await self.post_json_status(path, body))[1]

    async def post_json_status(self, path: str, body: Any) -> tuple[int, Any]:
        """`post_json`, with the (2xx) status code beside the decoded answer."""
        request = self._http.build_request(
            "POST", path, content=orjson.dumps(body), headers={"Content-Type": "application/json"}
        )
        response = await self._send(request)
        return response.status_code, orjson.loads(response.content)

    async def put_json(self, path: str, body: Any) -> Any:
        """PUT (replace) a JSON document; 409 Conflict when its resourceVersion is stale."""
        request = self._http.build_request(
            "PUT", path, content=orjson.dumps(body), headers={"Content-Type": "application/json"}
        )
        response = await self._send(request)
        return orjson.loads(response.content)

    async def get_bytes(
        self,
        path: str,
        params: Mapping[str, str] | None = None,
        *,
        deadline: float | None = None,
        limit: int | None = None,
    ) -> bytes:
        """GET a raw body (kubelet text expositions through the node proxy) within `deadline` s.
        A body over `limit` bytes is abandoned after reading `limit` (reason `TooLarge`), so a
        broken or hostile source cannot grow memory without bound."""
        request = self._http.build_request(
            "GET", path, params=params, headers={"Accept": "text/plain"}, timeout=deadline
        )
        response = await self._send(request, stream=True)
        try:
            return await read_capped(response, limit, what=f"GET {path}")
        except httpx.HTTPError as err:
            raise KubeApiError(0, "", f"GET {path}: {err!r}") from err
        finally:
            await response.aclose()

    async def watch(
        self, path: str, params: Mapping[str, str], *, read_timeout: float
    ) -> AsyncIterator[dict[str, Any]]:
        """The events of a watch, one decoded JSON object per line, until the server ends it."""
        lines = self.watch_lines(path, params, read_timeout=read_timeout)
        try:
            async for line in lines:
                yield orjson.loads(line)
        finally:
            await lines.aclose()  # the response now, not when the generator is collected

    async def watch_lines(
        self, path: str, params: Mapping[str, str], *, read_timeout: float
    ) -> AsyncGenerator[str, None]:
        """The lines of a watch (one JSON event each, undecoded) until the server ends it."""
        request = self._http.build_request(
            "GET",
            path,
            params=params,
            timeout=httpx.Timeout(10.0, read=read_timeout),
        )
        response = await self._send(request, stream=True)
        try:
            async for line in response.aiter_lines():
                if line:
                    yield line
        except httpx.HTTPError as err:
            raise KubeApiError(0, "", f"watch {path} broke: {err!r}") from err
        finally:
            await response.aclose()
