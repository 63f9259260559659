"""Health bodies in the Go healthz format, and the served endpoints."""

from __future__ import annotations

import httpx

from custom_metrics_server.domain import Readiness
from custom_metrics_server.server.health import render

OK = Readiness(ready=True)
DOWN = Readiness(ready=False, reason="no series listing yet")


def test_healthy_is_plain_ok() -> None:
    assert render("readyz", {"ping": OK}, verbose=False) == (200, "ok")


def test_verbose_lists_each_check() -> None:
    assert render("readyz", {"ping": OK, "backend-x": OK}, verbose=True) == (
        200,
        "[+]ping ok\n[+]backend-x ok\nreadyz check passed\n",
    )


def test_failure_is_500_and_withholds_the_reason_unless_verbose() -> None:
    status, body = render("readyz", {"ping": OK, "backend-x": DOWN}, verbose=False)
    assert (status, body) == (
        500,
        "[+]ping ok\n[-]backend-x failed: reason withheld\nreadyz check failed\n",
    )
    assert "no series listing yet" in render("readyz", {"backend-x": DOWN}, verbose=True)[1]


def test_excluded_checks_do_not_count() -> None:
    checks = {"ping": OK, "backend-x": DOWN}
    assert render("readyz", checks, verbose=False, exclude=frozenset({"backend-x"})) == (200, "ok")
    assert render("readyz", checks, verbose=True, exclude=frozenset({"backend-x"})) == (
        200,
        "[+]ping ok\n[+]backend-x excluded: ok\nreadyz check passed\n",
    )


def test_single_check_endpoint() -> None:
    checks = {"ping": OK, "backend-x": DOWN}
    assert render("readyz", checks, verbose=False, only="ping") == (200, "ok")
    assert render("readyz", checks, verbose=False, only="backend-x")[0] == 500
    assert render("readyz", checks, verbose=False, only="nope")[0] == 404


async def test_served_health_version_and_metrics(asgi_client: httpx.AsyncClient) -> None:
    for endpoint in ("/healthz", "/livez", "/readyz", "/readyz/ping"):
        response = await asgi_client.get(endpoint)
        assert (response.status_code, response.text) == (200, "ok")
    verbose = await asgi_client.get("/readyz?verbose")
    assert verbose.text == (
        "[+]ping ok\n[+]cluster ok\n[+]backend-memory ok\n[+]shutdown ok\nreadyz check passed\n"
    )
    version = (await asgi_client.get("/version")).json()
    assert version["gitVersion"] == "v0.1.0"
    await asgi_client.get("/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns/pods/*/some-metric")
    await asgi_client.get("/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns/widgets/*/some-metric")
    metrics = (await asgi_client.get("/metrics")).text
    assert (
        'apiserver_request_total{code="200",group="custom.metrics.k8s.io",resource="pods",verb="get",version="v1beta2"} 1.0'
        in metrics
    )
    assert (
        'apiserver_request_total{code="404",group="custom.metrics.k8s.io",resource="other",verb="get",version="v1beta2"} 1.0'
        in metrics
    )
    assert (
        'custom_metrics_server_backend_fetch_duration_seconds_count{backend="memory",outcome="ok"} 1.0'
        in metrics
    )
    assert (
        'metrics_apiserver_metric_freshness_seconds_count{group="custom.metrics.k8s.io"} 1.0'
        in metrics
    )


async def test_fastapi_extras_are_not_exposed(asgi_client: httpx.AsyncClient) -> None:
    for path in ("/docs", "/redoc", "/openapi.json", "/healthz/", "/version/"):
        response = await asgi_client.get(path)
        assert response.status_code == 404, path
        assert response.text == "404 page not found\n"
    response = await asgi_client.post("/healthz")
    assert response.status_code == 405
    assert response.json()["reason"] == "MethodNotAllowed"


def test_a_ready_check_with_a_note_passes_and_shows_it_only_verbose() -> None:
    degraded = Readiness(ready=True, reason="listing of 'default' failing")
    assert render("readyz", {"ping": OK, "backend-p": degraded}, verbose=False) == (200, "ok")
    status, body = render("readyz", {"ping": OK, "backend-p": degraded}, verbose=True)
    assert status == 200
    assert "[+]backend-p ok (listing of 'default' failing)\n" in body
    assert body.endswith("readyz check passed\n")
