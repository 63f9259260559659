"""Hypothesis: no path, query string or header makes the server answer 500 or a body that is
neither a Kubernetes Status nor Go's plain 404.

11,000 cases per run (8,000 requests, 3,000 header sets), about 20 s in process. The app runs
the demo gate (`AllowAllGate`), which strips credential and identity headers and refuses
impersonation and upgrades as the delegating gate does; the delegating gate's webhook paths are
covered by tests/security, not fuzzed here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from urllib.parse import quote

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import kubeproto
from tests.asgi import Reply, call, scope_for
from tests.conftest import contract_app

APP = contract_app()
PREFIXES = [
    "/apis",
    "/apis/custom.metrics.k8s.io",
    "/apis/custom.metrics.k8s.io/v1beta2",
    "/apis/custom.metrics.k8s.io/v1beta1",
    "/apis/custom-metrics/v1alpha1",
    "/apis/external.metrics.k8s.io/v1beta1",
    "/healthz",
    "/readyz",
    "/openapi",
    "/",
    "",
]
WORDS = [
    "namespaces",
    "ns",
    "metrics",
    "pods",
    "nodes",
    "*",
    "%2A",
    "some-metric",
    "foo",
    "deployments.apps",
    "status",
    "..",
    ".",
    "",
    "%2F",
    "%2e%2e",
    "%25",
    "%3F",
    "\u00e9",
    "%ff",
    "%00",
    "a b",
    "m?x",
    "default",
    "metric-status",
]
segment = st.one_of(st.sampled_from(WORDS), st.text(max_size=12).map(lambda s: quote(s, safe="*%")))
paths = st.builds(
    lambda prefix, segments, slash: (
        prefix + "".join("/" + s for s in segments) + ("/" if slash else "")
    ),
    st.sampled_from(PREFIXES),
    st.lists(segment, max_size=7),
    st.booleans(),
)
selector_text = st.one_of(
    st.sampled_from(
        [
            "1",
            "true",
            "json",
            "foo=bar",
            "=bar",
            "a in (b,c)",
            "!x",
            "x>1",
            "x<y",
            "a,b,",
            "a==b",
            "(",
            "a notin ()",
        ]
    ),
    st.text(max_size=20),
)
queries = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "labelSelector",
                "metricLabelSelector",
                "fieldSelector",
                "watch",
                "pretty",
                "x",
                "limit",
                "explain",
                "explain",
                "format",
            ]
        ),
        selector_text,
    ),
    max_size=4,
).map(lambda pairs: "&".join(f"{quote(k)}={quote(v)}" for k, v in pairs).encode())
accepts = st.one_of(
    st.none(),
    st.sampled_from(
        [
            "application/json",
            "*/*",
            "application/vnd.kubernetes.protobuf, */*",
            "application/vnd.kubernetes.protobuf",
            "application/json;q=0.5, application/vnd.kubernetes.protobuf",
            "text/html",
            "application/json;as=Table;v=v1;g=meta.k8s.io",
            "application/json;q=0",
            "application/*;q=0.5",
        ]
    ),
    st.text(max_size=30).filter(lambda s: s.isascii() and "\n" not in s and "\r" not in s),
)
methods = st.sampled_from(
    ["GET", "GET", "GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"]
)


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def check(reply: Reply) -> None:
    assert reply.status != 500, reply.body
    assert 200 <= reply.status < 600
    if reply.status < 400:
        if reply.headers.get("content-type") == "application/json" and reply.body:
            document = orjson.loads(reply.body)
            if isinstance(document, dict) and document.get("kind") == "MetricExplanation":
                outcome = document["outcome"]  # the plain answer's code and body
                assert outcome["code"] != 500, outcome
                assert "status" in outcome or outcome["code"] == 200
                if "status" in outcome:
                    assert outcome["status"]["kind"] == "Status"
                    assert outcome["status"]["code"] == outcome["code"]
        return
    if reply.headers.get("content-type", "").startswith("text/plain"):
        assert reply.status == 404
        assert reply.body == b"404 page not found\n"
        return
    if reply.headers["content-type"] == "application/vnd.kubernetes.protobuf":
        api_version, kind, decoded, raw = kubeproto.decode(reply.body)
        assert (api_version, kind) == ("v1", "Status")
        status = kubeproto.to_json_shape(decoded)
        assert kubeproto.canonical(decoded, raw)
    else:
        assert reply.headers["content-type"] == "application/json"
        reply.body.decode("utf-8")
        status = orjson.loads(reply.body)
        assert status["kind"] == "Status"
    assert status["code"] == reply.status
    assert status["message"]


# Thousands of requests over TLS: minutes on a busy machine; the hang guard gets room for that.
@pytest.mark.timeout(900)
@settings(
    max_examples=8000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(method=methods, path=paths, query=queries, accept=accepts)
def test_any_request_gets_a_well_formed_answer(
    loop: asyncio.AbstractEventLoop, method: str, path: str, query: bytes, accept: str | None
) -> None:
    raw_path = path.encode("utf-8")
    headers = [(b"accept", accept.encode())] if accept is not None else []
    reply = loop.run_until_complete(call(APP, scope_for(method, raw_path, query, headers)))
    check(reply)


HEADER_NAMES = [
    "authorization",
    "x-remote-user",
    "x-remote-group",
    "x-remote-uid",
    "x-remote-extra-scopes",
    "x-remote-extra-a%2Fb",
    "impersonate-user",
    "impersonate-group",
    "impersonate-uid",
    "impersonate-extra-scopes",
    "upgrade",
    "connection",
    "accept",
    "user-agent",
    "content-length",
    "transfer-encoding",
    "expect",
    "host",
    "cookie",
    "x-forwarded-for",
]
HEADER_VALUES = [
    "Bearer token",
    "Bearer ",
    "Basic Zm9vOmJhcg==",
    "websocket",
    "SPDY/3.1",
    "h2c",
    "Upgrade",
    "keep-alive, Upgrade",
    "system:masters",
    "",
    "100-continue",
    "chunked",
    "-1",
    "x" * 5000,
]
# What uvicorn can deliver: lower-case token names; values without CR, LF or NUL.
header_names = st.one_of(
    st.sampled_from(HEADER_NAMES), st.from_regex(r"[a-z0-9!#$%&'*+.^_`|~-]{1,24}", fullmatch=True)
)
header_values = st.one_of(
    st.sampled_from(HEADER_VALUES),
    st.binary(max_size=40).filter(lambda b: not any(c in b for c in b"\r\n\x00")),
)
header_lists = st.lists(
    st.tuples(
        header_names.map(str.encode),
        header_values.map(lambda v: v if isinstance(v, bytes) else v.encode()),
    ),
    max_size=8,
)
header_paths = st.sampled_from(
    [
        "/apis",
        "/apis/custom.metrics.k8s.io/v1beta2",
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns/pods/*/some-metric",
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/some-external",
        "/readyz",
        "/version",
        "/openapi/v2",
        "/nothing",
    ]
)


# Thousands of requests over TLS: minutes on a busy machine; the hang guard gets room for that.
@pytest.mark.timeout(900)
@settings(
    max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(method=methods, path=header_paths, headers=header_lists)
def test_any_headers_get_a_well_formed_answer(
    loop: asyncio.AbstractEventLoop, method: str, path: str, headers: list[tuple[bytes, bytes]]
) -> None:
    names = {name for name, _ in headers}
    reply = loop.run_until_complete(call(APP, scope_for(method, path.encode(), b"", headers)))
    check(reply)
    # The gate's refusals come first, whatever else the request says.
    if any(name.startswith(b"impersonate-") for name in names):
        assert reply.status == 403, reply.body
        assert b"impersonation is not supported by this server" in reply.body
    elif b"upgrade" in names:
        assert reply.status == 400, reply.body
        assert b"upgrade requests are not supported" in reply.body
    assert reply.status != 101
