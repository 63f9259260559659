"""A Prometheus that misbehaves (checklist item 35 of security.md §6): a local HTTP server
speaking the Prometheus API wire format, answering what a test tells it to, through the real
app. Every answer must be a Kubernetes Status with the right code, never a traceback or 500
for the engine's faults; the next good answer is served again."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from custom_metrics_server.prometheus import backend as backend_module
from custom_metrics_server.prometheus.backend import PrometheusBackend
from custom_metrics_server.server.app import create_app
from tests.prometheus.conftest import fixture_cluster, settings_for

RULES = """
rules:
- seriesQuery: 'requests_total{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  name: {matches: "^(.*)_total$", as: "${1}_per_second"}
  metricsQuery: 'sum(rate(<<.Series>>{<<.LabelMatchers>>}[2m])) by (<<.GroupBy>>)'
externalRules:
- seriesQuery: 'queue_depth{namespace!=""}'
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (queue)'
"""
SERIES = [
    {"__name__": "requests_total", "namespace": "default", "pod": "web-0"},
    {"__name__": "queue_depth", "namespace": "default", "queue": "a"},
]


def vector(*items: tuple[dict[str, str], Any]) -> bytes:
    result = [{"metric": labels, "value": [time.time(), value]} for labels, value in items]
    return json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": result}}
    ).encode()


class _Handler(BaseHTTPRequestHandler):
    answer: ClassVar[tuple[int, bytes, float]] = (200, vector(), 0.0)
    # Answers served before `answer`, one per query (to test retries).
    first: ClassVar[list[tuple[int, bytes, float]]] = []
    queries: ClassVar[int] = 0
    # The Accept-Encoding and the PromQL of each query.
    encodings: ClassVar[list[str]] = []
    promql: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        self.rfile.read(length)
        self._serve()

    def _serve(self) -> None:
        if self.path.startswith("/api/v1/series"):
            status, body, delay = (
                200,
                json.dumps({"status": "success", "data": SERIES}).encode(),
                0.0,
            )
        else:
            cls = type(self)
            cls.queries += 1
            cls.encodings.append(self.headers.get("Accept-Encoding", ""))
            cls.promql.extend(parse_qs(urlsplit(self.path).query).get("query", []))
            status, body, delay = cls.first.pop(0) if cls.first else cls.answer
        time.sleep(delay)
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the slow-answer test's client gave up first, as it should

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture(scope="module")
def fake() -> Iterator[tuple[str, type[_Handler]]]:
    handler = type("Handler", (_Handler,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


@pytest.fixture
async def client(fake: tuple[str, type[_Handler]]) -> AsyncIterator[httpx.AsyncClient]:
    url, _ = fake
    backend = PrometheusBackend(
        fixture_cluster(), settings_for(url, RULES, query_timeout=1.0, retries=0)
    )
    app = create_app(cluster=backend.cluster, backends=[backend])
    transport = httpx.ASGITransport(app=app)
    async with backend, httpx.AsyncClient(transport=transport, base_url="https://t") as http:
        await backend.relist()
        yield http


POD = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/web-0/requests_per_second"
WEB0 = {"namespace": "default", "pod": "web-0"}


@pytest.mark.parametrize(
    ("status", "body", "code", "reason", "phrase"),
    [
        (200, b"<html>proxy error</html>", 503, "ServiceUnavailable", "malformed body"),
        (
            200,
            b'{"status":"success","data":{"resultType":"vector","result":"x"}}',
            503,
            "ServiceUnavailable",
            "malformed query answer",
        ),
        (200, b'{"status":"success","data":[]}', 503, "ServiceUnavailable", "no data object"),
        (
            200,
            b'{"status":"success","data":{"resultType":"matrix","result":[]}}',
            500,
            "InternalError",
            "returned a matrix, not an instant vector",
        ),
        (503, b"upstream connect error", 503, "ServiceUnavailable", "answered 503"),
        (401, b"Unauthorized", 503, "ServiceUnavailable", "answered 401"),
        (
            422,
            b'{"status":"error","errorType":"execution","error":"many-to-many matching"}',
            500,
            "InternalError",
            "many-to-many matching",
        ),
        (
            503,
            b'{"status":"error","errorType":"timeout","error":"query timed out"}',
            504,
            "Timeout",
            "query timed out",
        ),
    ],
)
async def test_engine_faults_map_to_status(
    client: httpx.AsyncClient,
    fake: tuple[str, type[_Handler]],
    status: int,
    body: bytes,
    code: int,
    reason: str,
    phrase: str,
) -> None:
    _, handler = fake
    handler.answer = (status, body, 0.0)
    response = await client.get(POD)
    assert response.status_code == code, response.text
    document = response.json()
    assert document["kind"] == "Status"
    assert document["reason"] == reason
    assert phrase in document["message"]
    assert "Traceback" not in response.text
    handler.answer = (200, vector((WEB0, "1.5")), 0.0)
    recovered = await client.get(POD)
    assert recovered.status_code == 200
    assert recovered.json()["items"][0]["value"] == "1500m"


@pytest.mark.parametrize(
    "items",
    [
        [(WEB0, "NaN")],
        [(WEB0, "+Inf")],
        [(WEB0, "-Inf")],
        [(WEB0, "not a number")],
        [(WEB0, None)],
        [({"namespace": "default", "pod": "other"}, "1")],
        [({"namespace": "shop", "pod": "web-0"}, "1")],  # wrong namespace: not this object
    ],
)
async def test_unusable_values_are_absent_not_errors(
    client: httpx.AsyncClient, fake: tuple[str, type[_Handler]], items: list[Any]
) -> None:
    _, handler = fake
    handler.answer = (200, vector(*items), 0.0)
    response = await client.get(POD)
    assert response.status_code == 404
    assert response.json()["reason"] == "NotFound"


async def test_malformed_series_entries_are_skipped(
    client: httpx.AsyncClient, fake: tuple[str, type[_Handler]]
) -> None:
    _, handler = fake
    body = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                "junk",
                {"metric": "junk", "value": [1, "1"]},
                {"metric": WEB0, "value": "junk"},
                {"metric": WEB0, "value": [time.time(), "123456789012345678901234567890"]},
            ],
        },
    }
    handler.answer = (200, json.dumps(body).encode(), 0.0)
    response = await client.get(POD)
    assert response.status_code == 200
    assert response.json()["items"][0]["value"] == "123456789012345678901234567890"


async def test_a_slow_engine_is_a_504(
    client: httpx.AsyncClient, fake: tuple[str, type[_Handler]]
) -> None:
    _, handler = fake
    handler.answer = (200, vector((WEB0, "1")), 2.0)
    response = await client.get(POD)
    assert response.status_code == 504
    assert response.json()["reason"] == "Timeout"
    assert "did not answer within 1s" in response.json()["message"]
    handler.answer = (200, vector((WEB0, "1")), 0.0)


async def test_only_answers_of_several_objects_are_compressed(
    client: httpx.AsyncClient, fake: tuple[str, type[_Handler]]
) -> None:
    """One object's answer is one series: gzip would cost Prometheus more CPU than the
    whole query (docs/performance.md); a wildcard's answer may be large, so it is asked for."""
    _, handler = fake
    handler.answer = (200, vector((WEB0, "1")), 0.0)
    handler.encodings.clear()
    assert (await client.get(POD)).status_code == 200
    wildcard = POD.replace("/web-0/", "/*/")
    assert (await client.get(wildcard)).status_code == 200
    assert handler.encodings == ["", "gzip"]


async def test_rendered_queries_are_reused_until_the_rules_change(
    fake: tuple[str, type[_Handler]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The PromQL of a request shape is rendered once (`_custom_query`), then sent as is; a
    reload with another metricsQuery sends the new one at once (the relist it triggers empties
    the memo), and the memo never holds more than its bound."""
    url, handler = fake
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    backend = PrometheusBackend(
        fixture_cluster(), settings_for(url, rules, query_timeout=1.0, retries=0)
    )
    app = create_app(cluster=backend.cluster, backends=[backend])
    monkeypatch.setattr(backend_module, "_QUERY_CACHE", 3)
    async with (
        backend,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://t") as http,
    ):
        await backend.relist()
        handler.answer = (200, vector((WEB0, "1")), 0.0)
        handler.promql.clear()
        for _ in range(2):
            assert (await http.get(POD)).json()["items"][0]["windowSeconds"] == 120
        one_pod = 'sum(rate(requests_total{namespace="default",pod="web-0"}[2m])) by (pod)'
        assert handler.promql == [one_pod, one_pod]
        rules.write_text(RULES.replace("[2m]", "[5m]"))
        assert await backend.reload()
        await backend.relist()
        handler.promql.clear()
        assert (await http.get(POD)).json()["items"][0]["windowSeconds"] == 300
        assert handler.promql == [one_pod.replace("[2m]", "[5m]")]
        for pod in ("web-1", "web-2", "api-0", "idle-0"):
            await http.get(POD.replace("/web-0/", f"/{pod}/"))
            # At most the bound (a background relist after the reload may empty it meanwhile).
            assert len(backend._queries) <= 3


async def test_external_values_with_odd_labels(
    client: httpx.AsyncClient, fake: tuple[str, type[_Handler]]
) -> None:
    _, handler = fake
    labels = {"queue": 'a"b\\c\u2028</script>', "namespace": "default"}
    handler.answer = (200, vector((labels, "3")), 0.0)
    response = await client.get(
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/queue_depth"
    )
    assert response.status_code == 200
    assert response.json()["items"][0]["metricLabels"] == labels


async def test_transient_failures_are_retried(fake: tuple[str, type[_Handler]]) -> None:
    url, handler = fake
    backend = PrometheusBackend(
        fixture_cluster(), settings_for(url, RULES, query_timeout=1.0, retries=2)
    )
    app = create_app(cluster=backend.cluster, backends=[backend])
    transport = httpx.ASGITransport(app=app)
    async with backend, httpx.AsyncClient(transport=transport, base_url="https://t") as client:
        await backend.relist()
        handler.answer = (200, vector((WEB0, "2")), 0.0)
        handler.first = [(503, b"busy", 0.0), (502, b"bad gateway", 0.0)]
        before = handler.queries
        response = await client.get(POD)
        assert response.status_code == 200
        assert response.json()["items"][0]["value"] == "2"
        assert handler.queries - before == 3
        # a rejected query is not retried
        handler.first = [
            (400, b'{"status":"error","errorType":"bad_data","error":"parse error"}', 0.0)
        ]
        before = handler.queries
        assert (await client.get(POD)).status_code == 500
        assert handler.queries - before == 1
