"""A local HTTPS kube-apiserver for the delegated-auth tests: TokenReview, SubjectAccessReview,
and the `kube-system/extension-apiserver-authentication` ConfigMap with its watch.

A real `ThreadingHTTPServer` on 127.0.0.1 over TLS (its certificate from a `trustme` CA that
`write_kubeconfig` puts into the kubeconfig it writes), so the server under test goes through
its real kubeconfig loader, httpx client, TLS and JSON handling. It must not import the code
under test.

* `POST /apis/authentication.k8s.io/v1/tokenreviews`: answers from `tokens` (token -> user
  dict: username, uid, groups, extra); unknown tokens get `authenticated: false`.
* `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`: answers `policy(spec)` (a
  `SubjectAccessReviewStatus` dict; default: allowed for `allow_all`, else not allowed).
* Both record the exact JSON bodies they received (`token_reviews`, `access_reviews`) and the
  `Authorization` header the caller used; `fail_status` makes both answer that HTTP status
  with a `Status` body; `down()` closes the listening socket (connection refused) and `up()`
  listens again on the same port.
* `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews` (the server's start-up check
  that it may create the reviews): allowed, unless the resource is in `self_denied`; recorded
  in `self_reviews`; `fail_status` does not apply to it.
* `GET /api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication` (404 when
  absent, 403 with `configmap_forbidden`), the list `GET .../configmaps?fieldSelector=...` and
  its watch (`watch=true`): newline-delimited events over chunked encoding, ended after
  `timeoutSeconds` (at most `max_watch_seconds`). `set_configmap(data)` / `delete_configmap()`
  publish ADDED/MODIFIED/DELETED events with a new resourceVersion.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import trustme
import yaml

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
SELF_REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
CONFIGMAPS = "/api/v1/namespaces/kube-system/configmaps"
CONFIGMAP_NAME = "extension-apiserver-authentication"
CLIENT_TOKEN = "server-under-test-token"

Policy = Callable[[dict[str, Any]], dict[str, Any]]


def status_body(code: int, reason: str, message: str) -> bytes:
    """A metav1 Status, as kube-apiserver answers errors."""
    return json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        }
    ).encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog is 5: a burst of new review connections can overflow it,
    # and a dropped SYN is retried after 1 s (the envelope's HPA phase had 1 s maxima and the
    # kernel counted listen overflows); kube-apiserver listens with the system's maximum.
    request_queue_size = 1024
    fake: FakeAuthApiServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # kube-apiserver (Go) writes with TCP_NODELAY; with Nagle on, the body written after the
    # headers waits for the client's delayed ACK: 40 ms a keep-alive request (44 ms p50, measured).
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.server.fake.connections.add(self.connection)

    def finish(self) -> None:
        self.server.fake.connections.discard(self.connection)
        super().finish()

    def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        body = json.loads(raw)
        fake.authorizations.append(self.headers.get("Authorization", ""))
        path = urlsplit(self.path).path
        if path == SELF_REVIEWS:
            fake.self_reviews.append(body)
            attributes = body["spec"]["resourceAttributes"]
            allowed = attributes["resource"] not in fake.self_denied
            status: dict[str, Any] = {"allowed": allowed}
            if not allowed:
                status["reason"] = "no RBAC policy matched"
            answer = {**body, "status": status}
            self._send(201, json.dumps(answer).encode())
            return
        if path == TOKEN_REVIEWS:
            fake.token_reviews.append(body)
            answer = fake.token_review(body)
        elif path == ACCESS_REVIEWS:
            fake.access_reviews.append(body)
            answer = fake.access_review(body)
        else:
            self._send(
                404,
                status_body(404, "NotFound", "the server could not find the requested resource"),
            )
            return
        if fake.fail_status is not None:
            code = fake.fail_status
            reason = {500: "InternalError", 503: "ServiceUnavailable", 429: "TooManyRequests"}.get(
                code, ""
            )
            self._send(code, status_body(code, reason, "injected failure"))
            return
        self._send(201, json.dumps(answer).encode())

    def do_GET(self) -> None:
        fake = self.server.fake
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        fake.configmap_gets.append(self.path)
        if fake.configmap_forbidden:
            self._send(
                403,
                status_body(
                    403,
                    "Forbidden",
                    'configmaps "extension-apiserver-authentication" is forbidden: User '
                    '"system:serviceaccount:custom-metrics:custom-metrics-server" cannot get '
                    'resource "configmaps" in API group "" in the namespace "kube-system"',
                ),
            )
            return
        if url.path == f"{CONFIGMAPS}/{CONFIGMAP_NAME}":
            obj = fake.configmap_object()
            if obj is None:
                self._send(
                    404, status_body(404, "NotFound", f'configmaps "{CONFIGMAP_NAME}" not found')
                )
            else:
                self._send(200, json.dumps(obj).encode())
            return
        if url.path == CONFIGMAPS and query.get("watch") in {"true", "1"}:
            self._watch(query)
            return
        if url.path == CONFIGMAPS:
            with fake.lock:
                obj = fake.configmap_object()
                version = fake.resource_version
            document = {
                "kind": "ConfigMapList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(version)},
                "items": [obj] if obj else [],
            }
            self._send(200, json.dumps(document).encode())
            return
        self._send(
            404, status_body(404, "NotFound", "the server could not find the requested resource")
        )

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _watch(self, query: dict[str, str]) -> None:
        fake = self.server.fake
        since = int(query.get("resourceVersion") or "0")
        seconds = min(float(query.get("timeoutSeconds", "60")), fake.max_watch_seconds)
        deadline = time.monotonic() + seconds
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        fake.watches += 1
        try:
            while not fake.stopping:
                with fake.changed:
                    events = [e for e in fake.events if e[0] > since]
                    if not events:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        fake.changed.wait(min(remaining, 0.2))
                        continue
                for version, kind, obj in events:
                    self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
                    since = version
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            pass


class FakeAuthApiServer:
    """The fake; use as a context manager (starts and stops the server thread)."""

    def __init__(self) -> None:
        self.ca = trustme.CA()
        self._cert = self.ca.issue_cert("127.0.0.1", "localhost")
        self.tokens: dict[str, dict[str, Any]] = {}
        self.allow_all = False
        self.policy: Policy | None = None
        self.fail_status: int | None = None
        self.configmap_forbidden = False
        self.max_watch_seconds = 5.0
        self.token_reviews: list[dict[str, Any]] = []
        self.access_reviews: list[dict[str, Any]] = []
        self.self_reviews: list[dict[str, Any]] = []
        #: resources (`tokenreviews`, `subjectaccessreviews`) SelfSubjectAccessReviews deny
        self.self_denied: set[str] = set()
        self.authorizations: list[str] = []
        self.configmap_gets: list[str] = []
        self.watches = 0
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.resource_version = 100
        self.configmap: dict[str, str] | None = None
        self.events: list[tuple[int, str, dict[str, Any]]] = []
        self.stopping = False
        self.connections: set[socket.socket] = set()
        self.port = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> FakeAuthApiServer:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def up(self) -> None:
        """Listen (again, on the same port once one was chosen)."""
        self.stopping = False
        server = _Server(("127.0.0.1", self.port), _Handler)
        server.fake = self
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._cert.configure_cert(context)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def down(self) -> None:
        """Stop listening: new connections are refused (open ones end)."""
        self.stopping = True
        with self.changed:
            self.changed.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        for connection in list(self.connections):  # kept-alive connections end too
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()
        self.connections.clear()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def refuses_connections(self) -> bool:
        """Whether the port is closed (for tests asserting `down()` worked)."""
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return True
        return False

    # --- answers ------------------------------------------------------------------------------

    def token_review(self, body: dict[str, Any]) -> dict[str, Any]:
        user = self.tokens.get(body["spec"]["token"])
        status: dict[str, Any] = {"authenticated": False}
        if user is not None:
            status = {"authenticated": True, "user": user}
        return {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": body["spec"],
            "status": status,
        }

    def access_review(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.policy is not None:
            status = self.policy(body["spec"])
        else:
            status = {"allowed": self.allow_all}
        return {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": body["spec"],
            "status": status,
        }

    # --- the ConfigMap ------------------------------------------------------------------------

    def configmap_object(self) -> dict[str, Any] | None:
        if self.configmap is None:
            return None
        return {
            "kind": "ConfigMap",
            "apiVersion": "v1",
            "metadata": {
                "name": CONFIGMAP_NAME,
                "namespace": "kube-system",
                "resourceVersion": str(self.resource_version),
            },
            "data": dict(self.configmap),
        }

    def set_configmap(self, data: dict[str, str]) -> None:
        with self.changed:
            kind = "ADDED" if self.configmap is None else "MODIFIED"
            self.resource_version += 1
            self.configmap = dict(data)
            obj = self.configmap_object()
            assert obj is not None
            self.events.append((self.resource_version, kind, obj))
            self.changed.notify_all()

    def delete_configmap(self) -> None:
        with self.changed:
            obj = self.configmap_object()
            if obj is None:
                return
            self.resource_version += 1
            obj["metadata"]["resourceVersion"] = str(self.resource_version)
            self.configmap = None
            self.events.append((self.resource_version, "DELETED", obj))
            self.changed.notify_all()

    # --- clients ------------------------------------------------------------------------------

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig for this server: its CA and a bearer token."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "fake",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": base64.b64encode(
                            self.ca.cert_pem.bytes()
                        ).decode(),
                    },
                }
            ],
            "users": [{"name": "server", "user": {"token": CLIENT_TOKEN}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "server"}}],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(config))
        return path


def rbac_policy(rules: dict[str, list[dict[str, Any]]]) -> Policy:
    """A tiny RBAC: user -> resource rules ({"verbs", "resources", "resourceNames"?,
    "namespace"?}) or non-resource rules ({"verbs", "nonResourceURLs"}); groups as "group:<g>".

    `resources` entries are `resource` or `resource/subresource` as RBAC writes them; `*`
    matches every resource and subresource, as RBAC's `ResourceMatches`.
    """

    def allows(rule: dict[str, Any], spec: dict[str, Any]) -> bool:
        verbs = rule.get("verbs", [])
        if "resourceAttributes" in spec:
            attrs = spec["resourceAttributes"]
            if "resources" not in rule:
                return False
            if attrs.get("verb") not in verbs and "*" not in verbs:
                return False
            if (
                rule.get("apiGroups", ["*"]) != ["*"]
                and attrs.get("group", "") not in rule["apiGroups"]
            ):
                return False
            if "namespace" in rule and rule["namespace"] != attrs.get("namespace", ""):
                return False
            combined = attrs.get("resource", "")
            if attrs.get("subresource"):
                combined += "/" + attrs["subresource"]
            if "*" not in rule["resources"] and combined not in rule["resources"]:
                return False
            names = rule.get("resourceNames")
            return not names or attrs.get("name", "") in names
        attrs = spec["nonResourceAttributes"]
        if "nonResourceURLs" not in rule:
            return False
        if attrs.get("verb") not in verbs and "*" not in verbs:
            return False
        path = attrs.get("path", "")
        return any(
            u == path or (u.endswith("*") and path.startswith(u[:-1]))
            for u in rule["nonResourceURLs"]
        )

    def policy(spec: dict[str, Any]) -> dict[str, Any]:
        subjects = [spec.get("user", "")] + [f"group:{g}" for g in spec.get("groups", [])]
        for subject in subjects:
            if any(allows(rule, spec) for rule in rules.get(subject, [])):
                return {"allowed": True, "reason": f"RBAC: allowed for {subject}"}
        return {"allowed": False}

    return policy
