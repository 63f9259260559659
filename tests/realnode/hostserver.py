"""`custom-metrics-server serve` as a host process beside the realnode, and its registration
with the real aggregator.

The server runs as the other integration tests run it (`testing.server_process.start_server`,
TLS, its own certificate), with the Kubernetes backend on the realnode's admin kubeconfig and
delegated authentication and authorization through `metrics-server.kubeconfig` (TokenReview,
SubjectAccessReview and the `extension-apiserver-authentication` ConfigMap, whose client and
front-proxy CAs it reads).

Registration (`register`) follows the realnode README ("Pods and the API server"): aggregator
routing is on, so kube-apiserver dials an APIService's Service at an endpoint of its
EndpointSlice; loopback addresses are refused there, so the server listens on the node's
bridge address (10.244.0.1) and a selector-less Service plus an EndpointSlice point at it.
The serving certificate names `<service>.<namespace>.svc` (what the aggregator verifies,
with the APIServices' `caBundle`) and 10.244.0.1.
"""

from __future__ import annotations

import base64
import contextlib
import os
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from custom_metrics_server.runtime.tls import CERT_FILE, KEY_FILE, generate_self_signed
from custom_metrics_server.testing.server_process import ServerProcess, start_server, stop_server
from tests.realnode.node import RealNode, wait_for

#: The APIServices a metrics server registers: (version, group, groupPriorityMinimum,
#: versionPriority), as the chart registers them (metricsApi on, both versions).
API_SERVICES = (
    ("v1beta2", "custom.metrics.k8s.io", 100, 200),
    ("v1beta1", "custom.metrics.k8s.io", 100, 100),
    ("v1beta1", "external.metrics.k8s.io", 100, 100),
    ("v1", "metrics.k8s.io", 100, 200),
    ("v1beta1", "metrics.k8s.io", 100, 100),
)
#: Without `metrics.k8s.io`: for a server run without `--enable-metrics-api`.
CUSTOM_AND_EXTERNAL = API_SERVICES[:3]
APIService = tuple[str, str, int, int]
SERVICE = "custom-metrics-server"


@dataclass
class HostServer:
    """A running server process on the realnode's bridge address, and how to ask it."""

    process: ServerProcess
    node: RealNode
    ca_pem: bytes

    @property
    def url(self) -> str:
        return self.process.url

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def client(self, **kwargs: Any) -> httpx.Client:
        """HTTPS to the server (its certificate verified) as the realnode's admin (x509,
        authenticated by the server with the cluster's client CA)."""
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        context.load_cert_chain(*self.node.admin_cert)
        return httpx.Client(base_url=self.url, verify=context, timeout=30, **kwargs)

    def logs(self) -> str:
        return self.process.logs()


def write_certificate(cert_dir: Path, node: RealNode, namespace: str) -> bytes:
    """A serving certificate for the Service name and the node's bridge address, where
    `serve` finds it (`--cert-dir`); returns its CA (PEM) for `caBundle`."""
    hosts = [f"{SERVICE}.{namespace}.svc", SERVICE, node.node_ip, "127.0.0.1"]
    chain, key, ca = generate_self_signed(hosts)
    cert_dir.mkdir(parents=True, exist_ok=True)
    (cert_dir / KEY_FILE).touch(mode=0o600)
    (cert_dir / KEY_FILE).write_bytes(key)
    (cert_dir / CERT_FILE).write_bytes(chain)
    return ca


def auth_flags(node: RealNode) -> list[str]:
    """Delegated authentication and authorization with metrics-server's permissions."""
    kubeconfig = str(node.metrics_server_kubeconfig)
    return ["--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig]


def start_host_server(
    node: RealNode,
    workdir: Path,
    *args: str,
    namespace: str = "",
    env: Mapping[str, str] | None = None,
) -> HostServer:
    """`serve` on the node's bridge address with `args` (backend flags or
    `--backends-config`), authenticated as module doc says; ready (`/readyz` 200) on return."""
    ca = write_certificate(workdir / "certs", node, namespace or "default")
    process = start_server(
        workdir,
        "--bind-address",
        node.node_ip,
        *auth_flags(node),
        *args,
        demo=False,
        timeout=90,
        env={"KUBECONFIG": str(node.kubeconfig), **(env or {})},
    )
    return HostServer(process, node, ca)


def kubernetes_backend(node: RealNode, **settings: Any) -> dict[str, Any]:
    """A backends-file entry of the Kubernetes backend on the realnode's admin kubeconfig."""
    return {
        "name": "kubernetes",
        "type": "kubernetes",
        "settings": {"kubeconfig": str(node.kubeconfig), **settings},
    }


def write_backends(path: Path, backends: list[dict[str, Any]]) -> None:
    """Write a backends file at once (a staged copy renamed over it), as a reload wants."""
    staged = path.with_suffix(".staged")
    staged.write_text(
        yaml.safe_dump({"cluster": "kubernetes", "backends": backends}, sort_keys=False)
    )
    os.replace(staged, path)


def _objects(
    node: RealNode, server: HostServer, namespace: str, apis: tuple[APIService, ...]
) -> list[dict[str, Any]]:
    bundle = base64.b64encode(server.ca_pem).decode()
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": namespace},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": server.port}]},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{SERVICE}-host",
                "namespace": namespace,
                "labels": {"kubernetes.io/service-name": SERVICE},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [node.node_ip], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": server.port, "protocol": "TCP"}],
        },
        {
            # The HPA controller's identities (its ServiceAccount, and the controller
            # manager's own user when it runs without per-controller credentials) may read
            # the metrics APIs; the server checks that with a SubjectAccessReview.
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": f"{namespace}:metrics-reader"},
            "rules": [
                {
                    "apiGroups": [
                        "custom.metrics.k8s.io",
                        "external.metrics.k8s.io",
                        "metrics.k8s.io",
                    ],
                    "resources": ["*"],
                    "verbs": ["get", "list", "watch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{namespace}:metrics-reader"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": f"{namespace}:metrics-reader",
            },
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": "horizontal-pod-autoscaler",
                    "namespace": "kube-system",
                },
                {
                    "kind": "User",
                    "name": "system:kube-controller-manager",
                    "apiGroup": "rbac.authorization.k8s.io",
                },
            ],
        },
    ]
    for version, group, group_priority, version_priority in apis:
        objects.append(
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": f"{version}.{group}", "labels": {"realnode-tests": namespace}},
                "spec": {
                    "group": group,
                    "version": version,
                    "groupPriorityMinimum": group_priority,
                    "versionPriority": version_priority,
                    "caBundle": bundle,
                    "service": {"name": SERVICE, "namespace": namespace, "port": 443},
                },
            }
        )
    return objects


def available(node: RealNode, apis: tuple[APIService, ...] = API_SERVICES) -> dict[str, str]:
    """Each of our APIServices' Available condition (`True`, or the reason and message)."""
    found = {}
    for version, group, *_ in apis:
        item = node.get("apiservice", f"{version}.{group}")
        conditions = {c["type"]: c for c in item.get("status", {}).get("conditions", ())}
        condition = conditions.get("Available", {})
        found[f"{version}.{group}"] = (
            "True"
            if condition.get("status") == "True"
            else f"{condition.get('reason')}: {condition.get('message')}"
        )
    return found


@contextlib.contextmanager
def register(
    node: RealNode,
    server: HostServer,
    namespace: str,
    apis: tuple[APIService, ...] = API_SERVICES,
) -> Iterator[None]:
    """Register `server` for `apis` (every metrics API unless told) and wait until each
    APIService is Available;
    removes the registration (and the cluster-scoped RBAC) afterwards."""
    node.apply(*_objects(node, server, namespace, apis))

    def all_available() -> dict[str, str]:
        state = available(node, apis)
        if all(value == "True" for value in state.values()):
            return state
        raise AssertionError(state)  # the failure names each condition

    try:
        wait_for("the APIServices to be Available", all_available, timeout=120)
        yield
    finally:
        # Only ours: another user of a shared realnode may have registered since.
        with contextlib.suppress(AssertionError):
            node.kubectl("delete", "apiservice", "-l", f"realnode-tests={namespace}")
        with contextlib.suppress(AssertionError):
            node.kubectl(
                "delete",
                "clusterrolebinding,clusterrole",
                f"{namespace}:metrics-reader",
                "--ignore-not-found",
            )


def stop(server: HostServer) -> None:
    stop_server(server.process)
