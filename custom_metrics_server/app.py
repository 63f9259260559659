"""Composition root: wires the cluster view, backends, query engine and HTTP surfaces.

`create_app()` returns one ASGI callable. Requests under `/apis` go straight to the lean
`endpoints.ApiEndpoints` handler (the hot path); everything else goes to a FastAPI shell that
serves health, version, self-metrics and OpenAPI and owns the lifespan, in which the security
jobs (the authentication ConfigMap follower) and every backend are entered (started) and left
(stopped). FastAPI's own docs, `/openapi.json` and trailing-slash redirects are disabled: they
are not part of a Kubernetes API server's surface.

Every HTTP request passes the security gate first (`security.gate`: authentication, header
stripping, authorization; see docs/security.md), so nothing below it, not even a 404 or a
grammar error, is revealed to a caller that is not allowed to see it. WebSocket scopes are
closed unanswered (uvicorn then answers 403): this API has no streaming endpoints.
"""

from __future__ import annotations

import contextlib
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

from custom_metrics_server import __version__, health, openapi, wire
from custom_metrics_server.backends.base import ClusterView, MetricsBackend
from custom_metrics_server.domain import Readiness
from custom_metrics_server.endpoints import ApiEndpoints, Message, Scope, Send, send_body
from custom_metrics_server.errors import (
    BadRequest,
    StatusError,
    internal_error,
    method_not_allowed,
)
from custom_metrics_server.grammar import is_api_path
from custom_metrics_server.observability import EXPOSITION_CONTENT_TYPE, ServerMetrics
from custom_metrics_server.query import QueryEngine
from custom_metrics_server.security.gate import AllowAllGate, Gate

if TYPE_CHECKING:
    from custom_metrics_server.security.options import SecurityConfig

logger = logging.getLogger(__name__)

_JSON_HEADERS = {"cache-control": "no-cache, private", "x-content-type-options": "nosniff"}
_REJECTION_HEADERS = (
    (b"content-type", b"application/json"),
    (b"cache-control", b"no-cache, private"),
    (b"x-content-type-options", b"nosniff"),
)


@dataclass
class AppSettings:
    """What the HTTP layer needs to know; the CLI fills it from flags."""

    server_address: str = ""
    backend_timeout: float = 10.0
    title: str = "custom-metrics-server"
    extra_checks: dict[str, Readiness] = field(default_factory=dict)
    #: Renders the KEP-1748 `/metrics/resources` exposition; None: the endpoint is a 404.
    resource_exposition: Callable[[], bytes] | None = None


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
) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
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
            found.update(settings.extra_checks)
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

    spec_v2 = orjson.dumps(openapi.build_v2(title=settings.title))
    spec_v3 = {gv: orjson.dumps(doc) for gv, doc in openapi.build_v3(title=settings.title).items()}
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
        self.engine = QueryEngine(
            cluster=cluster,
            backends=backends,
            backend_timeout=self.settings.backend_timeout,
            observe=self.metrics.observe_backend,
        )
        self.api = ApiEndpoints(
            engine=self.engine, metrics=self.metrics, server_address=self.settings.server_address
        )
        self.shell = _build_shell(self.engine, self.metrics, self.settings, security)

    async def __call__(self, scope: Scope, receive: Any, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            started = time.perf_counter()
            rejection = await self.gate.check(scope)
            if rejection is not None:
                await self._reject(send, rejection, scope["method"], started)
                return
            if is_api_path(scope["path"]):
                await self.api(scope, send)
                return
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await self.shell(scope, receive, send)

    async def _reject(self, send: Send, error: StatusError, method: str, started: float) -> None:
        headers = _REJECTION_HEADERS + tuple(
            (name.lower().encode(), value.encode()) for name, value in error.headers.items()
        )
        await send_body(send, error.code, wire.status(error), headers)
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
