"""Just enough of kube-apiserver for `helm template --dry-run=server`: discovery of the kinds
the chart renders, and GET of Secrets (what the chart's `lookup` reads). Everything else is a
404 Status, so every object is "not there yet" except the Secrets a test puts in.

Plain HTTP on 127.0.0.1 (helm talks to it through a kubeconfig without credentials); requests
are recorded so a test can see what helm read.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

#: group/version -> (resource, kind, namespaced) for every kind the chart can render.
RESOURCES: dict[str, list[tuple[str, str, bool]]] = {
    "v1": [
        ("secrets", "Secret", True),
        ("configmaps", "ConfigMap", True),
        ("serviceaccounts", "ServiceAccount", True),
        ("services", "Service", True),
    ],
    "apps/v1": [("deployments", "Deployment", True), ("daemonsets", "DaemonSet", True)],
    "policy/v1": [("poddisruptionbudgets", "PodDisruptionBudget", True)],
    "rbac.authorization.k8s.io/v1": [
        ("clusterroles", "ClusterRole", False),
        ("clusterrolebindings", "ClusterRoleBinding", False),
        ("roles", "Role", True),
        ("rolebindings", "RoleBinding", True),
    ],
    "apiregistration.k8s.io/v1": [("apiservices", "APIService", False)],
    "networking.k8s.io/v1": [("networkpolicies", "NetworkPolicy", True)],
}


class FakeApiServer:
    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server.requests.append(self.path)
                status, body = server.answer(self.path.split("?", 1)[0])
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"

    def answer(self, path: str) -> tuple[int, dict[str, Any]]:
        if path == "/version":
            return 200, {"major": "1", "minor": "37", "gitVersion": "v1.37.1"}
        if path == "/api":
            return 200, {"kind": "APIVersions", "versions": ["v1"]}
        if path == "/apis":
            groups = [
                {
                    "name": gv.split("/")[0],
                    "versions": [{"groupVersion": gv, "version": "v1"}],
                    "preferredVersion": {"groupVersion": gv, "version": "v1"},
                }
                for gv in RESOURCES
                if "/" in gv
            ]
            return 200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        group_version = "v1" if path == "/api/v1" else path.removeprefix("/apis/")
        if group_version in RESOURCES and path in {"/api/v1", f"/apis/{group_version}"}:
            return 200, {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": group_version,
                "resources": [
                    {
                        "name": name,
                        "singularName": kind.lower(),
                        "namespaced": namespaced,
                        "kind": kind,
                        "verbs": ["get", "list", "create", "update", "patch", "delete"],
                    }
                    for name, kind, namespaced in RESOURCES[group_version]
                ],
            }
        parts = path.strip("/").split("/")
        if (
            len(parts) == 6
            and parts[:3] == ["api", "v1", "namespaces"]
            and parts[4] == "secrets"
            and (parts[3], parts[5]) in self.secrets
        ):
            return 200, self.secrets[(parts[3], parts[5])]
        return 404, {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": "NotFound",
            "code": 404,
        }

    def put_secret(self, secret: dict[str, Any]) -> None:
        metadata = secret["metadata"]
        self.secrets[(metadata["namespace"], metadata["name"])] = secret

    def kubeconfig(self, directory: Path) -> Path:
        path = directory / "kubeconfig"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "nobody", "user": {}}],
                    "contexts": [
                        {"name": "fake", "context": {"cluster": "fake", "user": "nobody"}}
                    ],
                    "current-context": "fake",
                }
            )
        )
        path.chmod(0o600)
        return path

    @contextmanager
    def running(self) -> Iterator[FakeApiServer]:
        thread = threading.Thread(
            target=self._http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        thread.start()
        try:
            yield self
        finally:
            self._http.shutdown()
            self._http.server_close()
            thread.join(timeout=5)
