"""The async client of kube-apiserver, over the lean keep-alive HTTP/1.1 pool
(`http_client.http11.Http11Pool`): JSON GET, POST and PUT, text GET (the node proxy), and
line-delimited watch streams (`Http11Pool.stream`). No `kubernetes` client models anywhere.

Why the lean pool and not httpx: per call httpx builds its `Request`/`Response`/`URL`/`Headers`
models, runs its auth generator, scans httpcore's pool and reads the body through anyio
streams, many times the CPU of the call itself (docs/performance.md, "The lean HTTP/1.1 client
against httpx" and "The Kubernetes client: watches and list pages").

The contract every caller reads (the reflectors, discovery, the Lease, the webhooks' reviews
and their retry policy, the start-up checks): a non-2xx answer raises `KubeApiError` from its
`Status` body (`error_from_response`; 410 is `GoneError`); a transport failure raises
`KubeApiError` with code 0, the pool's `TransportError` chained, whose message names the
failure with httpx's words (`ConnectError`, `ConnectTimeout`: the connection could not be made,
not retried by the webhooks; `ReadTimeout`, `ReadError`: it broke), and `call` names the
request (`GET https://host/path`, no query: selectors stay out of messages). The CA, client
certificate and verification are `Connection.ssl_context()`'s, the name verified is the URL's
host, and the bearer token is re-read per request as `Connection.bearer_token` does (token
files rotate).

Cost per call on a kept-alive connection: a head of ~300 bytes joined from cached parts, one
transport write, one future and one timer, plus O(answer bytes) to read it; a watch line costs
a split of the piece it arrived in.
"""

from __future__ import annotations

import http
import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any, Final
from urllib.parse import SplitResult, quote, urlencode, urlsplit

import orjson

from custom_metrics_server import __version__
from custom_metrics_server.http_client.http11 import (
    BodyStream,
    BodyTooLarge,
    Http11Pool,
    TransportError,
    TransportTimeout,
)
from custom_metrics_server.kube.config import Connection

__all__ = ["USER_AGENT", "GoneError", "KubeApiError", "KubeClient", "error_from_response"]


USER_AGENT = f"custom-metrics-server/v{__version__}"

#: Headers of every call after the request line, Host and Accept.
_FIXED: Final = f"User-Agent: {USER_AGENT}\r\nAccept-Encoding: gzip\r\n".encode()
_JSON: Final = b"Accept: application/json\r\n"
_TEXT: Final = b"Accept: text/plain\r\n"
_JSON_BODY: Final = b"Content-Type: application/json\r\n"
#: A path that goes on the request line as it is: printable ASCII without spaces.
_PLAIN_PATH: Final = re.compile(r"[!-~]*").fullmatch


class KubeApiError(Exception):
    """kube-apiserver answered with an error, or could not be reached (`code` 0); `call` is
    the request that failed (`GET https://host/path`), when known, for start-up messages."""

    def __init__(self, code: int, reason: str, message: str, *, call: str = "") -> None:
        super().__init__(f"{code} {reason}: {message}" if code else message)
        self.code = code
        self.reason = reason
        self.message = message
        self.call = call


class GoneError(KubeApiError):
    """410 Gone: the resourceVersion is too old; the caller must relist."""


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
    if not message:
        try:
            message = http.HTTPStatus(status).phrase
        except ValueError:
            message = ""
    cls = GoneError if status == 410 else KubeApiError
    return cls(status, reason, message)


def transport_failure(err: TransportError, what: str, *, call: str = "") -> KubeApiError:
    """The `KubeApiError` (code 0) of a transport failure, named with httpx's words (the
    webhooks' retry policy reads them: `security.webhook.should_retry`)."""
    if isinstance(err, TransportTimeout):
        kind = "ConnectTimeout" if str(err).startswith("could not connect") else "ReadTimeout"
    else:
        kind = "ConnectError" if isinstance(err.__cause__, OSError) else "ReadError"
    error = KubeApiError(0, "", f"{what}: {kind}({err})", call=call)
    error.__cause__ = err
    return error


def open_pool_for(
    url: SplitResult, connection: Connection, *, timeout: float, max_connections: int, max_idle: int
) -> Http11Pool | None:
    """The pool to the API server at `url` (None for a URL it cannot reach: not http or https).
    The one place where the client's connections are made; the pool honours environment
    proxies itself (`http_client.proxy`: a CONNECT tunnel for https, absolute form for http)."""
    if url.scheme not in ("http", "https") or not url.hostname or not url.netloc.isascii():
        return None
    https = url.scheme == "https"
    return Http11Pool(
        host=url.hostname,
        port=url.port or (443 if https else 80),
        ssl_context=connection.ssl_context() if https else None,
        # The name verified is the URL's host: what a kubeconfig's server certificate names.
        server_hostname=url.hostname if https else None,
        timeout=timeout,
        max_connections=max_connections,
        max_idle=max_idle,
    )


class KubeClient:
    """One pool of connections to kube-apiserver (at most `max_connections`, `max_idle` kept
    alive between calls); see the module docstring."""

    def __init__(
        self,
        connection: Connection,
        *,
        timeout: float = 10.0,
        max_connections: int = 100,
        max_idle: int = 32,
    ) -> None:
        self.connection = connection
        url = urlsplit(connection.host)
        self._pool = open_pool_for(
            url,
            connection,
            timeout=timeout,
            max_connections=max_connections,
            max_idle=max_idle,
        )
        netloc = url.netloc.rpartition("@")[2]
        self._host_line = f"Host: {netloc}\r\n".encode("ascii", "replace")
        self._prefix = url.path.rstrip("/")
        self._base = f"{url.scheme}://{netloc}{self._prefix}"

    async def aclose(self) -> None:
        """Close the connection pool (watches in flight fail)."""
        if self._pool is not None:
            await self._pool.aclose()

    def _request(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        *,
        accept: bytes = _JSON,
        content: bytes | None = None,
    ) -> tuple[Http11Pool, bytes, str]:
        """The pool, the request head and the call's name (`GET https://host/path`)."""
        call = f"{method} {self._base}{path}"
        pool = self._pool
        if pool is None:
            raise KubeApiError(
                0, "", f"{method} {path}: not an http(s) URL: {self.connection.host}", call=call
            )
        if not _PLAIN_PATH(path):  # non-ASCII, spaces, control characters: escaped, as httpx did
            path = quote(path, safe="/%:@!$&'()*+,;=-._~")
        query = urlencode(params) if params else ""
        target = self._prefix + path + ("?" + query if query else "")
        try:
            authorization = self.connection.authorization_line()
        except ValueError as err:
            raise KubeApiError(0, "", str(err), call=call) from None
        parts = [
            f"{method} {target} HTTP/1.1\r\n".encode("ascii"),
            self._host_line,
            accept,
            _FIXED,
            authorization,
        ]
        if content is not None:
            parts += (_JSON_BODY, b"Content-Length: %d\r\n" % len(content))
        parts.append(b"\r\n")
        return pool, b"".join(parts), call

    async def exchange(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None = None,
        *,
        content: bytes | None = None,
    ) -> tuple[int, bytes]:
        """The 2xx status and body of `method path?params` (with a JSON `content`)."""
        pool, head, call = self._request(method, path, params, content=content)
        try:
            answer = await pool.request(head, content or b"")
        except TransportError as err:
            raise transport_failure(err, f"{method} {path}", call=call) from err
        if not 200 <= answer.status < 300:
            error = error_from_response(answer.status, answer.body)
            error.call = call
            raise error
        return answer.status, answer.body

    async def get_json(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        """GET a JSON document."""
        return orjson.loads(await self.get_raw(path, params))

    async def get_raw(self, path: str, params: Mapping[str, str] | None = None) -> bytes:
        """GET a JSON document's bytes, undecoded (a schema decoder reads them)."""
        return (await self.exchange("GET", path, params))[1]

    async def post_json(self, path: str, body: Any) -> Any:
        """POST a JSON document (TokenReview, SubjectAccessReview) and decode the answer."""
        return (await self.post_json_status(path, body))[1]

    async def post_json_status(self, path: str, body: Any) -> tuple[int, Any]:
        """`post_json`, with the (2xx) status code beside the decoded answer."""
        status, answer = await self.exchange("POST", path, content=orjson.dumps(body))
        return status, orjson.loads(answer)

    async def put_json(self, path: str, body: Any) -> Any:
        """PUT (replace) a JSON document; 409 Conflict when its resourceVersion is stale."""
        return orjson.loads((await self.exchange("PUT", path, content=orjson.dumps(body)))[1])

    async def _stream(
        self,
        path: str,
        params: Mapping[str, str] | None,
        *,
        accept: bytes,
        silence: float | None,
        limit: int | None = None,
        held: bool = False,
    ) -> BodyStream:
        """A GET whose 2xx answer's body is read as it arrives (the caller closes it); `held`
        for a watch (its connection outside the pool's limit: `Http11Pool.stream`)."""
        pool, head, call = self._request("GET", path, params, accept=accept)
        try:
            stream = await pool.stream(head, silence=silence, limit=limit, held=held)
        except BodyTooLarge as err:
            raise KubeApiError(0, "TooLarge", f"GET {path}: {err}", call=call) from err
        except TransportError as err:
            raise transport_failure(err, f"GET {path}", call=call) from err
        if not 200 <= stream.status < 300:
            try:
                body = await stream.read()
            except TransportError:
                body = b""
            finally:
                stream.close()
            error = error_from_response(stream.status, body)
            error.call = call
            raise error
        return stream

    async def get_bytes(
        self,
        path: str,
        params: Mapping[str, str] | None = None,
        *,
        deadline: float | None = None,
        limit: int | None = None,
    ) -> bytes:
        """GET a raw body (kubelet text expositions through the node proxy); `deadline` is the
        longest silence of the server. A body over `limit` bytes is abandoned after reading
        `limit` (reason `TooLarge`), so a broken or hostile source cannot grow memory without
        bound."""
        stream = await self._stream(path, params, accept=_TEXT, silence=deadline, limit=limit)
        try:
            return await stream.read()
        except BodyTooLarge as err:
            raise KubeApiError(0, "TooLarge", f"GET {path}: {err}") from err
        except TransportError as err:
            raise transport_failure(err, f"GET {path}") from err
        finally:
            stream.close()

    async def watch(
        self, path: str, params: Mapping[str, str], *, read_timeout: float
    ) -> AsyncIterator[dict[str, Any]]:
        """The events of a watch, one decoded JSON object per line, until the server ends it."""
        lines = self.watch_lines(path, params, read_timeout=read_timeout)
        try:
            async for line in lines:
                yield orjson.loads(line)
        finally:
            await lines.aclose()  # the stream now, not when the generator is collected

    async def watch_lines(
        self, path: str, params: Mapping[str, str], *, read_timeout: float
    ) -> AsyncGenerator[bytes, None]:
        """The lines of a watch (one JSON event each, undecoded, empty lines skipped) until the
        server ends it; `read_timeout` is the longest silence. A stream that breaks raises
        `KubeApiError` (code 0) after the lines completed before the break; a line cut by the
        break is dropped. O(bytes): each piece is split once, a line spread over several pieces
        joined once."""
        stream = await self._stream(path, params, accept=_JSON, silence=read_timeout, held=True)
        pending: list[bytes] = []  # the start of a line that has not ended yet
        try:
            async for piece in stream:
                lines = piece.split(b"\n")
                if len(lines) == 1:
                    pending.append(piece)
                    continue
                if pending:
                    pending.append(lines[0])
                    lines[0] = b"".join(pending)
                    pending.clear()
                tail = lines.pop()
                for line in lines:
                    if line:
                        yield line
                if tail:
                    pending.append(tail)
            if pending:  # the stream ended without a last newline
                yield b"".join(pending)
        except TransportError as err:
            raise KubeApiError(0, "", f"watch {path} broke: {err!r}") from err
        finally:
            stream.close()
