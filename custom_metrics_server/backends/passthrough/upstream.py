"""One upstream metrics server over HTTPS: its TLS material and bearer token read from files and
re-read when they change, a lean keep-alive HTTP/1.1 pool (`http_client.http11`), and what its
answers mean for us.

`Upstream.get(path)` sends one GET (`Accept: application/json`) and returns `(status, document)`
for 200 and 404 (the caller decides what a 404 means: absence of a value, or a version the
upstream no longer serves); every other outcome is an SDK error naming the upstream:

| upstream | ours |
|---|---|
| no connection, TLS failure, connection broken | 503 `BackendUnavailable` |
| silent past `request_timeout` (or connect past `connect_timeout`) | 504 `BackendTimeout` |
| 400 | 400 `BadRequest` with its message |
| 401, 403 | 503, and an error log line once a minute: our credentials are refused |
| 504 | 504 with its message |
| other 4xx, 5xx, 429 | 503 with its status and message |
| 200 whose body is not JSON | 503 |

Files: the CA bundle, the client certificate and key are checked (one `stat` each) at most once
a second; when one changed, a new `SSLContext` is built and a new pool takes the next calls
(the old pool's calls finish, then it is closed). A context that does not load (a half-written
rotation) keeps the previous one and is reported once. The token file is checked the same way;
an unreadable one keeps the last token.

Cost per call on a kept-alive connection: a clock read, one pre-built request head (a bytes
concatenation), the pool's one write and one future, one orjson decode.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import orjson

from custom_metrics_server import __version__
from custom_metrics_server.errors import BackendTimeout, BackendUnavailable, BadRequest
from custom_metrics_server.http_client.http11 import Http11Pool, TransportError, TransportTimeout

__all__ = ["Upstream", "UpstreamConfig"]

USER_AGENT: Final = f"custom-metrics-server/v{__version__} (pass-through)"
#: Files are stat-ed at most this often (seconds).
CHECK_INTERVAL: Final = 1.0
#: A refusal of our credentials is logged at most this often (seconds).
REFUSAL_LOG_INTERVAL: Final = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamConfig:
    """Where the upstream is and how we authenticate to it (paths already absolute)."""

    url: str
    ca_file: str | None = None
    client_cert_file: str | None = None
    client_key_file: str | None = None
    token_file: str | None = None
    tls_server_name: str | None = None
    insecure_skip_tls_verify: bool = False
    request_timeout: float = 5.0
    connect_timeout: float = 2.0
    max_connections: int = 16


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size, info.st_ino


class _Files:
    """The stamps of a set of files, compared at most once per `CHECK_INTERVAL`."""

    def __init__(self, paths: list[str], clock: Callable[[], float]) -> None:
        self.paths = paths
        self.clock = clock
        self.stamps = [_stamp(path) for path in paths]
        self.next_check = clock() + CHECK_INTERVAL

    def changed(self) -> bool:
        """Whether a file changed since the last call that said so (cheap when not due)."""
        if not self.paths:
            return False
        now = self.clock()
        if now < self.next_check:
            return False
        self.next_check = now + CHECK_INTERVAL
        stamps = [_stamp(path) for path in self.paths]
        if stamps == self.stamps:
            return False
        self.stamps = stamps
        return True


def _message(document: Any, body: bytes) -> str:
    """The upstream's own words: a Status's message, else the start of the body."""
    if isinstance(document, dict) and isinstance(document.get("message"), str):
        return str(document["message"])
    text = body.decode("utf-8", "replace").strip()
    return text[:300] or "(no body)"


class Upstream:
    """One upstream server (see the module)."""

    def __init__(
        self,
        config: UpstreamConfig,
        *,
        logger: logging.Logger,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.logger = logger
        self.clock = clock
        url = urlsplit(config.url.rstrip("/"))
        if url.scheme != "https" or not url.hostname:
            raise ValueError(f"url must be https://host[:port][/path], not {config.url!r}")
        self.host = url.hostname
        self.port = url.port or 443
        self.base_path = url.path
        self.where = f"upstream {url.scheme}://{url.netloc}{url.path}"
        netloc = url.netloc.rpartition("@")[2]
        self._static_head = (
            f"Host: {netloc}\r\nUser-Agent: {USER_AGENT}\r\nAccept: application/json\r\n"
        ).encode("latin-1")
        tls_files = [
            path
            for path in (config.ca_file, config.client_cert_file, config.client_key_file)
            if path
        ]
        self._tls_files = _Files(tls_files, clock)
        self._context = self._load_context()  # raises at start-up: a broken file is named
        self._pool = self._new_pool(self._context)
        self._retired: dict[Http11Pool, asyncio.Task[None]] = {}
        self._tls_failed: tuple[Any, ...] | None = None
        self._token_files = _Files([config.token_file] if config.token_file else [], clock)
        self._auth = b""
        if config.token_file:
            self._auth = self._read_token(initial=True)
        self._refusal_logged: dict[int, float] = {}

    # -- credentials --------------------------------------------------------------------------

    def _load_context(self) -> ssl.SSLContext:
        config = self.config
        context = ssl.create_default_context(cafile=config.ca_file)
        if config.insecure_skip_tls_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if config.client_cert_file:
            context.load_cert_chain(config.client_cert_file, config.client_key_file)
        context.set_alpn_protocols(["http/1.1"])
        return context

    def _new_pool(self, context: ssl.SSLContext) -> Http11Pool:
        config = self.config
        return Http11Pool(
            host=self.host,
            port=self.port,
            ssl_context=context,
            server_hostname=config.tls_server_name or self.host,
            timeout=config.request_timeout,
            connect_timeout=config.connect_timeout,
            max_connections=config.max_connections,
            max_idle=config.max_connections,
        )

    def _read_token(self, *, initial: bool = False) -> bytes:
        path = self.config.token_file
        assert path is not None
        try:
            with open(path, encoding="utf-8") as handle:
                token = handle.read().strip()
        except OSError as err:
            if initial:
                raise
            self.logger.error(
                "%s: keeping the last token: cannot read %s: %s", self.where, path, err
            )
            return self._auth
        if any(char in token for char in "\r\n\x00"):
            if initial:
                raise ValueError(f"the token in {path} has a line break or NUL in it")
            self.logger.error("%s: keeping the last token: %s has a line break", self.where, path)
            return self._auth
        if not initial:
            self.logger.info("%s: bearer token re-read from %s", self.where, path)
        return f"Authorization: Bearer {token}\r\n".encode("latin-1", "replace") if token else b""

    def _refresh_credentials(self) -> None:
        """Re-read what changed (each file set is stat-ed at most once a second)."""
        if self._token_files.changed():
            self._auth = self._read_token()
        if self._tls_files.changed():
            stamps = tuple(self._tls_files.stamps)
            try:
                context = self._load_context()
            except (OSError, ssl.SSLError, ValueError) as err:
                if stamps != self._tls_failed:
                    self.logger.error(
                        "%s: keeping the previous TLS settings: cannot load %s: %s",
                        self.where,
                        ", ".join(self._tls_files.paths),
                        err,
                    )
                self._tls_failed = stamps
                # Look again at the next check even if the files do not change again.
                self._tls_files.stamps = [None] * len(self._tls_files.paths)
                return
            self._tls_failed = None
            self.logger.info("%s: TLS settings reloaded from %s", self.where, self._tls_files.paths)
            self._retire(self._pool)
            self._context = context
            self._pool = self._new_pool(context)

    def _retire(self, pool: Http11Pool) -> None:
        """Close `pool` once the calls it carries have had their time."""

        async def close_later() -> None:
            try:
                await asyncio.sleep(self.config.request_timeout + 1)
            finally:
                self._retired.pop(pool, None)
                await pool.aclose()

        self._retired[pool] = asyncio.get_running_loop().create_task(close_later())

    async def aclose(self) -> None:
        """Close every connection (the retired pools' at once)."""
        await self._pool.aclose()
        for pool, task in list(self._retired.items()):
            task.cancel()
            await pool.aclose()
        self._retired.clear()

    # -- calls --------------------------------------------------------------------------------

    async def get(self, path: str) -> tuple[int, Any]:
        """GET `path` (below the URL's path, with its query); see the module for outcomes."""
        self._refresh_credentials()
        head = (
            f"GET {self.base_path}{path} HTTP/1.1\r\n".encode("latin-1", "replace")
            + self._static_head
            + self._auth
            + b"\r\n"
        )
        timeout = self.config.request_timeout
        try:
            async with asyncio.timeout(timeout):
                answer = await self._pool.request(head)
        except (TimeoutError, TransportTimeout) as err:
            raise BackendTimeout(f"{self.where} did not answer within {timeout:g}s") from err
        except TransportError as err:
            raise BackendUnavailable(f"{self.where} is unreachable: {err}") from err
        status, body = answer.status, answer.body
        try:
            document = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            document = None
            if status == 200:
                raise BackendUnavailable(
                    f"{self.where} answered 200 with a body that is not JSON: "
                    f"{_message(None, body)[:100]}"
                ) from None
        if status in (200, 404):
            return status, document
        message = _message(document, body)
        said = f"{self.where} answered {status}: {message}"
        if status == 400:
            raise BadRequest(said)
        if status in (401, 403):
            self._log_refusal(status, message)
            raise BackendUnavailable(
                f"{said} (our credentials are {'not accepted' if status == 401 else 'not allowed'}"
                " there; see the server's log)"
            )
        if status == 504:
            raise BackendTimeout(said)
        raise BackendUnavailable(said)

    def _log_refusal(self, status: int, message: str) -> None:
        now = self.clock()
        if now < self._refusal_logged.get(status, -REFUSAL_LOG_INTERVAL) + REFUSAL_LOG_INTERVAL:
            return
        self._refusal_logged[status] = now
        config = self.config
        offered = []
        if config.token_file:
            offered.append(f"the bearer token of {config.token_file}")
        if config.client_cert_file:
            offered.append(f"the client certificate {config.client_cert_file}")
        credentials = " and ".join(offered) or "no credentials (set tokenFile or clientCertFile)"
        if status == 401:
            self.logger.error(
                "%s refused our credentials (401 Unauthorized: %s): it did not authenticate %s; "
                "its metrics answer 503 until it does",
                self.where,
                message,
                credentials,
            )
        else:
            self.logger.error(
                "%s does not allow us (403 Forbidden: %s): we presented %s; grant that identity "
                "get/list on the metrics API groups there (RBAC); its metrics answer 503 until "
                "then",
                self.where,
                message,
                credentials,
            )
