"""The cold routes, on FastAPI: health, version, self-metrics, `/metrics/resources` and
OpenAPI. The application's lifespan is the composition root's (`app.Server`), not FastAPI's.

FastAPI's own docs, `/openapi.json` and trailing-slash redirects are off: they are not part of
a Kubernetes API server's surface. Errors are `Status` bodies from the one renderer
(`api.status`), a path outside every route Go's plain `404 page not found`.
"""

from __future__ import annotations

import logging
import platform
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from custom_metrics_server import __version__
from custom_metrics_server.api import openapi, wire
from custom_metrics_server.api.status import status_response
from custom_metrics_server.domain import Readiness
from custom_metrics_server.errors import BadRequest, StatusError, internal_error, method_not_allowed
from custom_metrics_server.runtime.asgi import NOT_FOUND_TEXT
from custom_metrics_server.server import health
from custom_metrics_server.server.observability import EXPOSITION_CONTENT_TYPE, ServerMetrics
from custom_metrics_server.server.streaming import accepts_gzip, gzipped, paced

__all__ = ["build_shell", "version_info"]

logger = logging.getLogger(__name__)

_JSON_HEADERS = {"cache-control": "no-cache, private", "x-content-type-options": "nosniff"}


def _status_response(error: StatusError) -> Response:
    body, headers = status_response(error)
    decoded = {name.decode(): value.decode() for name, value in headers}
    return Response(body, status_code=error.code, headers=decoded)


def _not_found() -> Response:
    return PlainTextResponse(NOT_FOUND_TEXT.decode(), status_code=404)


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


def build_shell(
    *,
    title: str,
    metrics: ServerMetrics,
    checks: Callable[[str], Mapping[str, Readiness]],
    resource_exposition: Callable[[], Iterator[bytes]] | None,
    with_metrics_api: bool,
) -> FastAPI:
    """The FastAPI app of the cold routes. `checks(endpoint)` gives the named checks of
    `/healthz`, `/livez` or `/readyz`."""
    shell = FastAPI(
        title=title,
        version=__version__,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        redirect_slashes=False,
    )

    async def on_http_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 404:
            return _not_found()
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
    async def resource_metrics(request: Request) -> Response:
        if resource_exposition is None:
            return _not_found()
        # Streamed (never a whole body in memory) and gzipped for Prometheus, which asks for it.
        chunks = resource_exposition()
        headers = {"vary": "Accept-Encoding"}
        if accepts_gzip(request.headers.get("accept-encoding", "")):
            chunks = gzipped(chunks)
            headers["content-encoding"] = "gzip"
        return StreamingResponse(paced(chunks), media_type=EXPOSITION_CONTENT_TYPE, headers=headers)

    spec_v2 = orjson.dumps(openapi.build_v2(title=title, metrics_api=with_metrics_api))
    spec_v3 = {
        gv: orjson.dumps(doc)
        for gv, doc in openapi.build_v3(title=title, metrics_api=with_metrics_api).items()
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
            return _not_found()
        return Response(body, media_type="application/json", headers=_JSON_HEADERS)

    return shell
