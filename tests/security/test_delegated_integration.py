"""Delegated authentication and authorization against the real server over real TLS.

One server process (`secure`: both CA files, allowed name `front-proxy-client`, the fake
kube-apiserver for TokenReview/SubjectAccessReview) serves most tests; each test uses its own
user names so the server's 10 s decision caches never carry one test's answer into another.
Numbers in test names refer to the checklist of shared/reference/security.md section 6.

Real twins (the real aggregator's front-proxy headers, real TokenReview and RBAC, the real
`extension-apiserver-authentication` ConfigMap): tests/controlplane/test_aggregation.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fakes.auth_webhooks import CLIENT_TOKEN, FakeAuthApiServer, rbac_policy
from tests.security.conftest import Pki, SecureServer, front_proxy_headers

pytestmark = pytest.mark.integration

P = "/apis/custom.metrics.k8s.io/v1beta2"
E = "/apis/external.metrics.k8s.io/v1beta1"


@pytest.fixture
def policy(fake: FakeAuthApiServer) -> Iterator[FakeAuthApiServer]:
    """The fake with its answers reset after the test."""
    yield fake
    fake.policy = None
    fake.allow_all = False
    fake.fail_status = None
    fake.tokens.clear()


def allow_everything(_spec: dict[str, Any]) -> dict[str, Any]:
    return {"allowed": True}


def reviews_for(fake: FakeAuthApiServer, user: str) -> list[dict[str, Any]]:
    return [r["spec"] for r in fake.access_reviews if r["spec"].get("user") == user]


def status(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"] == "application/json"
    document: dict[str, Any] = response.json()
    assert document["kind"] == "Status"
    return document


# --- authentication ---------------------------------------------------------------------------


def test_01_front_proxy_identity_reaches_the_review_exactly(
    secure: SecureServer, pki: Pki, policy: FakeAuthApiServer
) -> None:
    policy.policy = allow_everything
    headers = [
        ("X-Remote-User", "fp-alice"),
        ("X-Remote-Group", "g1"),
        ("X-Remote-Group", "a,b"),
        ("X-Remote-Extra-Scopes", "s1"),
        ("X-Remote-Extra-Foo%2Fbar", "v"),
    ]
    response = secure.get(
        f"{P}/namespaces/ns/pods/*/some-metric", cert=pki.front_proxy, headers=headers
    )
    assert response.status_code == 200, response.text
    assert response.json()["kind"] == "MetricValueList"
    (spec,) = reviews_for(policy, "fp-alice")
    assert spec["groups"] == ["g1", "a,b", "system:authenticated"]
    assert spec["extra"] == {"foo/bar": ["v"], "scopes": ["s1"]}
    assert "uid" not in spec  # X-Remote-Uid is not read unless --requestheader-uid-headers


def test_02_spoofed_headers_without_a_certificate_are_anonymous(
    secure: SecureServer, policy: FakeAuthApiServer
) -> None:
    before = len(policy.access_reviews)
    response = secure.get(
        f"{P}/namespaces/ns/pods/*/some-metric",
        headers=front_proxy_headers("admin", "system:masters", scopes="all"),
    )
    assert response.status_code == 403
    assert status(response)["message"] == (
        'pods.custom.metrics.k8s.io "*" is forbidden: User "system:anonymous" cannot get '
        'resource "pods/some-metric" in API group "custom.metrics.k8s.io" in the namespace "ns"'
    )
    (review,) = policy.access_reviews[before:]
    assert review["spec"]["user"] == "system:anonymous"
    assert review["spec"]["groups"] == ["system:unauthenticated"]
    assert "extra" not in review["spec"]
    assert "admin" not in secure.logs()


def test_02_spoofed_headers_with_a_client_ca_certificate_never_authenticate_as_the_header(
    secure: SecureServer, pki: Pki, policy: FakeAuthApiServer
) -> None:
    # Item 3: a client-CA certificate is its own CN; the headers are stripped, never read.
    policy.policy = allow_everything
    response = secure.get(
        f"{P}/namespaces/ns/pods/*/some-metric",
        cert=pki.alice,
        headers=front_proxy_headers("admin", "system:masters"),
    )
    assert response.status_code == 200
    specs = [
        r["spec"] for r in policy.access_reviews if r["spec"].get("user") in {"alice", "admin"}
    ]
    assert specs, "no review for the certificate's user"
    assert all(spec["user"] == "alice" for spec in specs)
    assert specs[-1]["groups"] == ["dev", "viewers", "system:authenticated"]
    (credential,) = specs[-1]["extra"]["authentication.kubernetes.io/credential-id"]
    assert credential.startswith("X509SHA256=")


def test_04_front_proxy_certificate_with_a_name_not_allowed_is_401(
    secure: SecureServer, pki: Pki, policy: FakeAuthApiServer
) -> None:
    policy.policy = allow_everything
    before = len(policy.access_reviews)
    response = secure.get(
        f"{P}/namespaces/ns/pods/*/some-metric",
        cert=pki.other_proxy,
        headers=front_proxy_headers("fp-mallory", "system:masters"),
    )
    assert response.status_code == 401
    assert status(response) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }
    assert policy.access_reviews[before:] == []  # never anonymous, never authorized


def test_06_certificate_from_an_unknown_ca_fails_the_handshake_or_is_401(
    secure: SecureServer, pki: Pki, policy: FakeAuthApiServer
) -> None:
    policy.policy = allow_everything
    try:
        response = secure.get(P, cert=pki.rogue, headers=front_proxy_headers("fp-rogue"))
    except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
        return
    assert response.status_code == 401


def test_08_a_token_is_reviewed_once_per_ttl(
    secure: SecureServer, policy: FakeAuthApiServer
) -> None:
    token = "tok-08-" + "x" * 20
    policy.tokens[token] = {"username": "tok-carol", "uid": "u-1", "groups": ["devs"]}
    policy.policy = allow_everything
    before = len(policy.token_reviews)
    with secure.client(headers={"Authorization": f"Bearer {token}"}) as client:
        for _ in range(5):
            assert client.get(f"{P}/namespaces/ns/pods/*/some-metric").status_code == 200
    reviews = policy.token_reviews[before:]
    assert len(reviews) == 1
    assert reviews[0] == {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    }
    (spec, *_) = reviews_for(policy, "tok-carol")
    assert spec["uid"] == "u-1"
    assert spec["groups"] == ["devs", "system:authenticated"]
    assert token not in secure.logs()
    assert CLIENT_TOKEN not in secure.logs()


def test_09_an_invalid_token_is_401_and_the_answer_is_cached(
    secure: SecureServer, policy: FakeAuthApiServer
) -> None:
    before = len(policy.token_reviews)
    with secure.client(headers={"Authorization": "Bearer not-a-valid-token-09"}) as client:
        for _ in range(3):
            response = client.get(P)
            assert response.status_code == 401
            assert status(response)["reason"] == "Unauthorized"
    assert len(policy.token_reviews) - before == 1


def test_10_token_review_failure_is_401_and_not_cached(
    secure: SecureServer, policy: FakeAuthApiServer
) -> None:
    policy.fail_status = 500
    before = len(policy.token_reviews)
    started = time.monotonic()
    with secure.client(headers={"Authorization": "Bearer tok-10"}) as client:
        assert client.get(P).status_code == 401
        assert client.get(P).status_code == 401
    # Retries bounded (3 attempts, 10 ms apart): unbounded retries would run until the
    # client's timeout; a loaded machine adds well under a second.
    assert time.monotonic() - started < 10
    calls = len(policy.token_reviews) - before
    assert calls >= 4  # retried (3 attempts with --fast-retries), and not cached: twice
    policy.fail_status = None
    policy.tokens["tok-10"] = {"username": "tok-dave"}
    policy.policy = allow_everything
    with secure.client(headers={"Authorization": "Bearer tok-10"}) as client:
        assert client.get(P).status_code == 200


def test_11_front_proxy_wins_over_a_token_and_the_token_is_never_reviewed(
    secure: SecureServer, pki: Pki, policy: FakeAuthApiServer
) -> None:
    policy.policy = allow_everything
    policy.tokens["tok-11"] = {"username": "tok-erin"}
    before = len(policy.token_reviews)
    headers = [*front_proxy_headers("fp-frank"), ("Authorization", "Bearer tok-11")]
    assert secure.get(P, cert=pki.front_proxy, headers=headers).status_code == 200
    assert policy.token_reviews[before:] == []
    assert reviews_for(policy, "fp-frank")
    assert not reviews_for(policy, "tok-erin")


def test_12_health_needs_no_review_but_a_bad_token_is_still_401(
    secure: SecureServer, policy: FakeAuthApiServer
) -> None:
    before = len(policy.access_reviews)
    for path in ("/healthz", "/livez", "/readyz"):
        response = secure.get(path)
        assert response.status_code == 200, path
        assert response.text == "ok"
    assert policy.access_reviews[before:] == []
    response = secure.get("/healthz/ping")
    assert response.status_code == 403
    assert status(response)["message"] == (
        'forbidden: User "system:anonymous" cannot get path "/healthz/ping"'
    )
    assert policy.access_reviews[-1]["spec"]["nonResourceAttributes"] == {
        "path": "/healthz/ping",
        "verb": "get",
    }
    assert secure.get("/healthz", headers={"Authorization": "Bearer bad-12"}).status_code == 401


# --- authorization ----------------------------------------------------------------------------

SAR_TABLE = [
    (
        f"{P}/namespaces/ns/pods/*/some-metric?labelSelector=app%3Dweb",
        {
            "resourceAttributes": {
                "namespace": "ns",
                "verb": "get",
                "group": "custom.metrics.k8s.io",
                "version": "v1beta2",
                "resource": "pods",
                "subresource": "some-metric",
                "name": "*",
            }
        },
    ),
    (
        "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns/pods/pod-1/some-metric",
        {
            "resourceAttributes": {
                "namespace": "ns",
                "verb": "get",
                "group": "custom.metrics.k8s.io",
                "version": "v1beta1",
                "resource": "pods",
                "subresource": "some-metric",
                "name": "pod-1",
            }
        },
    ),
    (
        f"{P}/nodes/*/some-metric",
        {
            "resourceAttributes": {
                "verb": "get",
                "group": "custom.metrics.k8s.io",
                "version": "v1beta2",
                "resource": "nodes",
                "subresource": "some-metric",
                "name": "*",
            }
        },
    ),
    (
        f"{P}/namespaces/ns/deployments.apps/web/some-metric",
        {
            "resourceAttributes": {
                "namespace": "ns",
                "verb": "get",
                "group": "custom.metrics.k8s.io",
                "version": "v1beta2",
                "resource": "deployments.apps",
                "subresource": "some-metric",
                "name": "web",
            }
        },
    ),
    (
        f"{P}/namespaces/ns/metrics/m",
        {
            "resourceAttributes": {
                "namespace": "ns",
                "verb": "get",
                "group": "custom.metrics.k8s.io",
                "version": "v1beta2",
                "resource": "metrics",
                "name": "m",
            }
        },
    ),
    (
        f"{E}/namespaces/ns/my-external-metric?labelSelector=foo%3Dbar,env+in+(a,b)",
        {
            "resourceAttributes": {
                "namespace": "ns",
                "verb": "list",
                "group": "external.metrics.k8s.io",
                "version": "v1beta1",
                "resource": "my-external-metric",
                "labelSelector": {
                    "requirements": [
                        {"key": "env", "operator": "In", "values": ["a", "b"]},
                        {"key": "foo", "operator": "In", "values": ["bar"]},
                    ]
                },
            }
        },
    ),
    (
        "/apis/custom-metrics/v1alpha1/namespaces/ns/pods/*/some-metric",
        {
            "resourceAttributes": {
                "namespace": "ns",
                "verb": "get",
                "group": "custom-metrics",
                "version": "v1alpha1",
                "resource": "pods",
                "subresource": "some-metric",
                "name": "*",
            }
        },
    ),
    (P, {"nonResourceAttributes": {"path": P, "verb": "get"}}),
    ("/apis", {"nonResourceAttributes": {"path": "/apis", "verb": "get"}}),
    ("/openapi/v2", {"nonResourceAttributes": {"path": "/openapi/v2", "verb": "get"}}),
    ("/version", {"nonResourceAttributes": {"path": "/version", "verb": "get"}}),
    ("/metrics", {"nonResourceAttributes": {"path": "/metrics", "verb": "get"}}),
]


@pytest.mark.parametrize(
    ("index", "url", "attributes"), [(i, u, a) for i, (u, a) in enumerate(SAR_TABLE)]
)
def test_17_the_review_body_of_every_url_form_is_exact(
    secure: SecureServer,
    pki: Pki,
    policy: FakeAuthApiServer,
    index: int,
    url: str,
    attributes: dict[str, Any],
) -> None:
    policy.policy = allow_everything
    user = f"sar-{index}"
    response = secure.get(url, cert=pki.front_proxy, headers=front_proxy_headers(user, "team-a"))
    # Authorized, so served: 200, or 404 where the fixture has no such value.
    assert response.status_code in {200, 404}, response.text
    bodies = [r for r in policy.access_reviews if r["spec"].get("user") == user]
    assert bodies == [
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {**attributes, "user": user, "groups": ["team-a", "system:authenticated"]},
        }
    ]


def test_18_per_metric_rbac_and_a_cached_denial(
    secure: SecureServer, pki: Pki, policy: FakeAuthApiServer
) -> None:
    policy.policy = rbac_policy(
        {
            "rbac-gina": [
                {
                    "verbs": ["get"],
                    "apiGroups": ["custom.metrics.k8s.io"],
                    "resources": ["pods/requests_per_second", "pods/some-metric"],
                    "namespace": "ns",
                }
            ]
        }
    )
    headers = front_proxy_headers("rbac-gina")
    with secure.client(pki.front_proxy, headers=headers) as client:
        assert client.get(f"{P}/namespaces/ns/pods/*/some-metric").status_code == 200
        allowed_unknown = client.get(f"{P}/namespaces/ns/pods/*/requests_per_second")
        assert allowed_unknown.status_code == 404  # authorized; the metric does not exist
        before = len(policy.access_reviews)
        for _ in range(3):
            denied = client.get(f"{P}/namespaces/ns/pods/*/kube_pod_resource_request")
            assert denied.status_code == 403
        assert len(policy.access_reviews) - before == 1  # the denial is cached
        assert status(denied) == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": 'pods.custom.metrics.k8s.io "*" is forbidden: User "rbac-gina" cannot get '
            'resource "pods/kube_pod_resource_request" in API group "custom.metrics.k8s.io" '
            'in the namespace "ns"',
            "reason": "Forbidden",
            "details": {"name": "*", "group": "custom.metrics.k8s.io", "kind": "pods"},
            "code": 403,
        }
        other_namespace = client.get(f"{P}/namespaces/default/pods/*/some-metric")
        assert other_namespace.status_code == 403
        node = client.get(f"{P}/nodes/node-1/some-metric")
        assert status(node)["message"] == (
            'nodes.custom.metrics.k8s.io "node-1" is forbidden: User "rbac-gina" cannot get '
            'resource "nodes/some-metric" in API group "custom.metrics.k8s.io" at the cluster scope'
        )
        external = client.get(f"{E}/namespaces/ns/queue")
        assert status(external)["message"] == (
            'queue.external.metrics.k8s.io is forbidden: User "rbac-gina" cannot list resource '
            '"queue" in API group "external.metrics.k8s.io" in the namespace "ns"'
        )
        escaped = client.get(f"{P}/namespaces/a%3Cb%3E/pods/x/m")
        assert escaped.status_code == 403
        assert '"a&lt;b&gt;"' in status(escaped)["message"]
        assert "<b>" not in escaped.text.replace("\\u003c", "<")


def test_18_the_review_reason_is_appended(
    secure: SecureServer, pki: Pki, policy: FakeAuthApiServer
) -> None:
    policy.policy = lambda spec: {"allowed": False, "denied": True, "reason": "nope <really>"}
    response = secure.get(P, cert=pki.front_proxy, headers=front_proxy_headers("deny-hank"))
    assert status(response)["message"] == (
        'forbidden: User "deny-hank" cannot get path "/apis/custom.metrics.k8s.io/v1beta2": '
        "nope <really>"
    )


def test_19_allowed_decisions_are_cached_per_whole_identity(
    secure: SecureServer, pki: Pki, policy: FakeAuthApiServer
) -> None:
    policy.policy = allow_everything
    url = f"{P}/namespaces/ns/pods/pod-1/some-metric"
    with secure.client(pki.front_proxy) as client:
        for _ in range(3):
            assert client.get(url, headers=front_proxy_headers("cache-ivy", "g")).status_code == 200
        assert len(reviews_for(policy, "cache-ivy")) == 1
        # Same user, other groups or extra: another identity, another review.
        assert client.get(url, headers=front_proxy_headers("cache-ivy", "h")).status_code == 200
        assert (
            client.get(url, headers=front_proxy_headers("cache-ivy", "g", k="v")).status_code == 200
        )
        assert len(reviews_for(policy, "cache-ivy")) == 3
        assert client.get(url, headers=front_proxy_headers("cache-jack", "g")).status_code == 200
        assert len(reviews_for(policy, "cache-jack")) == 1


def test_review_calls_show_in_upstream_s_delegated_metrics(
    secure: SecureServer, pki: Pki, policy: FakeAuthApiServer
) -> None:
    """apiserver_delegated_authz_request_total and _duration_seconds by status code, as
    kube-apiserver's aggregated servers expose them: an operator reads there whether slow
    answers waited for kube-apiserver."""

    def counted(text: str, name: str) -> float:
        prefix = f'{name}{{code="201"}} '
        return sum(
            float(line[len(prefix) :]) for line in text.splitlines() if line.startswith(prefix)
        )

    policy.policy = allow_everything
    with secure.client(pki.front_proxy) as client:
        before = client.get("/metrics", headers=front_proxy_headers("metrics-kim", "g")).text
        url = f"{P}/namespaces/ns/pods/pod-1/some-metric"
        for group in ("a", "b", "c"):  # three identities, three reviews
            response = client.get(url, headers=front_proxy_headers("metrics-lee", group))
            assert response.status_code == 200
        after = client.get("/metrics", headers=front_proxy_headers("metrics-kim", "g")).text
    assert len(reviews_for(policy, "metrics-lee")) == 3
    for name in (
        "apiserver_delegated_authz_request_total",
        "apiserver_delegated_authz_request_duration_seconds_count",
    ):
        assert counted(after, name) - counted(before, name) == 3, name
    assert "# TYPE apiserver_delegated_authn_request_duration_seconds histogram" in after


def test_20_review_failure_is_500_never_200_and_recovers(
    secure: SecureServer, pki: Pki, policy: FakeAuthApiServer
) -> None:
    url = f"{P}/namespaces/ns/pods/*/some-metric"
    headers = front_proxy_headers("down-kim")
    policy.down()
    try:
        assert policy.refuses_connections()
        response = secure.get(url, cert=pki.front_proxy, headers=headers)
        assert response.status_code == 500
        assert status(response) == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Internal error occurred: the authorization check (SubjectAccessReview) "
            "could not be completed",
            "reason": "InternalError",
            "details": {
                "causes": [
                    {
                        "message": "the authorization check (SubjectAccessReview) could not be "
                        "completed"
                    }
                ]
            },
            "code": 500,
        }
    finally:
        policy.up()
    policy.fail_status = 500
    assert secure.get(url, cert=pki.front_proxy, headers=headers).status_code == 500
    policy.fail_status = None
    policy.policy = allow_everything
    assert secure.get(url, cert=pki.front_proxy, headers=headers).status_code == 200  # not cached


def test_20_allowed_and_denied_at_once_is_500(
    secure: SecureServer, pki: Pki, policy: FakeAuthApiServer
) -> None:
    policy.policy = lambda spec: {"allowed": True, "denied": True}
    response = secure.get(P, cert=pki.front_proxy, headers=front_proxy_headers("both-lee"))
    assert response.status_code == 500


def test_21_aggregator_probes(secure: SecureServer, pki: Pki, policy: FakeAuthApiServer) -> None:
    before = len(policy.access_reviews)
    probe = secure.get(
        P,
        cert=pki.front_proxy,
        headers=front_proxy_headers("system:kube-aggregator", "system:masters"),
    )
    assert probe.status_code == 200
    assert policy.access_reviews[before:] == []  # no review: counted, not timed
    policy.policy = rbac_policy(
        {
            "group:system:authenticated": [
                {"verbs": ["get"], "nonResourceURLs": ["/apis", "/apis/*"]}
            ]
        }
    )
    legacy = secure.get(
        "/apis/external.metrics.k8s.io/v1beta1",
        cert=pki.front_proxy,
        headers=front_proxy_headers("system:kube-aggregator"),
    )
    assert legacy.status_code == 200
    assert policy.access_reviews[-1]["spec"]["groups"] == ["system:authenticated"]


def test_22_impersonation_is_refused(
    secure: SecureServer, pki: Pki, policy: FakeAuthApiServer
) -> None:
    policy.policy = allow_everything
    response = secure.get(
        P,
        cert=pki.front_proxy,
        headers=[*front_proxy_headers("imp-max"), ("Impersonate-User", "system:admin")],
    )
    assert response.status_code == 403
    assert status(response)["message"] == (
        'users "system:admin" is forbidden: User "imp-max" cannot impersonate resource "users" '
        'in API group "" at the cluster scope: impersonation is not supported by this server'
    )


# --- input handling ---------------------------------------------------------------------------


@pytest.fixture
def allowed(secure: SecureServer, pki: Pki, policy: FakeAuthApiServer) -> Iterator[httpx.Client]:
    """A front-proxied client whose every request is allowed."""
    policy.policy = allow_everything
    with secure.client(pki.front_proxy, headers=front_proxy_headers("input-nora")) as client:
        yield client


@pytest.mark.parametrize(
    "query",
    [
        "labelSelector=a+in+(b",
        "metricLabelSelector=a+in+(b",
        "labelSelector=!!",
        "labelSelector=a%3D" + "x" * 64,
        'labelSelector=a%3D"x"',
        "labelSelector=a%3D%7D",
        "labelSelector=a%3D%5C",
        "labelSelector=a%3Dx%0Ay",
        "labelSelector=a%3Dx%7Cy",
        "labelSelector=a%3D.*",
        "labelSelector=%7B__name__%3D~%22.%2B%22%7D",
    ],
)
def test_23_24_bad_selectors_are_400(allowed: httpx.Client, query: str) -> None:
    response = allowed.get(f"{P}/namespaces/ns/pods/*/some-metric?{query}")
    assert response.status_code == 400
    assert status(response)["reason"] == "BadRequest"


def test_25_a_100_kib_label_selector_is_refused_fast(
    secure: SecureServer, pki: Pki, policy: FakeAuthApiServer
) -> None:
    policy.policy = allow_everything
    target = f"{P}/namespaces/ns/pods/*/some-metric?labelSelector=a%3D" + "y" * 100 * 1024
    started = time.monotonic()
    code, body = secure.raw_get(target, pki.front_proxy, front_proxy_headers("big-query-rae"))
    # httptools refuses a request line this long before the app sees it: still a Status.
    assert code == 400
    assert json.loads(body)["reason"] == "BadRequest"
    assert "not valid HTTP/1.1" in json.loads(body)["message"]
    # Refused on sight (milliseconds); parsing a 100 KiB selector the slow way would take far
    # longer than a loaded machine's delay.
    assert time.monotonic() - started < 5
    smaller = target[: -60 * 1024]  # ~40 KiB: over our 16 KiB URL bound
    code, body = secure.raw_get(smaller, pki.front_proxy, front_proxy_headers("big-query-rae"))
    assert code == 414
    assert json.loads(body)["reason"] == "RequestEntityTooLarge"
    within = target[: -(100 - 9) * 1024]  # ~9 KiB selector: within the URL bound, over 8 KiB
    code, body = secure.raw_get(within, pki.front_proxy, front_proxy_headers("big-query-rae"))
    assert code == 400
    assert json.loads(body)["message"].startswith("labelSelector is too long: ")


def test_25_huge_headers(secure: SecureServer, pki: Pki, policy: FakeAuthApiServer) -> None:
    policy.policy = allow_everything
    groups = [("X-Remote-Group", f"g{i}-" + "z" * 4096) for i in range(200)]
    with secure.client(pki.front_proxy) as client:
        response = client.get(P, headers=[*front_proxy_headers("huge-olga"), *groups])
        assert response.status_code == 200  # Go accepts this too (below its 1 MiB limit)
        head = [("X-Filler", "q" * 64 * 1024) for _ in range(20)]
        try:
            too_big = client.get(P, headers=head)
        except httpx.TransportError:
            pass
        else:
            assert too_big.status_code == 431
    assert secure.get("/healthz").status_code == 200


def test_26_dot_segments_and_encoded_slashes_never_authorize_one_name_and_serve_another(
    secure: SecureServer, pki: Pki, policy: FakeAuthApiServer
) -> None:
    policy.policy = allow_everything
    for index, raw in enumerate(
        (
            f"{P}/namespaces/ns/../default/pods/*/some-metric",
            f"{P}/namespaces/ns/%2e%2e/default/pods/*/some-metric",
            f"{P}/namespaces/ns/pods/a%2Fb/some-metric",
            f"{P}/namespaces//ns/pods/*/some-metric",
            f"{P}/namespaces/ns/pods/pod-1/some-metric/../../../../default/pods/*/some-metric",
        )
    ):
        user = f"dots-{index}"
        code, _ = secure.raw_get(raw, pki.front_proxy, front_proxy_headers(user))
        assert code in {400, 404}, raw
        for review in reviews_for(policy, user):
            attributes = review.get("resourceAttributes", {})
            assert attributes.get("namespace") != "default", raw


def test_29_write_methods_are_405_for_whoever_may_write(allowed: httpx.Client) -> None:
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        response = allowed.request(
            method, f"{P}/namespaces/ns/pods/pod-1/some-metric", content=b"{}"
        )
        assert response.status_code == 405, method
        assert status(response)["reason"] == "MethodNotAllowed"


def test_29_write_methods_are_authorized_with_their_verbs(
    secure: SecureServer, pki: Pki, policy: FakeAuthApiServer
) -> None:
    policy.policy = rbac_policy({"verb-pia": [{"verbs": ["get"], "resources": ["*"]}]})
    with secure.client(pki.front_proxy, headers=front_proxy_headers("verb-pia")) as client:
        assert client.post(f"{P}/namespaces/ns/pods/pod-1/some-metric").status_code == 403
        assert client.delete(f"{P}/namespaces/ns/pods/*/some-metric").status_code == 403
    verbs = [r["resourceAttributes"]["verb"] for r in reviews_for(policy, "verb-pia")]
    assert verbs == ["create", "delete"]


@pytest.mark.parametrize("upgrade", ["websocket", "SPDY/3.1", "h2c"])
def test_30_upgrade_requests_are_refused(allowed: httpx.Client, upgrade: str) -> None:
    headers = {
        "Connection": "Upgrade",
        "Upgrade": upgrade,
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version": "13",
    }
    response = allowed.get(f"{P}/namespaces/ns/pods/*/some-metric", headers=headers)
    assert response.status_code == 400
    assert allowed.get(P).status_code == 200  # the connection is not hijacked


def test_31_no_redirects(allowed: httpx.Client) -> None:
    assert allowed.get(f"{P}/").status_code == 200
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert allowed.get(path).status_code == 404


def test_32_negotiation(allowed: httpx.Client) -> None:
    url = f"{P}/namespaces/ns/pods/*/some-metric"
    assert (
        allowed.get(url, headers={"Accept": "application/json"}).json()["kind"] == "MetricValueList"
    )
    assert allowed.get(url, headers={"Accept": "*/*"}).status_code == 200
    protobuf = allowed.get(url, headers={"Accept": "application/vnd.kubernetes.protobuf"})
    assert protobuf.status_code == 200
    assert protobuf.headers["content-type"] == "application/vnd.kubernetes.protobuf"
    assert protobuf.content.startswith(b"k8s\x00")
    refused = allowed.get(url, headers={"Accept": "application/xml"})
    assert refused.status_code == 406
    assert status(refused)["reason"] == "NotAcceptable"


def test_identity_headers_and_tokens_never_reach_the_logs(secure: SecureServer) -> None:
    logs = secure.logs()
    for secret in ("fp-alice", "tok-08-", "tok-11", "not-a-valid-token-09", "a,b"):
        assert secret not in logs
    assert "Authorization" not in logs
    assert json.dumps("x-remote-user") not in logs
