"""Unit tests of the security package: RequestInfo port, gate, caches, trust, flags, TLS reload."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import shutil
import ssl
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from custom_metrics_server.backends.memory import load_fixture
from custom_metrics_server.errors import StatusError
from custom_metrics_server.kube.client import KubeApiError, KubeClient
from custom_metrics_server.kube.config import Connection
from custom_metrics_server.machinery.gostrings import go_quote
from custom_metrics_server.runtime.tls import ReloadingServerContext
from custom_metrics_server.security.authn import (
    ANONYMOUS,
    Authenticator,
    TokenAuthenticator,
    bearer_token,
    unescape_extra_key,
)
from custom_metrics_server.security.authz import Authorizer, forbidden
from custom_metrics_server.security.cache import SingleFlight, TtlCache
from custom_metrics_server.security.extension_config import ExtensionConfigFollower
from custom_metrics_server.security.gate import DelegatingGate
from custom_metrics_server.security.options import (
    SecurityConfigError,
    add_security_flags,
    build_security,
    duration,
)
from custom_metrics_server.security.requestinfo import (
    RequestAttributes,
    SelectorRequirement,
    request_attributes,
)
from custom_metrics_server.security.trust import TrustStore
from custom_metrics_server.security.webhook import Backoff, should_retry
from custom_metrics_server.server.app import create_app
from tests.asgi import call, scope_for
from tests.conftest import CONTRACT_FIXTURE
from tests.security.pki import CA

P = "/apis/custom.metrics.k8s.io/v1beta2"

# --- RequestInfo ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/healthz", "", RequestAttributes(False, "/healthz", "get")),
        ("POST", "/apis", "", RequestAttributes(False, "/apis", "post")),
        ("GET", P, "", RequestAttributes(False, P, "get")),
        (
            "GET",
            f"{P}/namespaces/ns/status",
            "",
            RequestAttributes(
                True,
                f"{P}/namespaces/ns/status",
                "get",
                "custom.metrics.k8s.io",
                "v1beta2",
                "ns",
                "namespaces",
                "status",
                "ns",
            ),
        ),
        (
            "GET",
            f"{P}/namespaces/ns/metrics/m/extra",
            "",
            RequestAttributes(
                True,
                f"{P}/namespaces/ns/metrics/m/extra",
                "get",
                "custom.metrics.k8s.io",
                "v1beta2",
                "ns",
                "metrics",
                "extra",
                "m",
            ),
        ),
        (
            "GET",
            f"{P}/watch/pods",
            "labelSelector=a%3Db",
            RequestAttributes(
                True, f"{P}/watch/pods", "watch", "custom.metrics.k8s.io", "v1beta2", "", "pods"
            ),
        ),
        (
            "GET",
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/q",
            "watch=1&fieldSelector=metadata.name%3Dfoo",
            RequestAttributes(
                True,
                "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/q",
                "watch",
                "external.metrics.k8s.io",
                "v1beta1",
                "ns",
                "q",
                "",
                "foo",
                field_requirements=(SelectorRequirement("metadata.name", "In", ("foo",)),),
            ),
        ),
        (
            "GET",
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/q",
            "watch=false&limit=abc&watch=1",
            RequestAttributes(
                True,
                "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/q",
                "list",
                "external.metrics.k8s.io",
                "v1beta1",
                "ns",
                "q",
            ),
        ),
        (
            "GET",
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/q",
            # Not ASCII digits: Go's ParseInt refuses, so the options (and the name the field
            # selector pins) are reset and the selector rides along instead.
            "limit=%D9%A1&fieldSelector=metadata.name%3Dfoo",
            RequestAttributes(
                True,
                "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/q",
                "list",
                "external.metrics.k8s.io",
                "v1beta1",
                "ns",
                "q",
                field_requirements=(SelectorRequirement("metadata.name", "In", ("foo",)),),
            ),
        ),
        (
            "GET",
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/q",
            "watch=1&limit=-007&timeoutSeconds=+30",
            RequestAttributes(
                True,
                "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/q",
                "watch",
                "external.metrics.k8s.io",
                "v1beta1",
                "ns",
                "q",
            ),
        ),
        (
            "DELETE",
            "/api/v1/namespaces/ns/pods",
            "",
            RequestAttributes(
                True, "/api/v1/namespaces/ns/pods", "deletecollection", "", "v1", "ns", "pods"
            ),
        ),
    ],
)
def test_request_info_port(method: str, path: str, query: str, expected: RequestAttributes) -> None:
    assert request_attributes(method, path, query.encode()) == expected


def test_selector_requirements_ride_along_for_list_only() -> None:
    listed = request_attributes(
        "GET",
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/q",
        b"labelSelector=b!%3Dx,a,!c,n%3E3&fieldSelector=metadata.namespace!%3Dkube-system",
    )
    assert listed.sar_attributes()[1]["labelSelector"] == {
        "requirements": [
            {"key": "a", "operator": "Exists"},
            {"key": "b", "operator": "NotIn", "values": ["x"]},
            {"key": "c", "operator": "DoesNotExist"},
        ]
    }
    assert listed.sar_attributes()[1]["fieldSelector"] == {
        "requirements": [
            {"key": "metadata.namespace", "operator": "NotIn", "values": ["kube-system"]}
        ]
    }
    got = request_attributes("GET", f"{P}/namespaces/ns/pods/*/m", b"labelSelector=a%3Db")
    assert "labelSelector" not in got.sar_attributes()[1]


# --- messages and helpers ---------------------------------------------------------------------


def test_forbidden_messages_are_upstreams() -> None:
    attrs = request_attributes("GET", f"{P}/namespaces/a&b/pods/<x>/m<y>", b"")
    error = forbidden(attrs, 'al"ice')
    assert error.message == (
        'pods.custom.metrics.k8s.io "<x>" is forbidden: User "al\\"ice" cannot get resource '
        '"pods/m&lt;y&gt;" in API group "custom.metrics.k8s.io" in the namespace "a&amp;b"'
    )
    assert error.details == {"name": "<x>", "group": "custom.metrics.k8s.io", "kind": "pods"}
    assert forbidden(request_attributes("GET", "/openapi/v2", b""), "u").details == {}
    assert go_quote("tab\tand\x00") == '"tab\\tand\\x00"'


def test_bearer_and_extra_key_parsing() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer  abc") == ""  # the space-before-token case: no token
    assert bearer_token("Basic abc") == ""
    assert unescape_extra_key("foo%2fbar") == "foo/bar"
    assert unescape_extra_key("bad%zzkey") == "bad%zzkey"


def test_the_authorization_line_follows_the_token_and_refuses_a_broken_one(
    tmp_path: Path,
) -> None:
    assert Connection(host="https://k").authorization_line() == b""
    token = tmp_path / "token"
    token.write_text("first\n")
    connection = Connection(host="https://k", token_file=str(token))
    line = connection.authorization_line()
    assert line == b"Authorization: Bearer first\r\n"
    assert connection.authorization_line() is line  # built once while the token holds
    token.write_text("second")
    connection._token_cache = None  # the minute's re-read, now
    assert connection.authorization_line() == b"Authorization: Bearer second\r\n"
    with pytest.raises(ValueError, match="line break"):
        Connection(host="https://k", token="a\r\nX-Injected: 1").authorization_line()


def test_should_retry_follows_default_should_retry() -> None:
    assert should_retry(KubeApiError(500, "InternalError", "x"))
    assert should_retry(KubeApiError(429, "TooManyRequests", "x"))
    assert not should_retry(KubeApiError(403, "Forbidden", "x"))
    assert not should_retry(
        KubeApiError(0, "", "POST /x: ConnectError('[Errno 111] Connection refused')")
    )
    assert should_retry(KubeApiError(0, "", "POST /x: ReadError('reset')"))


def test_ttl_cache_expires_and_bounds() -> None:
    now = [0.0]
    cache: TtlCache[str, int] = TtlCache(2, clock=lambda: now[0])
    cache.put("a", 1, 10)
    cache.put("b", 2, 10)
    cache.put("c", 3, 10)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (None, 2, 3)
    now[0] = 10.0
    assert cache.get("b") is None


async def test_single_flight_shares_one_call() -> None:
    calls = 0

    async def slow() -> int:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.05)
        return 7

    flight: SingleFlight[str, int] = SingleFlight()
    assert await asyncio.gather(*(flight.do("k", slow) for _ in range(10))) == [7] * 10
    assert calls == 1


async def test_single_flight_gives_up_after_its_timeout_and_forgets_the_key() -> None:
    async def hangs() -> int:
        await asyncio.sleep(3600)
        return 0

    flight: SingleFlight[str, int] = SingleFlight(timeout=0.05)
    with pytest.raises(TimeoutError):
        await flight.do("k", hangs)
    assert flight._running == {}

    async def answers() -> int:
        return 3

    assert await flight.do("k", answers) == 3


# --- the gate in process ----------------------------------------------------------------------


class FakePoster:
    """A JsonPoster answering TokenReview/SAR from functions; records bodies."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.fail = False

    async def post_json_status(self, path: str, body: Any) -> tuple[int, Any]:
        self.bodies.append(body)
        if self.fail:
            raise KubeApiError(500, "InternalError", "boom")
        if body["kind"] == "TokenReview":
            ok = body["spec"]["token"] == "good"
            return 201, {"status": {"authenticated": ok, "user": {"username": "tina"}}}
        return 201, {"status": {"allowed": True}}


def delegating_app(poster: FakePoster) -> tuple[Any, list[dict[str, Any]]]:
    trust = TrustStore()
    tokens = TokenAuthenticator(poster, backoff=Backoff(0.001, 1, 0, 2))
    gate = DelegatingGate(
        Authenticator(trust, tokens=tokens), Authorizer(poster, backoff=Backoff(0.001, 1, 0, 2))
    )
    seen: list[dict[str, Any]] = []

    class Spy:
        """The gate, recording the scope it lets through: what the handler receives."""

        async def check(self, scope: dict[str, Any]) -> StatusError | None:
            rejection = await gate.check(scope)
            if rejection is None:
                seen.append(dict(scope))
            return rejection

    cluster, backend = load_fixture(yaml.safe_load(CONTRACT_FIXTURE.read_text()), now=time.time())
    app = create_app(cluster=cluster, backends=[backend], gate=Spy())
    return app, seen


async def test_credentials_never_reach_the_handler() -> None:
    poster = FakePoster()
    app, seen = delegating_app(poster)
    headers = [
        (b"authorization", b"Bearer good"),
        (b"x-remote-user", b"admin"),
        (b"x-remote-group", b"system:masters"),
        (b"x-remote-extra-scopes", b"x"),
        (b"x-remote-uid", b"0"),
        (b"accept", b"application/json"),
    ]
    reply = await call(
        app, scope_for("GET", f"{P}/namespaces/ns/pods/*/some-metric".encode(), headers=headers)
    )
    assert reply.status == 200
    (scope,) = seen
    assert scope["headers"] == [(b"accept", b"application/json")]
    assert scope["user"].name == "tina"
    sar = poster.bodies[-1]["spec"]
    assert sar["user"] == "tina"
    assert "extra" not in sar


async def test_the_gate_answers_before_the_grammar_reveals_anything() -> None:
    poster = FakePoster()
    app, seen = delegating_app(poster)
    bad = scope_for(
        "GET",
        f"{P}/namespaces/ns/pods/*/m".encode(),
        b"labelSelector=!!",
        [(b"authorization", b"Bearer bad")],
    )
    reply = await call(app, bad)
    assert reply.status == 401
    assert seen == []


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ((b"impersonate-group", b"system:masters"), 'groups "system:masters" is forbidden'),
        (
            (b"impersonate-user", b"system:serviceaccount:kube-system:x"),
            'serviceaccounts "x" is forbidden',
        ),
        ((b"impersonate-uid", b"1234"), 'uids.authentication.k8s.io "1234" is forbidden'),
        ((b"impersonate-extra-scopes", b"s"), 'userextras.authentication.k8s.io "s" is forbidden'),
    ],
)
async def test_impersonation_is_refused_in_every_form(
    header: tuple[bytes, bytes], message: str
) -> None:
    app, seen = delegating_app(FakePoster())
    reply = await call(app, scope_for("GET", P.encode(), headers=[header]))
    assert reply.status == 403
    assert json.loads(reply.body)["message"].startswith(message)
    assert seen == []


async def test_always_allow_paths_are_exact_unless_starred() -> None:
    poster = FakePoster()
    poster.fail = True
    authorizer = Authorizer(
        poster, always_allow_paths=["/healthz", "/metrics/*"], backoff=Backoff(0.001, 1, 0, 1)
    )
    for path in ("/healthz", "/metrics/x", "metrics/"):
        await authorizer.authorize(
            ANONYMOUS, request_attributes("GET", "/" + path.lstrip("/"), b"")
        )
    with pytest.raises(Exception, match="authorization check"):
        await authorizer.authorize(ANONYMOUS, request_attributes("GET", "/healthz/ping", b""))
    with pytest.raises(ValueError, match="only trailing"):
        Authorizer(None, always_allow_paths=["/a*b"])


async def test_websocket_scopes_are_closed() -> None:
    app, _ = delegating_app(FakePoster())
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "websocket", "path": P, "headers": []}, None, send)
    assert sent == [{"type": "websocket.close", "code": 1008}]


# --- flags and configuration ------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cert-dir", type=Path)
    parser.add_argument("--tls-cert-file", type=Path)
    parser.add_argument("--tls-private-key-file", type=Path)
    add_security_flags(parser)
    return parser


def test_flag_defaults_are_upstreams() -> None:
    args = parser().parse_args([])
    assert args.requestheader_username_headers == ["x-remote-user"]
    assert args.requestheader_group_headers == ["x-remote-group"]
    assert args.requestheader_extra_headers_prefix == ["x-remote-extra-"]
    assert args.requestheader_uid_headers == []
    assert args.requestheader_allowed_names == []
    assert args.authorization_always_allow_paths == ["/healthz", "/readyz", "/livez"]
    assert args.authentication_token_webhook_cache_ttl == 10.0
    assert args.authorization_webhook_cache_authorized_ttl == 10.0
    assert args.authorization_webhook_cache_unauthorized_ttl == 10.0
    assert args.anonymous_auth is True
    assert args.authentication_skip_lookup is False
    assert args.authentication_tolerate_lookup_failure is False


def test_slices_replace_then_append_and_booleans_parse() -> None:
    args = parser().parse_args(
        [
            "--requestheader-allowed-names=a,b",
            "--requestheader-allowed-names",
            "c",
            "--authorization-always-allow-paths=/healthz,/metrics",
            "--anonymous-auth=false",
            "--authentication-skip-lookup",
            "--authentication-token-webhook-cache-ttl=1m30s",
        ]
    )
    assert args.requestheader_allowed_names == ["a", "b", "c"]
    assert args.authorization_always_allow_paths == ["/healthz", "/metrics"]
    assert args.anonymous_auth is False
    assert args.authentication_skip_lookup is True
    assert args.authentication_token_webhook_cache_ttl == 90.0
    assert duration("500ms") == 0.5


def test_demo_without_auth_flags_allows_everyone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    config = build_security(parser().parse_args(["--cert-dir", str(tmp_path)]), demo=True)
    assert config.delegated is False
    assert config.context.listening.verify_mode == ssl.CERT_NONE


def test_outside_a_cluster_without_kubeconfig_fails_unless_demo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(SecurityConfigError, match="authentication-kubeconfig"):
        build_security(parser().parse_args(["--cert-dir", str(tmp_path)]), demo=False)
    ca = CA("client", tmp_path / "ca")
    config = build_security(
        parser().parse_args(["--cert-dir", str(tmp_path), "--client-ca-file", str(ca.cert_file)]),
        demo=True,
    )
    assert config.delegated is True
    assert config.context.listening.verify_mode == ssl.CERT_OPTIONAL
    with pytest.raises(SecurityConfigError):
        build_security(
            parser().parse_args(
                ["--cert-dir", str(tmp_path), "--client-ca-file", str(tmp_path / "missing")]
            ),
            demo=True,
        )


# --- TLS reload -------------------------------------------------------------------------------


def test_reloading_context_swaps_pairs_and_keeps_the_old_one_on_mismatch(tmp_path: Path) -> None:
    ca = CA("serving", tmp_path / "ca")
    first = ca.serving(("127.0.0.1",), file_name="first")
    second = ca.serving(("127.0.0.1",), file_name="second")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copyfile(first.cert_file, cert)
    shutil.copyfile(first.key_file, key)
    now = [0.0]
    context = ReloadingServerContext(cert, key, clock=lambda: now[0])
    original = context.current()
    shutil.copyfile(second.cert_file, cert)  # certificate only: mismatched with the key
    now[0] += 2
    assert context.current() is original
    shutil.copyfile(second.key_file, key)
    now[0] += 0.5
    assert context.current() is original  # at most one check per second
    now[0] += 1
    assert context.current() is not original
    assert context.reloads == 1


def test_trust_store_reloads_files_and_keeps_the_last_good(tmp_path: Path) -> None:
    one, two = CA("one", tmp_path / "a"), CA("two", tmp_path / "b")
    path = tmp_path / "client-ca.crt"
    shutil.copyfile(one.cert_file, path)
    now = [0.0]
    trust = TrustStore(clock=lambda: now[0])
    trust.watch_client_ca_file(path)
    version = trust.snapshot.version
    path.write_text("not a certificate")
    now[0] += 2
    assert trust.refresh().version == version
    shutil.copyfile(two.cert_file, path)
    now[0] += 2
    snapshot = trust.refresh()
    assert snapshot.version > version
    assert snapshot.client_ca == (two.cert,)
    assert snapshot.ca_pem == two.cert_pem


async def test_the_configmap_content_in_effect_is_logged_once_per_change_and_errors_once(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """Re-lists (every minute) and watch reconnects bring the same content back: one INFO line
    when it takes effect or changes; unusable content one ERROR line per distinct problem."""
    client = KubeClient(Connection(host="http://127.0.0.1:1"))
    follower = ExtensionConfigFollower(client, TrustStore(), client_ca=True, requestheader=True)
    first, second = CA("first", tmp_path), CA("second", tmp_path)
    data = {
        "client-ca-file": first.cert_pem.decode(),
        "requestheader-client-ca-file": second.cert_pem.decode(),
        "requestheader-allowed-names": '["front-proxy-client"]',
    }
    with caplog.at_level(logging.INFO, logger="custom_metrics_server.security"):
        for _ in range(3):
            follower.apply(dict(data))
        follower.apply({**data, "requestheader-allowed-names": '["aggregator"]'})
        for _ in range(3):
            follower.apply({**data, "client-ca-file": "not PEM"})
    await client.aclose()
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    name = "configmap kube-system/extension-apiserver-authentication"
    assert lines == [
        (
            "INFO",
            f"{name} read: client CA: 1 certificate(s); front-proxy CA: 1 certificate(s), "
            "allowed names: front-proxy-client",
        ),
        (
            "INFO",
            f"{name} changed: client CA: 1 certificate(s); front-proxy CA: 1 certificate(s), "
            "allowed names: aggregator",
        ),
        ("ERROR", lines[2][1]),
        (
            "INFO",
            f"{name} changed: client CA: 1 certificate(s); front-proxy CA: 1 certificate(s), "
            "allowed names: front-proxy-client",
        ),
    ]
    assert lines[2][1].startswith(f"{name}: keeping the last good client CA: client-ca-file")


async def test_review_calls_are_counted_and_timed_by_status_code() -> None:
    """Upstream's apiserver_delegated_{authn,authz}_request_total and _duration_seconds: one
    observation per call attempt, labelled by the HTTP status (`<error>` when none came)."""
    poster = FakePoster()
    tokens = TokenAuthenticator(poster, backoff=Backoff(0.001, 1, 0, 2))
    authorizer = Authorizer(poster, backoff=Backoff(0.001, 1, 0, 2))
    identity = await tokens.authenticate("good")
    await authorizer.authorize(identity, request_attributes("GET", P, b""))
    poster.fail = True  # a 500 InternalError: retried once (2 steps), then refused
    with pytest.raises(Exception, match="authorization check"):
        await authorizer.authorize(identity, request_attributes("GET", P + "x", b""))

    class Unreachable:
        async def post_json_status(self, path: str, body: Any) -> tuple[int, Any]:
            raise KubeApiError(0, "", "POST: ConnectError(refused)")

    cut = Authorizer(Unreachable(), backoff=Backoff(0.001, 1, 0, 2))
    with pytest.raises(Exception, match="authorization check"):
        await cut.authorize(identity, request_attributes("GET", P, b""))

    def exposed(*collectors: Any) -> str:
        registry = CollectorRegistry()
        for collector in collectors:
            registry.register(collector)
        return generate_latest(registry).decode()

    authz = exposed(*authorizer.metrics.collectors(), *cut.metrics.collectors())
    assert 'apiserver_delegated_authz_request_total{code="201"} 1.0' in authz
    assert 'apiserver_delegated_authz_request_total{code="500"} 2.0' in authz
    assert 'apiserver_delegated_authz_request_total{code="<error>"} 1.0' in authz
    assert 'apiserver_delegated_authz_request_duration_seconds_count{code="500"} 2.0' in authz
    assert (
        'apiserver_delegated_authz_request_duration_seconds_bucket{code="201",le="10.0"} 1.0'
        in authz
    )
    authn = exposed(*tokens.metrics.collectors())
    assert 'apiserver_delegated_authn_request_total{code="201"} 1.0' in authn
    assert "authz" not in authn


def test_memoised_request_attributes_equal_requestinfo_s() -> None:
    """The gate's memo of request attributes (request-chosen keys, bounded) answers what
    `requestinfo.request_attributes` answers, for paths asked again and again."""
    rng = random.Random(28)
    poster = FakePoster()
    gate = DelegatingGate(
        Authenticator(TrustStore(), tokens=TokenAuthenticator(poster)), Authorizer(poster)
    )
    paths = [
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns/pods/*/m",
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns/pods/web-0/m",
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/q",
        "/apis/metrics.k8s.io/v1beta1/nodes",
        "/apis",
        "/healthz",
        "/api/v1/namespaces/ns/pods",
    ]
    for _ in range(300):
        key = (
            rng.choice(["GET", "POST", "WATCH", "get"]),
            rng.choice(paths),
            rng.choice([b"", b"watch=true", b"labelSelector=app%3Dweb"]),
        )
        scope = {"method": key[0], "path": key[1], "query_string": key[2]}
        assert gate._request_attributes(scope) == request_attributes(*key), key
