"""Composition root: wires the cluster view, backends, query engine and HTTP surfaces.

`create_app()` returns one ASGI callable. Requests under `/apis` go straight to the lean
`endpoints.ApiEndpoints` handler (the hot path); everything else goes to a FastAPI shell that
serves health, version, self-metrics and OpenAPI and owns the lifespan, in which the security
jobs (the authentication ConfigMap follower) and every backend are entered (started) and left
(stopped). FastAPI's own docs, `/openapi.json` and trailing-slash redirects are disabled: they
are not part of a Kubernetes API server's surface.

Around everything (`Server._limited`): the in-flight limit (`--max-requests-inflight`, 429
with `Retry-After: 1`, health probes exempt), the request deadline (`--request-timeout`, or a
shorter `?timeout=`; 504, the work cancelled), the URL size bound (414), and during shutdown
`Connection: close` on every response and a failing `shutdown` readiness check
(`begin_shutdown`, called by the CLI on SIGTERM). See docs/operations.md.

Every HTTP request passes the security gate first (`security.gate`: authentication, header
stripping, authorization; see docs/security.md), so nothing below it, not even a 404 or a
grammar error, is revealed to a caller that is not allowed to see it. WebSocket scopes are
closed unanswered (uvicorn then answers 403): this API has no streaming endpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import platform
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from custom_metrics_server import __version__
from custom_metrics_server.api import openapi, wire
from custom_metrics_server.api.core_api import is_core_api_path
from custom_metrics_server.api.grammar import duration_seconds, is_api_path, parse_query
from custom_metrics_server.domain import Readiness
from custom_metrics_server.errors import (
    MAX_URI_BYTES,
    BadRequest,
    StatusError,
    internal_error,
    method_not_allowed,
    request_timeout,
    too_many_requests,
    uri_too_long,
)
from custom_metrics_server.query.engine import QueryEngine
from custom_metrics_server.runtime.tasks import background
from custom_metrics_server.sdk.backend import ClusterView, MetricsBackend
from custom_metrics_server.security.gate import AllowAllGate, Gate
from custom_metrics_server.server import health
from custom_metrics_server.server.endpoints import (
    ApiEndpoints,
    Message,
    Scope,
    Send,
    request_header,
    send_body,
    status_response,
)
from custom_metrics_server.server.observability import EXPOSITION_CONTENT_TYPE, ServerMetrics

if TYPE_CHECKING:
    from custom_metrics_server.api.core_api import DemoCoreApi
    from custom_metrics_server.compute.metrics_api import ResourceMetricsApi
    from custom_metrics_server.security.options import SecurityConfig

logger = logging.getLogger(__name__)

_JSON_HEADERS = {"cache-control": "no-cache, private", "x-content-type-options": "nosniff"}


@dataclass
class AppSettings:
    """What the HTTP layer needs to know; the CLI fills it from flags."""

    server_address: str = ""
    backend_timeout: float = 10.0
    title: str = "custom-metrics-server"
    extra_checks: dict[str, Readiness] = field(default_factory=dict)
    #: `--max-requests-inflight`: concurrent requests beyond it get 429 (0: no limit).
    max_requests_inflight: int = 400
    #: `--request-timeout` in seconds: the whole request's deadline, then 504 (0: none).
    request_timeout: float = 60.0
    #: Renders the KEP-1748 `/metrics/resources` exposition; None: the endpoint is a 404.
    resource_exposition: Callable[[], bytes] | None = None
    #: Serves `metrics.k8s.io/v1beta1` (`kubectl top`); None: the group is not served.
    metrics_api: ResourceMetricsApi | None = None
    #: The demo's read-only `/api` nodes and pods (what `kubectl top` reads besides
    #: metrics.k8s.io); never set outside `--demo`.
    demo_core_api: DemoCoreApi | None = None


def _status_response(error: StatusError) -> Response:
    headers = {**_JSON_HEADERS, **{k.lower(): v for k, v in error.headers.items()}}
    return Response(
        wire.status(error), status_code=error.code, media_type="application/json", headers=headers
    )


def _json_response(document: Any) -> Response:
    return Response(wire.dumps(document), media_type="application/json", headers=_JSON_HEADERS)


def version_info() -> dict[str, str]:
    """`/version`, shaped like Kubernetes' `version.Info`."""
    major, minor, *_ = __version__.split(".")
    machine = platform.machine().lower().replace("x86_64", "amd64").replace("aarch64", "arm64")
    return {
        "major": major,
        "minor": minor,
        "gitVersion": f"v{__version__}",
        "gitCommit": "",
        "gitTreeState": "",
        "buildDate": "",
        "goVersion": f"python{platform.python_version()}",
        "compiler": sys.implementation.name,
        "platform": f"{sys.platform}/{machine}",
    }


def _build_shell(
    engine: QueryEngine,
    metrics: ServerMetrics,
    settings: AppSettings,
    security: SecurityConfig | None,
    extra_checks: dict[str, Readiness],
) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(
                background(metrics.watch_loop_lag(), name="event-loop-lag")
            )
            if security is not None:
                await stack.enter_async_context(security.lifespan())
            for backend in engine.backends:
                await stack.enter_async_context(backend)
                logger.info("backend %s started", backend.name)
            yield
        logger.info("backends stopped")

    shell = FastAPI(
        title=settings.title,
        version=__version__,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        redirect_slashes=False,
        lifespan=lifespan,
    )

    async def on_http_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 404:
            return PlainTextResponse("404 page not found\n", status_code=404)
        if exc.status_code == 405:
            return _status_response(method_not_allowed())
        return _status_response(BadRequest(str(exc.detail)))

    async def on_validation_error(_: Request, exc: Exception) -> Response:
        return _status_response(BadRequest(str(exc)))

    async def on_status_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, StatusError)
        return _status_response(exc)

    async def on_bug(request: Request, exc: Exception) -> Response:
        logger.error("request %s %s failed", request.method, request.url.path, exc_info=exc)
        return _status_response(internal_error())

    shell.add_exception_handler(StarletteHTTPException, on_http_error)
    shell.add_exception_handler(RequestValidationError, on_validation_error)
    shell.add_exception_handler(StatusError, on_status_error)
    shell.add_exception_handler(Exception, on_bug)

    def checks(endpoint: str) -> dict[str, Readiness]:
        found = {"ping": Readiness(ready=True)}
        if endpoint == "readyz":
            found.update(engine.readiness())
            found.update(extra_checks)
        return found

    def health_route(endpoint: str) -> None:
        async def whole(request: Request) -> Response:
            params = request.query_params
            status, body = health.render(
                endpoint,
                checks(endpoint),
                verbose="verbose" in params,
                exclude=frozenset(params.getlist("exclude")),
            )
            return PlainTextResponse(
                body, status_code=status, headers={"x-content-type-options": "nosniff"}
            )

        async def single(check: str) -> Response:
            status, body = health.render(endpoint, checks(endpoint), verbose=False, only=check)
            return PlainTextResponse(body, status_code=status)

        shell.add_api_route(f"/{endpoint}", whole, methods=["GET"], include_in_schema=False)
        shell.add_api_route(
            f"/{endpoint}/{{check}}", single, methods=["GET"], include_in_schema=False
        )

    for endpoint in ("healthz", "livez", "readyz"):
        health_route(endpoint)

    @shell.get("/version", include_in_schema=False)
    async def version() -> Response:
        return _json_response(version_info())

    @shell.get("/metrics", include_in_schema=False)
    async def self_metrics() -> Response:
        return Response(metrics.exposition(), media_type=EXPOSITION_CONTENT_TYPE)

    @shell.get("/metrics/resources", include_in_schema=False)
    async def resource_metrics() -> Response:
        if settings.resource_exposition is None:
            return PlainTextResponse("404 page not found\n", status_code=404)
        return Response(settings.resource_exposition(), media_type=EXPOSITION_CONTENT_TYPE)

    with_metrics_api = settings.metrics_api is not None
    spec_v2 = orjson.dumps(openapi.build_v2(title=settings.title, metrics_api=with_metrics_api))
    spec_v3 = {
        gv: orjson.dumps(doc)
        for gv, doc in openapi.build_v3(title=settings.title, metrics_api=with_metrics_api).items()
    }
    v3_root = orjson.dumps(openapi.v3_root(spec_v3))

    @shell.get("/openapi/v2", include_in_schema=False)
    async def openapi_v2() -> Response:
        return Response(spec_v2, media_type="application/json", headers=_JSON_HEADERS)

    @shell.get("/openapi/v3", include_in_schema=False)
    async def openapi_v3() -> Response:
        return Response(v3_root, media_type="application/json", headers=_JSON_HEADERS)

    @shell.get("/openapi/v3/apis/{group}/{version}", include_in_schema=False)
    async def openapi_v3_group(group: str, version: str) -> Response:
        body = spec_v3.get(f"apis/{group}/{version}")
        if body is None:
            return PlainTextResponse("404 page not found\n", status_code=404)
        return Response(body, media_type="application/json", headers=_JSON_HEADERS)

    return shell


_REJECTION_VERBS = {"GET": "get", "HEAD": "get"}
#: Exempt from the in-flight limit, as upstream exempts its health checks: a probe must not
#: fail (and take the pod out of rotation) just because the server is busy.
_HEALTH_PATHS = frozenset({"/healthz", "/livez", "/readyz"})
_HEALTH_PREFIXES = ("/healthz/", "/livez/", "/readyz/")


#: How late `--request-timeout` may fire, at most (seconds).
_SWEEP_INTERVAL = 0.5


def _exempt_from_limit(path: str) -> bool:
    return path in _HEALTH_PATHS or path.startswith(_HEALTH_PREFIXES)


async def _closing_send(send: Send, message: Message) -> None:
    """Adds `Connection: close` to the response head (uvicorn then closes after the body)."""
    if message["type"] == "http.response.start":
        message = {**message, "headers": [*message.get("headers", ()), (b"connection", b"close")]}
    await send(message)


def request_deadline(configured: float, query: bytes) -> float:
    """Seconds a request may take: `--request-timeout` (`configured`, 0: none), shortened,
    never lengthened, by a valid positive `?timeout=` (upstream's `WithRequestDeadline`; an
    invalid one is the grammar's 400). O(1) for queries without `timeout=`, which most are."""
    if b"timeout=" not in query:
        return configured
    wanted = duration_seconds(parse_query(query).timeout)
    if wanted is not None and wanted > 0 and (not configured or wanted < configured):
        return wanted
    return configured


class _TrackedSend:
    """Wraps `send` to remember whether the response has started (a timeout can then only
    abandon the response, not replace it) and whether the `/apis` handler took the request
    (it then counts the request in the self-metrics itself, as a 504). A request that began
    before `begin_shutdown` still gets `Connection: close` if its response starts after it."""

    __slots__ = ("in_api", "send", "server", "started", "watch_shutdown")

    def __init__(self, send: Send, server: Server) -> None:
        self.send = send
        self.server = server
        self.started = False
        self.in_api = False
        # Requests that began during shutdown already go through `_closing_send`.
        self.watch_shutdown = not server.shutting_down

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            if self.watch_shutdown and self.server.shutting_down:
                await _closing_send(self.send, message)
                return
        await self.send(message)


class Server:
    """The ASGI application: the security gate, then the `/apis` hot path or the FastAPI shell."""

    def __init__(
        self,
        *,
        cluster: ClusterView,
        backends: Sequence[MetricsBackend],
        settings: AppSettings | None = None,
        security: SecurityConfig | None = None,
    ) -> None:
        self.settings = settings or AppSettings()
        self.security = security
        self.gate: Gate = security.gate if security is not None else AllowAllGate()
        self.metrics = ServerMetrics()
        for backend in backends:
            # Backends with self-metrics of their own (the Prometheus client's) expose them here.
            collector = getattr(backend, "collector", None)
            if callable(collector):
                self.metrics.registry.register(collector())
        self.engine = QueryEngine(
            cluster=cluster,
            backends=backends,
            backend_timeout=self.settings.backend_timeout,
            observe=self.metrics.observe_backend,
        )
        self.api = ApiEndpoints(
            engine=self.engine,
            metrics=self.metrics,
            server_address=self.settings.server_address,
            metrics_api=self.settings.metrics_api,
            demo_core_api=self.settings.demo_core_api,
        )
        # Read at scrape time only: leaks of requests, deadlines or tasks show on `/metrics`.
        self.metrics.track_server(
            inflight=lambda: self.inflight, deadlines=lambda: len(self._deadlines)
        )
        # `/readyz` checks beyond the engine's; `shutdown` as upstream's (fails once SIGTERM came).
        self.extra_checks = {**self.settings.extra_checks, "shutdown": Readiness(ready=True)}
        self.shell = _build_shell(
            self.engine, self.metrics, self.settings, security, self.extra_checks
        )
        #: Requests being served now that count against `max_requests_inflight`.
        self.inflight = 0
        #: Set by `begin_shutdown`: responses then carry `Connection: close`.
        self.shutting_down = False
        #: Requests under a deadline (task -> loop time), those `_sweep` cancelled, its timer.
        self._deadlines: dict[asyncio.Task[Any], float] = {}
        self._expired: set[asyncio.Task[Any]] = set()
        self._sweeper: asyncio.TimerHandle | None = None
        # Finer for short configured deadlines (tests); never 0 (`--request-timeout=0` with a
        # `?timeout=` still needs a sweeper).
        self._sweep_interval = min(
            _SWEEP_INTERVAL, self.settings.request_timeout or _SWEEP_INTERVAL
        )
        self._sweeper_loop: asyncio.AbstractEventLoop | None = None

    def begin_shutdown(self) -> None:
        """Termination has begun: `/readyz` fails at once (so endpoints drop this pod) while
        requests are still served, each answer closing its connection so clients reconnect
        to another replica."""
        self.shutting_down = True
        self.extra_checks["shutdown"] = Readiness(ready=False, reason="shutting down")

    async def __call__(self, scope: Scope, receive: Any, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._limited(scope, receive, send)
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        else:
            await self.shell(scope, receive, send)

    async def _limited(self, scope: Scope, receive: Any, send: Send) -> None:
        """The in-flight limit (before the gate, so authentication and SAR calls count, as
        upstream's filter sits before authorization), then the whole request's deadline."""
        limit = self.settings.max_requests_inflight
        if self.shutting_down:
            send = functools.partial(_closing_send, send)
        if _exempt_from_limit(scope["path"]):
            await self._deadline(scope, receive, send)
            return
        if limit and self.inflight >= limit:
            await self._reject(send, too_many_requests(), scope["method"], time.perf_counter())
            return
        self.inflight += 1
        try:
            await self._deadline(scope, receive, send)
        finally:
            self.inflight -= 1

    async def _deadline(self, scope: Scope, receive: Any, send: Send) -> None:
        """Serve with a deadline. Not one `asyncio.timeout` per request (a timer started and
        stopped each time costs ~5 us on a ~60 us path): the request's task is registered
        with its deadline, and `_sweep` cancels overdue tasks (at most `_SWEEP_INTERVAL` late).
        O(1) per request: two dict/set operations, no timer."""
        seconds = self.settings.request_timeout
        query = scope["query_string"]
        if b"timeout=" in query:  # inlined pre-check: most requests skip the call
            seconds = request_deadline(seconds, query)
        task = asyncio.current_task()
        if not seconds or task is None:
            # No deadline: still watch for a shutdown beginning mid-request (Connection: close).
            await self._http(scope, receive, _TrackedSend(send, self))
            return
        started = time.perf_counter()
        tracked = _TrackedSend(send, self)
        loop = asyncio.get_running_loop()
        self._deadlines[task] = loop.time() + seconds
        if self._sweeper is None or self._sweeper_loop is not loop:  # (tests change loops)
            self._sweeper_loop = loop
            self._sweeper = loop.call_later(self._sweep_interval, self._sweep)
        try:
            await self._http(scope, receive, tracked)
        except asyncio.CancelledError:
            if task not in self._expired:
                raise  # not ours (shutdown, client gone): let it through
            task.uncancel()
            # The work (gate, backend call, rendering) has been cancelled by now.
            logger.warning(
                "request %s %s exceeded its deadline (%gs)",
                scope["method"],
                scope["path"][:200],
                seconds,
            )
            if not tracked.started:
                await self._reject(
                    tracked, request_timeout(), scope["method"], started, observe=not tracked.in_api
                )
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
            self._sweeper = loop.call_later(self._sweep_interval, self._sweep)

    async def _http(self, scope: Scope, receive: Any, send: Send) -> None:
        started = time.perf_counter()
        # Before authentication, as Go's server bounds the head before any handler runs.
        size = len(scope.get("raw_path") or scope["path"]) + len(scope["query_string"])
        if size > MAX_URI_BYTES:
            await self._reject(send, uri_too_long(size), scope["method"], started)
            return
        rejection = await self.gate.check(scope)
        if rejection is not None:
            # 401/403 are negotiated like data upstream (`ErrorNegotiated`): protobuf if asked.
            accept = request_header(scope, b"accept")
            await self._reject(send, rejection, scope["method"], started, accept=accept)
            return
        path = scope["path"]
        if is_api_path(path) or (
            self.settings.demo_core_api is not None and is_core_api_path(path)
        ):
            if isinstance(send, _TrackedSend):
                send.in_api = True
            await self.api(scope, send)
            return
        await self.shell(scope, receive, send)

    async def _reject(
        self,
        send: Send,
        error: StatusError,
        method: str,
        started: float,
        *,
        observe: bool = True,
        accept: str = "",
    ) -> None:
        """A Status before any handler ran. JSON unless `accept` (given for the gate's
        rejections only; upstream writes its 429, 414 and 504 as JSON or text) asks for
        protobuf."""
        body, headers = status_response(error, accept)
        await send_body(send, error.code, body, headers)
        if not observe:
            return
        self.metrics.observe_request(
            group="",
            version="",
            resource="",
            verb=_REJECTION_VERBS.get(method, "other"),
            code=error.code,
            seconds=time.perf_counter() - started,
        )


def create_app(
    *,
    cluster: ClusterView,
    backends: Sequence[MetricsBackend],
    settings: AppSettings | None = None,
    security: SecurityConfig | None = None,
) -> Server:
    """Build the server's ASGI application (no `security`: the demo gate, everyone allowed)."""
    return Server(cluster=cluster, backends=backends, settings=settings, security=security)


__all__ = ["AppSettings", "Message", "Server", "create_app"]
