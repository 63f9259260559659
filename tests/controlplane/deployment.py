"""The project's deployment files on the real control plane, and the server run as they say.

`production_build` is `manifests/overlays/production` built by kubectl's own kustomize from a
copy of `manifests/` in which `generate-certs.sh` wrote its certificates. `deploy` applies
every object (server-side), then makes the one change a loopback cluster needs: the Service
`custom-metrics/custom-metrics-server` (ClusterIP, port 443 -> 6443) becomes an ExternalName
Service for `localhost`, and the APIServices' `service.port` the server's loopback port,
because there is no kube-proxy to carry a ClusterIP and the aggregator cannot be routed to a
loopback endpoint (tests/controlplane/cluster.py says why). Their `caBundle` stays the overlay's.

`start_deployed_server` runs `custom-metrics-server serve` out of cluster with the Deployment's
own arguments and environment, the overlay's serving certificate, and the ServiceAccount's
token (`kubectl create token`) as its only credential, for the cluster and for delegated
authentication and authorization alike, as in a pod: so it has exactly the RBAC the files grant.
"""

from __future__ import annotations

import contextlib
import shutil
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from custom_metrics_server.testing.server_process import ServerProcess, start_server, stop_server
from tests.controlplane.cluster import ControlPlane

__all__ = [
    "NAME",
    "NAMESPACE",
    "SERVICE_DNS",
    "Build",
    "deploy",
    "direct_client",
    "production_build",
    "route",
    "start_deployed_server",
]

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "custom-metrics"
NAME = "custom-metrics-server"
SERVICE_DNS = f"{NAME}.{NAMESPACE}.svc"
SA_USER = f"system:serviceaccount:{NAMESPACE}:{NAME}"

Obj = dict[str, Any]


@dataclass(frozen=True)
class Build:
    """A kustomize build and the certificates its Secret and caBundles carry."""

    objects: list[Obj]
    certs: Path  # ca.crt, tls.crt, tls.key
    namespace: str = NAMESPACE  # of the Deployment and its ServiceAccount
    name: str = NAME  # of the Deployment, its ServiceAccount and its Service

    def of_kind(self, kind: str) -> list[Obj]:
        return [o for o in self.objects if o["kind"] == kind]

    def deployment(self) -> Obj:
        (found,) = [o for o in self.of_kind("Deployment") if o["metadata"]["name"] == self.name]
        return found

    def container(self) -> Obj:
        containers: list[Obj] = self.deployment()["spec"]["template"]["spec"]["containers"]
        return containers[0]

    @property
    def service_account(self) -> str:
        name: str = self.deployment()["spec"]["template"]["spec"]["serviceAccountName"]
        return name

    @property
    def user(self) -> str:
        """The ServiceAccount's user name."""
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


def kustomize(plane: ControlPlane, directory: Path) -> list[Obj]:
    """`kubectl kustomize DIR` with the control plane's kubectl, parsed."""
    result = plane.kubectl("kustomize", str(directory))
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def production_build(plane: ControlPlane, workdir: Path) -> Build:
    """The production overlay, built from a copy of `manifests/` with fresh certificates."""
    copy = workdir / "manifests"
    shutil.copytree(ROOT / "manifests", copy, ignore=shutil.ignore_patterns("certs"))
    subprocess.run(
        ["bash", str(copy / "generate-certs.sh")],
        capture_output=True,
        check=True,
        timeout=60,
    )
    overlay = copy / "overlays" / "production"
    return Build(kustomize(plane, overlay), overlay / "certs")


def deploy(plane: ControlPlane, build: Build) -> None:
    """Apply every object of `build` (server-side)."""
    plane.apply(build.objects)


def route(plane: ControlPlane, build: Build, port: int) -> list[str]:
    """Point the build's Service and APIServices at 127.0.0.1:`port` (module docstring);
    returns the APIService names. Idempotent."""
    namespace, name = build.namespace, build.name
    service = plane.get_json(f"/api/v1/namespaces/{namespace}/services/{name}")
    if service["spec"]["type"] != "ExternalName":
        plane.kubectl("-n", namespace, "delete", "service", name)
    plane.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"type": "ExternalName", "externalName": "localhost"},
            }
        ],
        field_manager="cms-tests-loopback",
    )
    names = [o["metadata"]["name"] for o in build.of_kind("APIService")]
    plane.apply(
        [
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": apiservice},
                "spec": {"service": {"namespace": namespace, "name": name, "port": port}},
            }
            for apiservice in names
        ],
        field_manager="cms-tests-loopback",
    )
    return names


def deployment_args(build: Build) -> tuple[list[str], dict[str, str]]:
    """The Deployment's `serve` arguments (minus the port, the certificate paths, which point
    into the pod) and its plain environment, with POD_NAMESPACE resolved as the kubelet would."""
    container = build.container()
    args = [
        a
        for a in container["args"][1:]  # [0] is "serve"
        if not a.startswith(("--secure-port", "--tls-cert-file", "--tls-private-key-file"))
    ]
    env = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        elif item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[item["name"]] = build.namespace
    return args, env


def start_deployed_server(
    plane: ControlPlane,
    build: Build,
    workdir: Path,
    *extra: str,
    port: int = 0,
    replica: str = "",
    kubeconfig: Path | None = None,
) -> ServerProcess:
    """The server as the Deployment runs it, out of cluster, on 127.0.0.1:`port` (0: free),
    with the ServiceAccount's token (or `kubeconfig`); returns once `/readyz` answers 200.
    With `replica`, that is its host name, as a pod's name is (tests/controlplane/replica.py)."""
    if kubeconfig is None:
        kubeconfig = plane.service_account_kubeconfig(build.namespace, build.service_account)
    args, env = deployment_args(build)
    if replica:
        env |= {"CMS_REPLICA_NAME": replica, "PYTHONPATH": str(ROOT)}
    server = start_server(
        workdir,
        *args,
        "--secure-port",
        str(port),
        "--tls-cert-file",
        str(build.certs / "tls.crt"),
        "--tls-private-key-file",
        str(build.certs / "tls.key"),
        "--kubeconfig",
        str(kubeconfig),
        "--authentication-kubeconfig",
        str(kubeconfig),
        "--authorization-kubeconfig",
        str(kubeconfig),
        *extra,
        demo=False,
        ready=False,
        timeout=60,
        env={**env, "KUBECONFIG": str(kubeconfig)},
        module="tests.controlplane.replica" if replica else "custom_metrics_server",
    )
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(httpx.HTTPError), direct_client(server, build) as client:
            if client.get("/readyz").status_code == 200:
                return server
        if time.monotonic() > deadline or server.process.poll() is not None:
            stop_server(server)
            raise AssertionError(f"the deployed server never became ready:\n{server.logs()}")
        time.sleep(0.2)


def direct_client(
    server: ServerProcess, build: Build, token: str | None = None, **kwargs: Any
) -> httpx.Client:
    """A client to the server itself (not through the aggregator), verifying its certificate
    against the overlay's CA. The certificate names only the Service's DNS names, not
    127.0.0.1, so the name is not checked here; the aggregator checks it on its way in."""
    context = ssl.create_default_context(cafile=str(build.certs / "ca.crt"))
    context.check_hostname = False
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(
        base_url=server.url,
        verify=context,
        headers=headers,
        timeout=30,
        **kwargs,
    )
