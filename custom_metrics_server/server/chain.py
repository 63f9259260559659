"""The handler chain: small ASGI filters every HTTP request passes before a handler runs, in
the spirit of the Go generic API server's `DefaultBuildHandlerChain`. `server.app` composes
them, outermost first::

    Tracking       one Exchange per request: the status sent, `Connection: close` once
                   shutdown began, the request's self-metrics when it ends
    InflightLimit  --max-requests-inflight: 429 with Retry-After: 1 (health probes exempt)
    Deadline       --request-timeout, or a shorter ?timeout=: the work cancelled, 504
    UriBound       path plus query over 16 KiB: 414, before any credential is looked at
    GateFilter     authentication, header stripping, authorization: 401, 403, 400, 500
    PathRouter     one routing decision: the metric APIs, metrics.k8s.io, the demo's /api,
                   or the FastAPI shell (health, version, /metrics, OpenAPI)

A filter that refuses a request answers with `reject` (one `Status` renderer, JSON unless the
filter negotiates) and marks the request for the self-metrics; nothing below it runs.

Cost with warm caches, per request: one `Exchange`, one send wrapper, one dict lookup per
filter; the deadline is a registry entry swept twice a second, not a timer per request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from custom_metrics_server.api.grammar import SEGMENTS_KEY, parse_query, split_api_path
from custom_metrics_server.api.status import status_response
from custom_metrics_server.errors import (
    MAX_URI_BYTES,
    StatusError,
    request_timeout,
    too_many_requests,
    uri_too_long,
)
from custom_metrics_server.machinery.durations import go_duration_seconds
from custom_metrics_server.runtime.asgi import (
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    request_header,
    send_body,
)
from custom_metrics_server.security.gate import Gate
from custom_metrics_server.server.observability import ServerMetrics

__all__ = [
    "Deadline",
    "Exchange",
    "GateFilter",
    "InflightLimit",
    "PathRouter",
    "ShutdownState",
    "Tracking",
    "UriBound",
    "exchange_of",
    "reject",
    "request_deadline",
]

logger = logging.getLogger(__name__)

#: Where a request's `Exchange` rides in the ASGI scope.
EXCHANGE: Final = "custom_metrics_server.exchange"
#: Self-metric labels of a request refused before any handler ran.
NO_LABELS: Final = ("", "", "")
#: Exempt from the in-flight limit, as upstream exempts its health checks: a probe must not
#: fail (and take the pod out of rotation) just because the server is busy.
_HEALTH_PATHS: Final = frozenset({"/healthz", "/livez", "/readyz"})
_HEALTH_PREFIXES: Final = ("/healthz/", "/livez/", "/readyz/")
#: How late `--request-timeout` may fire, at most (seconds).
_SWEEP_INTERVAL: Final = 0.5
#: The self-metrics' verb label (HEAD is answered as GET).
_VERBS: Final = {"GET": "get", "HEAD": "get"}


class Exchange:
    """One request's progress through the chain: set by the filters and handlers, read by
    `Tracking` when the request ends. It is also the `send` the filters below `Tracking`
    get (one object per request, no closure): it records the status and adds
    `Connection: close` once shutdown began."""

    __slots__ = ("labels", "send", "started", "state", "status")

    def __init__(self, started: float, send: Send, state: ShutdownState | None = None) -> None:
        self.started = started
        self.send = send
        self.state = state
        #: the status sent, 0 before the response starts
        self.status = 0
        #: (group, version, resource) for the self-metrics; None: not counted (cold routes)
        self.labels: tuple[str, str, str] | None = None

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            state = self.state
            if state is not None and state.shutting_down:
                message = {
                    **message,
                    "headers": [*message.get("headers", ()), (b"connection", b"close")],
                }
        await self.send(message)


def exchange_of(scope: Scope) -> Exchange:
    """The request's `Exchange` (a fresh one outside the chain, as in unit tests)."""
    found: Exchange | None = scope.get(EXCHANGE)
    if found is None:
        found = scope[EXCHANGE] = Exchange(time.perf_counter(), _no_send)
    return found


async def _no_send(message: Message) -> None:  # pragma: no cover - outside the chain
    raise RuntimeError("an Exchange made outside the chain does not send")


async def reject(scope: Scope, send: Send, error: StatusError, *, negotiate: bool = False) -> None:
    """Answer `error` as a `Status` before any handler ran (JSON, or as the client's Accept
    asks when `negotiate`: upstream negotiates 401 and 403, not 414, 429 or 504)."""
    exchange = exchange_of(scope)
    if exchange.labels is None:
        exchange.labels = NO_LABELS
    accept = request_header(scope, b"accept") if negotiate else ""
    body, headers = status_response(error, accept)
    await send_body(send, error.code, body, headers)


class ShutdownState:
    """Whether termination has begun (SIGTERM): responses then close their connections."""

    __slots__ = ("shutting_down",)

    def __init__(self) -> None:
        self.shutting_down = False


class Tracking:
    """Outermost: gives the request its `Exchange`, records the status it is answered with,
    adds `Connection: close` to any response that starts after shutdown began (uvicorn then
    closes the connection after the body, so clients reconnect to another replica), and
    counts the request in the self-metrics when it ends (those a handler or filter labelled)."""

    __slots__ = ("app", "metrics", "state")

    def __init__(self, app: ASGIApp, metrics: ServerMetrics, state: ShutdownState) -> None:
        self.app = app
        self.metrics = metrics
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        exchange = scope[EXCHANGE] = Exchange(time.perf_counter(), send, self.state)
        try:
            await self.app(scope, receive, exchange)
        finally:
            # uvicorn's cycle holds the scope and the Exchange holds the cycle's `send`: a
            # reference cycle per request that only the cyclic GC could free (in batches of
            # thousands, 50-150 ms of the loop each under the HPA load). Broken here, the
            # request's objects are freed by reference counting as it ends.
            scope.pop(EXCHANGE, None)
            labels = exchange.labels
            if labels is not None:
                self.metrics.observe_request(
                    group=labels[0],
                    version=labels[1],
                    resource=labels[2],
                    verb=_VERBS.get(scope["method"], "other"),
                    # nothing sent: the request was cancelled (client gone, shutdown)
                    code=exchange.status or 504,
                    seconds=time.perf_counter() - exchange.started,
                )


def _exempt_from_limit(path: str) -> bool:
    return path in _HEALTH_PATHS or path.startswith(_HEALTH_PREFIXES)


class InflightLimit:
    """`--max-requests-inflight` (0: no limit): a request beyond it is a 429 with
    `Retry-After: 1`. Before the gate, so authentication and SubjectAccessReview calls count,
    as upstream's filter sits before authorization. Health probes are exempt."""

    __slots__ = ("app", "inflight", "limit")

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        #: requests being served now that count against the limit
        self.inflight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if _exempt_from_limit(scope["path"]):
            await self.app(scope, receive, send)
            return
        if self.limit and self.inflight >= self.limit:
            await reject(scope, send, too_many_requests())
            return
        self.inflight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.inflight -= 1


def request_deadline(configured: float, query: bytes) -> float:
    """Seconds a request may take: `--request-timeout` (`configured`, 0: none), shortened,
    never lengthened, by a valid positive `?timeout=` (upstream's `WithRequestDeadline`; an
    invalid one is the grammar's 400). O(1) for queries without `timeout=`, which most are."""
    if b"timeout=" not in query:
        return configured
    wanted = go_duration_seconds(parse_query(query).timeout)
    if wanted is not None and wanted > 0 and (not configured or wanted < configured):
        return wanted
    return configured


class Deadline:
    """The whole request's deadline: past it the request's task is cancelled (the gate, the
    backend call, the rendering stop) and, if no response has started, answered with a 504.
    Not one `asyncio.timeout` per request (a timer started and stopped each time costs ~5 µs
    on a ~25 µs path): the task is registered with its deadline and `_sweep` cancels overdue
    tasks, at most `_SWEEP_INTERVAL` late. O(1) per request."""

    __slots__ = (
        "_deadlines",
        "_expired",
        "_interval",
        "_sweeper",
        "_sweeper_loop",
        "app",
        "seconds",
    )

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds
        #: requests under a deadline (task -> loop time), and those `_sweep` cancelled
        self._deadlines: dict[asyncio.Task[Any], float] = {}
        self._expired: set[asyncio.Task[Any]] = set()
        self._sweeper: asyncio.TimerHandle | None = None
        self._sweeper_loop: asyncio.AbstractEventLoop | None = None
        # Finer for a configured deadline shorter than the sweep interval (a 100ms
        # `--request-timeout` is enforced within about 100ms, not a whole sweep later); never 0
        # (`--request-timeout=0` with a `?timeout=` still needs a sweeper).
        self._interval = min(_SWEEP_INTERVAL, seconds or _SWEEP_INTERVAL)

    @property
    def pending(self) -> int:
        """Requests registered with the sweeper now (a self-metric: a leak shows here)."""
        return len(self._deadlines)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        seconds = self.seconds
        query = scope["query_string"]
        if b"timeout=" in query:  # inlined pre-check: most requests skip the call
            seconds = request_deadline(seconds, query)
        task = asyncio.current_task()
        if not seconds or task is None:
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        self._deadlines[task] = loop.time() + seconds
        if self._sweeper is None or self._sweeper_loop is not loop:  # (tests change loops)
            self._sweeper_loop = loop
            self._sweeper = loop.call_later(self._interval, self._sweep)
        try:
            await self.app(scope, receive, send)
        except asyncio.CancelledError:
            if task not in self._expired:
                raise  # not ours (shutdown, client gone): let it through
            task.uncancel()
            logger.warning(
                "request %s %s exceeded its deadline (%gs)",
                scope["method"],
                scope["path"][:200],
                seconds,
            )
            if not exchange_of(scope).status:
                await reject(scope, send, request_timeout())
        finally:
            self._deadlines.pop(task, None)
            self._expired.discard(task)

    def _sweep(self) -> None:
        """Cancel the requests past their deadline; re-arm while any request is registered."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        for task, deadline in list(self._deadlines.items()):
            if deadline <= now and task not in self._expired:
                self._expired.add(task)
                task.cancel()
        self._sweeper = None
        if self._deadlines:
            self._sweeper = loop.call_later(self._interval, self._sweep)


class UriBound:
    """A path plus query over `MAX_URI_BYTES` is a 414, before authentication, as Go's server
    bounds the request head before any handler runs."""

    __slots__ = ("app",)

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        size = len(scope.get("raw_path") or scope["path"]) + len(scope["query_string"])
        if size > MAX_URI_BYTES:
            await reject(scope, send, uri_too_long(size))
            return
        await self.app(scope, receive, send)


class GateFilter:
    """Authentication and authorization (`security.gate`): nothing below it, not even a 404
    or a grammar error, is revealed to a caller who may not see it. Its 401 and 403 are
    negotiated like data upstream (`ErrorNegotiated`): protobuf if asked."""

    __slots__ = ("app", "gate")

    def __init__(self, app: ASGIApp, gate: Gate) -> None:
        self.app = app
        self.gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        rejection = await self.gate.check(scope)
        if rejection is not None:
            await reject(scope, send, rejection, negotiate=True)
            return
        await self.app(scope, receive, send)


#: A handler at the end of the chain: it answers everything itself (Status errors included).
Handler = Callable[[Scope, Send], Awaitable[None]]


class PathRouter:
    """One routing decision by path: a path under `/apis` is split into its segments once
    (`api.grammar.split_api_path`), kept in the scope under `SEGMENTS_KEY` for the handler's
    grammar, and its first segment (the group) chooses the handler: a group in `groups` (the
    Resource Metrics API, when served) or else the custom and external metrics APIs; then the
    demo's `/api` subset (when served), and everything else to the FastAPI shell.
    O(len(path)) for the split, O(1) for the choice."""

    __slots__ = ("api", "core_api", "groups", "is_core_api_path", "shell")

    def __init__(
        self,
        *,
        api: Handler,
        shell: ASGIApp,
        groups: Mapping[str, Handler] | None = None,
        core_api: tuple[Callable[[str], bool], Handler] | None = None,
    ) -> None:
        self.api = api
        self.shell = shell
        #: `/apis/<group>...` answered by another handler than `api`
        self.groups: dict[str, Handler] = dict(groups or {})
        # None when not served: the hot path then skips the check without a call.
        self.core_api: Handler | None = None
        self.is_core_api_path: Callable[[str], bool] = _never
        if core_api is not None:
            self.is_core_api_path, self.core_api = core_api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        segments = split_api_path(path)
        if segments is not None:
            scope[SEGMENTS_KEY] = segments
            handler = self.groups.get(segments[0]) if segments and self.groups else None
            await (self.api if handler is None else handler)(scope, send)
        elif self.core_api is not None and self.is_core_api_path(path):
            await self.core_api(scope, send)
        else:
            await self.shell(scope, receive, send)


def _never(_: str) -> bool:
    return False
