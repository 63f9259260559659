"""A local HTTPS server answering as a Go custom-metrics-apiserver adapter does, byte shapes
from ../shared/reference/custom-metrics-api.md (sections 2, 4, 5): the upstream of the
pass-through tests.

What it serves, with the Go adapters' quirks:

* `/apis`: an `APIGroupList` *without* `apiVersion` (the strip-version serializer), groups
  with `serverAddressByClientCIDRs`;
* `/apis/custom.metrics.k8s.io`: the group document listing **only v1beta1** (section 4.2);
  v1beta2 is served too only with `serve_v1beta2` (a real Go adapter serves it; off by default,
  so the fake is a v1beta1-only upstream: its v1beta2 paths answer the route-not-found 404);
* `APIResourceList`s with `singularName: ""`, `verbs: ["get"]`;
* `MetricValueList` items with `describedObject.apiVersion: "/v1"` (core) or `"apps/v1"`,
  v1beta1's `metricName`/`window`/`selector: null`, v1beta2's `metric: {name, selector}` and
  `windowSeconds`; the wildcard answers every object of the resource in the namespace with a
  value (it knows no label selector of objects: `labelSelector` is recorded, not applied);
* metric-not-found 404s with the upstream wordings (no `details`);
* `ExternalMetricValueList` items with `metricLabels` (`null` for a series without labels);
* with `keda`: KEDA's metrics server: discovery lists only the placeholder `externalmetrics`,
  a value needs `labelSelector=scaledobject.keda.sh/name=<so>` (else a reason-less 500, as
  KEDA's plain Go error is written), and its items carry `metricLabels: null`.

Knobs: `tokens` (a set: requests must carry `Authorization: Bearer <one of them>`, else 401),
`forbidden` (403 for every metric request), `fail` (path prefix -> (code, Status message)),
`delay` (seconds before answering a value; `most_in_flight` counts how many waited at once),
`down()`/`up()` (connections refused, then served again on the same port). Every request is recorded in `requests` as (path with query, headers).
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import trustme

CUSTOM = "custom.metrics.k8s.io"
EXTERNAL = "external.metrics.k8s.io"
TIMESTAMP = "2026-01-02T03:04:05Z"
ROUTE_NOT_FOUND = "the server could not find the requested resource"
KEDA_LABEL = "scaledobject.keda.sh/name"


@dataclass
class Value:
    """One stored value of a custom metric."""

    resource: str  # "pods", "deployments.apps", "nodes", "namespaces"
    namespace: str  # "" for cluster-scoped objects and namespaces
    name: str
    metric: str
    value: str  # a quantity string as Go writes it
    window: int | None = 60
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class Series:
    """One series of an external metric (`labels` None: `metricLabels: null`)."""

    metric: str
    value: str
    labels: dict[str, str] | None = None
    scaled_object: str = ""  # keda: the ScaledObject whose selector finds it


KINDS = {
    "pods": ("Pod", "/v1"),
    "nodes": ("Node", "/v1"),
    "namespaces": ("Namespace", "/v1"),
    "services": ("Service", "/v1"),
    "deployments.apps": ("Deployment", "apps/v1"),
}


def status(code: int, message: str, reason: str | None) -> bytes:
    """A Go `Status` (a reason-less one for a plain Go error's 500)."""
    document: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
    }
    if reason:
        document["reason"] = reason
    if message == ROUTE_NOT_FOUND:
        document["details"] = {}
    document["code"] = code
    return json.dumps(document).encode() + b"\n"


def _selector(text: str) -> dict[str, str]:
    """`a=b,c==d` (all the tests send)."""
    pairs = {}
    for part in filter(None, text.split(",")):
        key, _, value = part.replace("==", "=").partition("=")
        pairs[key.strip()] = value.strip()
    return pairs


def _matches(wanted: dict[str, str], labels: dict[str, str] | None) -> bool:
    return all((labels or {}).get(key) == value for key, value in wanted.items())


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    fake: FakeGoAdapter


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

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, document: Any) -> None:
        self._send(200, json.dumps(document).encode() + b"\n")

    def do_GET(self) -> None:
        fake = self.server.fake
        fake.requests.append((self.path, dict(self.headers)))
        url = urlsplit(self.path)
        query = {key: values[0] for key, values in parse_qs(url.query).items()}
        path = url.path.rstrip("/")
        if fake.tokens is not None:
            given = self.headers.get("Authorization", "")
            if given.removeprefix("Bearer ") not in fake.tokens:
                self._send(401, status(401, "Unauthorized", "Unauthorized"))
                return
        for prefix, (code, message) in fake.fail.items():
            if path.startswith(prefix):
                self._send(code, status(code, message, None if code == 500 else "BadRequest"))
                return
        with contextlib.suppress(OSError):  # the client went away
            self._route(path, query)

    def _route(self, path: str, query: dict[str, str]) -> None:
        fake = self.server.fake
        custom_versions = ["v1beta1", "v1beta2"] if fake.serve_v1beta2 else ["v1beta1"]
        if path == "/apis":
            self._json(
                {"kind": "APIGroupList", "groups": [fake.group(CUSTOM), fake.group(EXTERNAL)]}
            )
            return
        if path in (f"/apis/{CUSTOM}", f"/apis/{EXTERNAL}"):
            self._json({"kind": "APIGroup", "apiVersion": "v1", **fake.group(path[6:])})
            return
        parts = [unquote(part) for part in path.split("/")[1:]]
        if len(parts) >= 3 and parts[1] == CUSTOM and parts[2] in custom_versions:
            self._custom(parts[2], parts[3:], query)
            return
        if len(parts) >= 3 and parts[1] == EXTERNAL and parts[2] == "v1beta1":
            self._external(parts[3:], query)
            return
        self._send(404, status(404, ROUTE_NOT_FOUND, "NotFound"))

    def _custom(self, version: str, rest: list[str], query: dict[str, str]) -> None:
        fake = self.server.fake
        if not rest:
            names = sorted({(v.resource, v.metric, bool(v.namespace)) for v in fake.values})
            self._json(
                {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": f"{CUSTOM}/{version}",
                    "resources": [
                        {
                            "name": f"{resource}/{metric}",
                            "singularName": "",
                            "namespaced": namespaced,
                            "kind": "MetricValueList",
                            "verbs": ["get"],
                        }
                        for resource, metric, namespaced in names
                    ],
                }
            )
            return
        if fake.forbidden:
            self._send(403, status(403, "forbidden by the fake", "Forbidden"))
            return
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] == "metrics":
            resource, name, metric = "namespaces", rest[1], rest[3]
        elif rest[0] == "namespaces" and len(rest) == 5:
            namespace, resource, name, metric = rest[1], rest[2], rest[3], rest[4]
        elif len(rest) == 3:
            resource, name, metric = rest
        else:
            self._send(404, status(404, ROUTE_NOT_FOUND, "NotFound"))
            return
        fake.wait()
        wanted = _selector(query.get("metricLabelSelector", ""))
        found = [
            value
            for value in fake.values
            if (value.resource, value.namespace, value.metric) == (resource, namespace, metric)
            and (name == "*" or value.name == name)
            and _matches(wanted, value.labels)
        ]
        if name != "*" and not found:
            words = f"the server could not find the metric {metric} for {resource} {name}"
            if wanted:
                words += f" with selector {query['metricLabelSelector']}"
            self._send(404, status(404, words, "NotFound"))
            return
        selector = None
        if wanted:
            selector = {"matchLabels": wanted}
        self._json(
            {
                "kind": "MetricValueList",
                "apiVersion": f"{CUSTOM}/{version}",
                "metadata": {},
                "items": [_item(version, value, selector) for value in found],
            }
        )

    def _external(self, rest: list[str], query: dict[str, str]) -> None:
        fake = self.server.fake
        if not rest:
            names = ["externalmetrics"] if fake.keda else sorted({s.metric for s in fake.series})
            self._json(
                {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": f"{EXTERNAL}/v1beta1",
                    "resources": [
                        {
                            "name": name,
                            "singularName": "",
                            "namespaced": True,
                            "kind": "ExternalMetricValueList",
                            "verbs": ["get"],
                        }
                        for name in names
                    ],
                }
            )
            return
        if len(rest) != 3 or rest[0] != "namespaces":
            self._send(404, status(404, ROUTE_NOT_FOUND, "NotFound"))
            return
        if fake.forbidden:
            self._send(403, status(403, "forbidden by the fake", "Forbidden"))
            return
        fake.wait()
        metric = rest[2]
        wanted = _selector(query.get("labelSelector", ""))
        if fake.keda:
            owner = wanted.get(KEDA_LABEL, "")
            if not owner:
                self._send(500, status(500, "scaledObject name is not specified", None))
                return
            found = [s for s in fake.series if s.metric == metric and s.scaled_object == owner]
            if not found:
                self._send(500, status(500, f"no matching metrics found for {metric}", None))
                return
        else:
            found = [s for s in fake.series if s.metric == metric and _matches(wanted, s.labels)]
        self._json(
            {
                "kind": "ExternalMetricValueList",
                "apiVersion": f"{EXTERNAL}/v1beta1",
                "metadata": {},
                "items": [
                    {
                        "metricName": s.metric,
                        "metricLabels": None if fake.keda else s.labels,
                        "timestamp": TIMESTAMP,
                        "value": s.value,
                    }
                    for s in found
                ]
                or None,  # Go writes a nil list as null
            }
        )


def _item(version: str, value: Value, selector: dict[str, Any] | None) -> dict[str, Any]:
    kind, api_version = KINDS[value.resource]
    described: dict[str, str] = {"kind": kind}
    if value.namespace:
        described["namespace"] = value.namespace
    described["name"] = value.name
    described["apiVersion"] = api_version
    if version == "v1beta1":
        item: dict[str, Any] = {
            "describedObject": described,
            "metricName": value.metric,
            "timestamp": TIMESTAMP,
        }
        if value.window is not None:
            item["window"] = value.window
        item["value"] = value.value
        item["selector"] = selector
        return item
    item = {
        "describedObject": described,
        "metric": {"name": value.metric, "selector": selector},
        "timestamp": TIMESTAMP,
    }
    if value.window is not None:
        item["windowSeconds"] = value.window
    item["value"] = value.value
    return item


class FakeGoAdapter:
    """The fake; a context manager (starts and stops its server thread)."""

    def __init__(
        self,
        values: list[Value] | None = None,
        series: list[Series] | None = None,
        *,
        serve_v1beta2: bool = False,
        keda: bool = False,
    ) -> None:
        self.ca = trustme.CA()
        self._cert = self.ca.issue_cert("127.0.0.1", "localhost")
        self.values = values or []
        self.series = series or []
        self.serve_v1beta2 = serve_v1beta2
        self.keda = keda
        self.tokens: set[str] | None = None
        self.forbidden = False
        self.fail: dict[str, tuple[int, str]] = {}
        self.delay = 0.0
        #: value requests waiting out `delay` now, and the most there were at once
        self.in_flight = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.connections: set[socket.socket] = set()
        self.port = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> FakeGoAdapter:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    @property
    def url(self) -> str:
        """Where it listens."""
        return f"https://127.0.0.1:{self.port}"

    def write_ca(self, path: Any) -> str:
        """Its CA certificate as a PEM file at `path`; returns the path."""
        self.ca.cert_pem.write_to_path(str(path))
        return str(path)

    def group(self, name: str) -> dict[str, Any]:
        """A group of `/apis` as a Go adapter lists it (the custom group: v1beta1 only)."""
        version = {"groupVersion": f"{name}/v1beta1", "version": "v1beta1"}
        return {
            "name": name,
            "versions": [version],
            "preferredVersion": version,
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ":6443"}],
        }

    def wait(self) -> None:
        """Wait out `delay` before answering a value, counting the requests doing so."""
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(self.delay)
        finally:
            with self._lock:
                self.in_flight -= 1

    def value_paths(self) -> list[str]:
        """The metric value requests received (discovery left out)."""
        return [
            path
            for path, _ in self.requests
            if path.count("/") > 3 and not path.rstrip("/").endswith(("v1beta1", "v1beta2"))
        ]

    def up(self) -> None:
        """Listen (again, on the same port once one was chosen)."""
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
        """Stop listening; kept-alive connections end too."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        for connection in list(self.connections):
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()
        self.connections.clear()
        if self._thread is not None:
            self._thread.join(timeout=5)
