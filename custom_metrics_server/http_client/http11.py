"""A lean HTTP/1.1 keep-alive client for one origin (a Prometheus-compatible server, another
metrics server, the API server's node and pod proxies, a pod's metrics endpoint): a small pool
of connections, each an `asyncio.Protocol` whose responses `httptools` parses.

Why not httpx here: per call httpx builds `Request`/`Response`/`URL`/`Headers` objects, walks
its connection pool under anyio locks and events, and logs the call at INFO: more CPU than
the rest of a single-object request. This pool writes one pre-built request head and waits
for one future, close to a bare asyncio round trip (docs/performance.md, "The lean HTTP/1.1
client against httpx").

This module owns :class:`Http11Pool` (one connection's protocol, framing and errors are
:mod:`.connection`'s): connections to one origin (`http://` or `https://`
with a given `ssl.SSLContext`), at most `max_connections` open and `max_idle` kept alive
between calls, callers beyond the limit waiting in order for a free connection. A call fails
with :class:`TransportTimeout` when the server stays silent for `timeout` seconds (each
connect, and the wait for each piece of the answer, like httpx's per-operation timeouts) and
with :class:`TransportError` when it cannot connect or the connection breaks. A request that
fails on a reused keep-alive connection before any byte of the answer arrived (the server
closed it while idle) is sent once more on a new connection. A caller cancelled mid-call
closes its connection (its answer would be out of step with the next request).

Answers are framed by Content-Length, chunked transfer coding or the end of the connection,
and `Content-Encoding: gzip` is decoded. A call may cap the (decoded) body: past `limit` bytes
it fails with :class:`BodyTooLarge` and the connection is closed, read no further.
`stream` hands over an answer whose body is read as it arrives (:mod:`.stream`: kube-apiserver's
watches); its connection comes back to the pool when the body ends. A `held` stream (a watch,
open for minutes) takes a connection outside `max_connections`: the limit bounds calls in
flight, and a watch is not one; otherwise a program's watches (one per watched collection, in
the thousands for MetricDefinitions' sources) would take every connection and starve its calls,
and watches past the limit would wait forever. The watches' own number is the caller's to bound.
`connect_timeout` (default: `timeout`) bounds each connect and TLS handshake on its own.

Environment proxies (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`, ...) are honoured as Go's
net/http honours them (:mod:`.proxy`), unless `trust_env=False`: an `https://` origin through a
CONNECT tunnel with TLS to the origin inside, an `http://` origin by requests in absolute form
to the proxy. The pool decides once, when it is made. It
must not know any API: its callers (`prometheus.client`, `backends.passthrough`,
`backends.pod_metrics`, `scraping.kubelet_client`, `kube.client`) build requests and read answers.

One piece (over 400 lines): the pool's slots, waiters, idle list and held connections are one
state machine (every acquire, release and drop reads and changes all four); split, each half
would reach into the other's counters.

Cost per call on a kept-alive connection: O(request + answer) bytes, one transport write, one
timer and one future; a new connection adds a TCP connect (and a TLS handshake).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import ssl
from collections.abc import Callable
from typing import Final

from custom_metrics_server.http_client.connection import (
    Answer,
    BodyTooLarge,
    HeadTooLarge,
    Http11Connection,
    Stale,
    TransportError,
    TransportTimeout,
)
from custom_metrics_server.http_client.proxy import (
    Proxy,
    ProxyError,
    authority,
    environment_proxy,
    open_tunnel,
)
from custom_metrics_server.http_client.stream import BodyStream

#: One INFO line per request, as httpx's ("HTTP Request: GET url "HTTP/1.1 200 OK""), enabled
#: from `-v=6` by `runtime.logs` (klog's level for a client's requests).
REQUEST_LOGGER: Final = "custom_metrics_server.http"
_requests = logging.getLogger(REQUEST_LOGGER)

__all__ = [
    "Answer",
    "BodyStream",
    "BodyTooLarge",
    "HeadTooLarge",
    "Http11Pool",
    "TransportError",
    "TransportTimeout",
]


class Http11Pool:
    """Keep-alive connections to one origin; see the module docstring."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None = None,
        timeout: float = 10.0,
        max_connections: int = 64,
        max_idle: int = 16,
        connect_timeout: float | None = None,
        trust_env: bool = True,
    ) -> None:
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.server_hostname = server_hostname
        self.timeout = timeout
        self.connect_timeout = timeout if connect_timeout is None else connect_timeout
        self.max_connections = max_connections
        self.max_idle = max_idle
        self._idle: list[Http11Connection] = []
        self._open: set[Http11Connection] = set()
        #: connections `held` streams have now: open, but outside `max_connections`
        self._held: set[Http11Connection] = set()
        self._connecting = 0
        self._waiters: collections.deque[asyncio.Future[Http11Connection | None]] = (
            collections.deque()
        )
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self.proxy: Proxy | None = None
        self._proxy_problem: str | None = None
        #: An http:// origin through a proxy: the request target's prefix (absolute form).
        self._absolute: bytes | None = None
        if trust_env:
            self._use_environment_proxy()

    def _use_environment_proxy(self) -> None:
        scheme = "https" if self.ssl_context is not None else "http"
        try:
            self.proxy = environment_proxy(scheme, self.host, self.port)
        except ValueError as err:
            self._proxy_problem = str(err)  # every call says it; the caller's constructor works
            return
        if self.proxy is not None and self.ssl_context is None:
            self._absolute = f"http://{authority(self.host, self.port)}".encode("ascii")

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop the pool's connections live on (the first caller's)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    async def request(
        self,
        head: bytes,
        body: bytes = b"",
        *,
        sink: Callable[[bytes], None] | None = None,
        limit: int | None = None,
    ) -> Answer:
        """Send a complete request (`head` ends with the blank line) and read the answer;
        :class:`BodyTooLarge` past `limit` bytes of (decoded) body.

        Cost: one transport write, one future and one timer on a kept-alive connection."""
        if self._closed:
            raise TransportError("client closed")
        connection = await self._acquire()
        try:
            answer = await self._exchange(connection, head, body, sink, limit)
        except Stale:
            connection = await self._acquire(fresh=True)
            answer = await self._exchange(connection, head, body, sink, limit)
        if _requests.isEnabledFor(logging.INFO):
            self._log(head, answer)
        return answer

    async def stream(
        self,
        head: bytes,
        body: bytes = b"",
        *,
        silence: float | None = None,
        limit: int | None = None,
        held: bool = False,
    ) -> BodyStream:
        """Send a complete request and return its answer once the head is in, the body to be
        read as it arrives (:class:`~.stream.BodyStream`: the connection is the stream's until
        the body ends or the stream is closed). `silence` is the longest the server may say
        nothing while the reader waits (default: the pool's `timeout`); `limit` as
        `request`'s. `held`: a long-lived stream (a watch), on a connection outside
        `max_connections` (see the module), never waiting for one.

        Cost: as `request`, plus one future per wait for the server."""
        if self._closed:
            raise TransportError("client closed")
        silence = self.timeout if silence is None else silence
        if self._absolute is not None:
            head = self._forwarded(head)
        acquire = self._acquire_held if held else self._acquire
        release = self._release_held if held else self._release
        connection = await acquire()
        stream = BodyStream(connection, release, timeout=silence, limit=limit)
        try:
            await stream.open(head, body)
        except Stale:
            connection = await acquire(fresh=True)
            stream = BodyStream(connection, release, timeout=silence, limit=limit)
            await stream.open(head, body)
        if _requests.isEnabledFor(logging.INFO):
            self._log(head, Answer(stream.status, stream.reason, b""))
        return stream

    def _log(self, head: bytes, answer: Answer) -> None:
        method, _, rest = head.partition(b" ")
        target = rest.partition(b" ")[0].decode("latin-1")
        scheme = "https" if self.ssl_context is not None else "http"
        _requests.info(
            'HTTP Request: %s %s://%s:%d%s "HTTP/1.1 %d %s"',
            method.decode("latin-1"),
            scheme,
            self.host,
            self.port,
            target,
            answer.status,
            answer.reason,
        )

    async def _exchange(
        self,
        connection: Http11Connection,
        head: bytes,
        body: bytes,
        sink: Callable[[bytes], None] | None,
        limit: int | None,
    ) -> Answer:
        loop = self.loop
        waiter: asyncio.Future[Answer] = loop.create_future()
        connection.waiter = waiter
        connection.sink = sink
        connection.limit = limit
        connection.bodiless = head.startswith(b"HEAD ")
        connection.uses += 1
        connection.last_activity = loop.time()
        connection.timer = loop.call_later(self.timeout, connection.expire)
        assert connection.transport is not None
        if self._absolute is not None:
            head = self._forwarded(head)
        try:
            connection.transport.write(head + body if body else head)
            answer = await waiter
        except BaseException:
            # Cancelled or failed mid-call: the connection's state is unknown.
            connection.waiter = None
            connection.close()
            raise
        finally:
            if connection.timer is not None:
                connection.timer.cancel()
                connection.timer = None
        self._release(connection)
        return answer

    def _forwarded(self, head: bytes) -> bytes:
        """`head` as a proxy takes it: the target in absolute form and the proxy's
        credentials. O(len(head))."""
        assert self._absolute is not None
        assert self.proxy is not None
        method, _, rest = head.partition(b" ")
        line, _, headers = rest.partition(b"\r\n")
        return b"".join(
            (method, b" ", self._absolute, line, b"\r\n", self.proxy.authorization, headers)
        )

    def _idle_connection(self) -> Http11Connection | None:
        """The most recently idle connection still open, or None."""
        idle = self._idle
        while idle:
            connection = idle.pop()
            if not connection.closed:
                return connection
        return None

    async def _acquire(self, *, fresh: bool = False) -> Http11Connection:
        connection = None if fresh else self._idle_connection()
        if connection is not None:
            return connection
        while len(self._open) - len(self._held) + self._connecting >= self.max_connections:
            waiter: asyncio.Future[Http11Connection | None] = self.loop.create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout(self.timeout):
                    handed = await waiter
            except BaseException as err:
                if waiter.done() and not waiter.cancelled():
                    # Handed a connection (or a free slot) just as this caller gave up:
                    # pass it on rather than lose it.
                    passed = waiter.result()
                    if passed is not None:
                        self._release(passed)
                    else:
                        self._wake_one(None)
                else:
                    waiter.cancel()
                if isinstance(err, TimeoutError):
                    raise TransportTimeout(
                        f"no free connection within {self.timeout:g}s "
                        f"({self.max_connections} in use)"
                    ) from None
                raise
            if handed is not None and not handed.closed:
                return handed
        return await self._connect()

    async def _acquire_held(self, *, fresh: bool = False) -> Http11Connection:
        """A connection for a held stream: an idle one, else a new one whatever the limit. The
        connection counts outside `max_connections` until `_release_held`."""
        connection = None if fresh else self._idle_connection()
        if connection is None:
            connection = await self._connect()
        self._held.add(connection)
        return connection

    def _release_held(self, connection: Http11Connection) -> None:
        """A held stream ended: its connection counts against `max_connections` again, and is
        closed instead when the calls already use every one."""
        self._held.discard(connection)
        if connection.closed:
            return
        if len(self._open) - len(self._held) > self.max_connections:
            connection.close()
        else:
            self._release(connection)

    async def _connect(self) -> Http11Connection:
        self._connecting += 1
        try:
            async with asyncio.timeout(self.connect_timeout):
                if self.proxy is not None or self._proxy_problem is not None:
                    connection = await self._connect_through_proxy()
                else:
                    _, connection = await self.loop.create_connection(
                        lambda: Http11Connection(self),
                        self.host,
                        self.port,
                        ssl=self.ssl_context,
                        server_hostname=self.server_hostname if self.ssl_context else None,
                    )
        except TimeoutError:
            raise TransportTimeout(f"could not connect within {self.connect_timeout:g}s") from None
        except (OSError, ssl.SSLError) as err:
            raise TransportError(f"cannot connect: {err}") from err
        finally:
            self._connecting -= 1
        if self._closed:
            connection.close()
            raise TransportError("client closed")
        self._open.add(connection)
        return connection

    async def _connect_through_proxy(self) -> Http11Connection:
        """A connection through the environment's proxy: a CONNECT tunnel with TLS to the
        origin inside for https://, else a connection to the proxy itself."""
        if self._proxy_problem is not None:
            raise TransportError(f"cannot use the environment's proxy: {self._proxy_problem}")
        proxy = self.proxy
        assert proxy is not None
        connection = Http11Connection(self)
        try:
            if self.ssl_context is not None:
                await open_tunnel(
                    self.loop,
                    connection,
                    proxy,
                    (self.host, self.port),
                    ssl_context=self.ssl_context,
                    server_hostname=self.server_hostname,
                )
            else:
                await self.loop.create_connection(
                    lambda: connection,
                    proxy.host,
                    proxy.port,
                    ssl=ssl.create_default_context() if proxy.scheme == "https" else None,
                )
        except ProxyError as err:
            raise TransportError(f"proxy {proxy.shown}: {err}") from err
        except (OSError, ssl.SSLError) as err:
            raise TransportError(f"cannot connect through proxy {proxy.shown}: {err}") from err
        return connection

    def _release(self, connection: Http11Connection) -> None:
        """A call is done with `connection`: to the first waiter, else kept idle (or closed
        beyond `max_idle`)."""
        if connection.closed:
            return
        if self._wake_one(connection):
            return
        if len(self._idle) >= self.max_idle:
            connection.close()
        else:
            self._idle.append(connection)

    def _wake_one(self, handed: Http11Connection | None) -> bool:
        """Hand a connection, or with None a free slot, to the first caller still waiting."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(handed)
                return True
        return False

    def dropped(self, connection: Http11Connection) -> None:
        """A connection closed: forget it, and let a waiter open a new one."""
        self._held.discard(connection)
        if connection in self._open:
            self._open.discard(connection)
            self._wake_one(None)

    def close(self) -> None:
        """Close every connection now; later calls fail (calls in flight fail at once)."""
        self._closed = True
        for connection in list(self._open):
            connection.close()
        self._idle.clear()

    async def aclose(self) -> None:
        """Close every connection; later calls fail."""
        self.close()
        await asyncio.sleep(0)
