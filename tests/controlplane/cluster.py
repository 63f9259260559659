"""A real Kubernetes control plane on loopback for tests: etcd + kube-apiserver (its built-in
aggregator included), and kube-controller-manager on request.

    plane = ControlPlane.start(tmp_dir)            # seconds; free ports; its own PKI
    plane.kubectl("get", "ns")                     # admin (system:masters) kubeconfig
    plane.apply(yaml_text)                         # server-side apply
    kubeconfig = plane.user_kubeconfig("alice", ("dev",))          # client certificate
    kubeconfig = plane.service_account_kubeconfig("ns", "sa")      # `kubectl create token`
    plane.wait_until(lambda: ..., "what we wait for")              # bounded, never a speed check
    plane.start_controllers()                      # kube-controller-manager (HPA, deployments...)
    plane.stop()

Everything listens on 127.0.0.1 on ports picked free at start (never the shared realnode's).
kube-apiserver runs with RBAC, the aggregator's front-proxy flags (`--requestheader-*`,
`--proxy-client-*`), `HPAScaleToZero` on, an audit log of every request (`audit_events`, so a
test can see which calls an identity made), and `--enable-aggregator-routing=false`.

How the aggregator reaches a server on loopback (an ExternalName Service for localhost):
tests/controlplane/apiservices.py. kube-apiserver's node proxy refuses loopback node
addresses (400 "address not allowed"), so no kubelet on 127.0.0.1 is reachable through it:
a scrape through the proxy fails there, after authorization (nodes/proxy) has been checked.

Quirks of the OpenShift-tree binaries in `../shared/k8s` (README there): `/readyz` leaves out
etcd (so readiness also asks `/livez/etcd`), and pods need the ConfigMap
`openshift-service-ca.crt` in their namespace (`create_namespace` makes it, and the ServiceAccount
`default` that kube-controller-manager would otherwise make).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import shutil
import ssl
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import yaml

from tests.controlplane.apiservices import ApiServices
from tests.controlplane.binaries import find_binary
from tests.controlplane.pki import FRONT_PROXY_CLIENT, ClusterPki, make_cluster_pki
from tests.controlplane.processes import RESERVED_PORTS, Process, free_port, write_kubeconfig
from tests.security.pki import Issued

__all__ = ["RESERVED_PORTS", "ControlPlane", "free_port"]

T = TypeVar("T")

SERVICE_CIDR = "10.0.0.0/24"
#: Every request at level Metadata (who did what), SubjectAccessReviews with their body: the
#: user, groups and extra an aggregated server asks about show how the aggregator forwarded them.
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Request
  resources: [{group: authorization.k8s.io, resources: [subjectaccessreviews]}]
- level: Metadata
"""
#: Generous failure limits, not speed targets: a busy 2-core box starts kube-apiserver in
#: 5-15 s; twice that and more is a broken start, and the log says why.
START_LIMIT = 90.0


@dataclass
class ControlPlane(ApiServices):
    """A running etcd + kube-apiserver (+ kube-controller-manager) and its admin tools."""

    base: Path
    pki: ClusterPki
    etcd_port: int
    apiserver_port: int
    kubectl_binary: Path
    processes: dict[str, Process] = field(default_factory=dict)
    etcd_data: Path | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    @classmethod
    def start(cls, base: Path) -> ControlPlane:
        """Make the PKI, start etcd and kube-apiserver, wait until the API answers."""
        base.mkdir(parents=True, exist_ok=True)
        plane = cls(
            base=base,
            pki=make_cluster_pki(base / "pki"),
            etcd_port=free_port(),
            apiserver_port=free_port(),
            kubectl_binary=find_binary("kubectl"),
        )
        atexit.register(plane.stop)
        (base / "audit-policy.yaml").write_text(AUDIT_POLICY)
        write_kubeconfig(
            plane.admin_kubeconfig,
            plane.url,
            plane.pki.ca.cert_file,
            {
                "client-certificate": str(plane.pki.admin.cert_file),
                "client-key": str(plane.pki.admin.key_file),
            },
        )
        try:
            plane._start_etcd()
            plane._start_apiserver()
        except BaseException:
            plane.stop()
            raise
        return plane

    def _start_etcd(self) -> None:
        peer = free_port()
        # etcd 3.4 has no --unsafe-no-fsync: its data goes to tmpfs when there is one.
        shm = Path("/dev/shm")
        data = (shm if shm.is_dir() else self.base) / f"cms-etcd-{uuid.uuid4().hex[:8]}"
        client_url = f"http://127.0.0.1:{self.etcd_port}"
        peer_url = f"http://127.0.0.1:{peer}"
        self._launch(
            "etcd",
            [
                str(find_binary("etcd")),
                "--name",
                "cp",
                "--data-dir",
                str(data),
                "--listen-client-urls",
                client_url,
                "--advertise-client-urls",
                client_url,
                "--listen-peer-urls",
                peer_url,
                "--initial-advertise-peer-urls",
                peer_url,
                "--initial-cluster",
                f"cp={peer_url}",
                "--log-level",
                "warn",
            ],
        )
        self.etcd_data = data

        def healthy() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"{client_url}/health", timeout=2).status_code == 200
            return False

        self.wait_until(healthy, "etcd /health", timeout=30, process="etcd")

    def _apiserver_command(self) -> list[str]:
        pki = self.pki
        return [
            str(find_binary("kube-apiserver")),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={pki.apiserver.cert_file}",
            f"--tls-private-key-file={pki.apiserver.key_file}",
            f"--client-ca-file={pki.ca.cert_file}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            f"--requestheader-client-ca-file={pki.front_proxy_ca.cert_file}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-uid-headers=X-Remote-Uid",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki.front_proxy_client.cert_file}",
            f"--proxy-client-key-file={pki.front_proxy_client.key_file}",
            "--enable-aggregator-routing=false",
            "--endpoint-reconciler-type=none",
            "--feature-gates=HPAScaleToZero=true",
            f"--audit-policy-file={self.base / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}",
            "--v=1",
        ]

    def _start_apiserver(self) -> None:
        self._launch("kube-apiserver", self._apiserver_command())
        self.wait_until(
            self._api_ready,
            "kube-apiserver /readyz, /livez/etcd and namespace default",
            timeout=START_LIMIT,
            process="kube-apiserver",
        )

    def _api_ready(self) -> bool:
        try:
            with self.admin_client(timeout=5) as client:
                return all(
                    client.get(path).status_code == 200
                    for path in ("/readyz", "/livez/etcd", "/api/v1/namespaces/default")
                )
        except httpx.HTTPError:
            return False

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver (SIGTERM, as a rollout does) and start it again on the same
        port and etcd; returns once it answers again and the APIServices that were Available
        before are again (so later tests meet the aggregator as they would have)."""
        listing = self.get_json("/apis/apiregistration.k8s.io/v1/apiservices")["items"]
        available = [
            item["metadata"]["name"]
            for item in listing
            if any(
                c["type"] == "Available" and c["status"] == "True"
                for c in item.get("status", {}).get("conditions", [])
            )
        ]
        self.processes["kube-apiserver"].stop()
        self._start_apiserver()
        self.wait_available(available)

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (through etcd's v3 HTTP gateway,
        as kube-apiserver's own compactor would, only now); returns that revision. A list's
        continue token or a resourceVersion older than it is then 410 Gone."""
        with httpx.Client(base_url=self.etcd_url, timeout=30) as etcd:
            # The range of key "\0" (base64 "AA==") returns nothing but the header's revision.
            header = etcd.post("/v3/kv/range", json={"key": "AA=="}).json()["header"]
            revision = int(header["revision"])
            etcd.post(
                "/v3/kv/compaction", json={"revision": revision, "physical": True}
            ).raise_for_status()
        return revision

    def start_controllers(self, *extra: str) -> None:
        """kube-controller-manager with every default controller but the garbage collector (HPA every 2 s), if not
        running yet; `extra` flags are added on the first start only."""
        if "kube-controller-manager" in self.processes:
            return
        kubeconfig = str(self.admin_kubeconfig)
        self._launch(
            "kube-controller-manager",
            [
                str(find_binary("kube-controller-manager")),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--cert-dir={self.base / 'kcm-certs'}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.pki.sa_key}",
                f"--root-ca-file={self.pki.ca.cert_file}",
                f"--cluster-signing-cert-file={self.pki.ca.cert_file}",
                "--horizontal-pod-autoscaler-sync-period=2s",
                "--feature-gates=HPAScaleToZero=true",
                # No garbage collector: tests give pods a controller reference to a workload
                # they do not create (an Object metric's ReplicaSet), which it would delete;
                # a real ReplicaSet's controller would race them with pods of its own. Nothing
                # here relies on cascading deletion (namespaces are emptied by their controller).
                "--controllers=*,-garbage-collector-controller",
                "--v=1",
                *extra,
            ],
        )

        def default_sa() -> bool:
            result = self.kubectl("-n", "default", "get", "serviceaccount", "default", check=False)
            return result.returncode == 0

        self.wait_until(
            default_sa,
            "kube-controller-manager: ServiceAccount default/default",
            timeout=START_LIMIT,
            process="kube-controller-manager",
        )

    def stop(self) -> None:
        """Stop everything this plane started (controllers, API server, etcd) and drop
        etcd's data."""
        for name in ("kube-controller-manager", "kube-apiserver", "etcd"):
            if name in self.processes:
                self.processes[name].stop()
        if self.etcd_data is not None:
            shutil.rmtree(self.etcd_data, ignore_errors=True)

    def _launch(self, name: str, command: list[str]) -> None:
        (self.base / "logs").mkdir(exist_ok=True)
        process = Process(name, command, self.base / "logs" / f"{name}.log")
        if name == "kube-apiserver":
            process.done_line = b'name="HTTPServerStoppedListening"'

        process.start()
        self.processes[name] = process

    # --- addresses and identities ------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.base / "admin.kubeconfig"

    @property
    def audit_log(self) -> Path:
        return self.base / "logs" / "audit.log"

    def ssl_context(self, cert: Issued | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca.cert_file))
        if cert is not None:
            context.load_cert_chain(cert.cert_file, cert.key_file)
        return context

    def admin_client(self, **kwargs: Any) -> httpx.Client:
        """An HTTPS client to kube-apiserver as admin (system:masters)."""
        options: dict[str, Any] = {"timeout": 30, **kwargs}
        return httpx.Client(base_url=self.url, verify=self.ssl_context(self.pki.admin), **options)

    def user_kubeconfig(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig authenticating as `user` (and `groups`) by client certificate."""
        issued = self.pki.client(user, groups)
        path = self.base / f"{issued.cert_file.stem}.kubeconfig"
        return write_kubeconfig(
            path,
            self.url,
            self.pki.ca.cert_file,
            {"client-certificate": str(issued.cert_file), "client-key": str(issued.key_file)},
        )

    def service_account_token(self, namespace: str, name: str, duration: str = "2h") -> str:
        """A bound token of ServiceAccount `namespace/name` (`kubectl create token`)."""
        result = self.kubectl("-n", namespace, "create", "token", name, f"--duration={duration}")
        return result.stdout.strip()

    def service_account_kubeconfig(self, namespace: str, name: str) -> Path:
        """A kubeconfig holding a token of ServiceAccount `namespace/name`."""
        token = self.service_account_token(namespace, name)
        path = self.base / f"sa-{namespace}-{name}.kubeconfig"
        return write_kubeconfig(path, self.url, self.pki.ca.cert_file, {"token": token})

    # --- kubectl and objects -----------------------------------------------------------------

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        kubeconfig: Path | None = None,
        binary: Path | None = None,
        check: bool = True,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """kubectl (`binary`, default the 1.36 one) with the admin or the given kubeconfig; a
        non-zero exit raises with its stderr when `check`."""
        command = [
            str(binary or self.kubectl_binary),
            f"--kubeconfig={kubeconfig or self.admin_kubeconfig}",
            *args,
        ]
        result = subprocess.run(
            command, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(command)} exited {result.returncode}: {result.stderr}")
        return result

    def apply(
        self,
        documents: str | Sequence[dict[str, Any]],
        *,
        dry_run: bool = False,
        kubeconfig: Path | None = None,
        field_manager: str = "cms-tests",
    ) -> subprocess.CompletedProcess[str]:
        """Server-side apply of YAML text or objects (`--dry-run=server` with `dry_run`)."""
        text = documents if isinstance(documents, str) else yaml.safe_dump_all(documents)
        args = [
            "apply",
            "--server-side",
            "--force-conflicts",
            f"--field-manager={field_manager}",
            "-f",
            "-",
        ]
        if dry_run:
            args.append("--dry-run=server")
        return self.kubectl(*args, input=text, kubeconfig=kubeconfig)

    def get_json(self, path: str) -> Any:
        """GET `path` as admin; the parsed JSON (raises on a non-2xx status)."""
        with self.admin_client() as client:
            response = client.get(path)
        response.raise_for_status()
        return response.json()

    def create_namespace(self, prefix: str) -> str:
        """A new namespace `<prefix>-<random>`, with the ServiceAccount `default` and the
        ConfigMap `openshift-service-ca.crt` pods need (see the module docstring)."""
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.apply(
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": "default", "namespace": name},
                },
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "openshift-service-ca.crt", "namespace": name},
                    "data": {"service-ca.crt": ""},
                },
            ]
        )
        return name

    def audit_events(self) -> Iterator[dict[str, Any]]:
        """Every audit event (level Metadata) kube-apiserver logged so far."""
        if not self.audit_log.exists():
            return
        with open(self.audit_log) as lines:
            for line in lines:
                with contextlib.suppress(json.JSONDecodeError):
                    yield json.loads(line)

    # --- waiting ---------------------------------------------------------------------------

    def wait_until(
        self,
        predicate: Callable[[], T],
        what: str,
        *,
        timeout: float = 60,
        interval: float = 0.1,
        process: str | None = None,
        detail: Callable[[], str] | None = None,
    ) -> T:
        """Poll `predicate` until it returns a true value, which is returned. `timeout` is a
        failure limit for a broken cluster, never a speed check; the failure names `what`,
        `detail()` and the tail of `process`'s log. A `process` that exits fails at once."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            died = process is not None and not self.processes[process].alive()
            if died or time.monotonic() > deadline:
                why = f"{process} exited" if died else f"not within {timeout:g}s"
                message = f"waiting for {what}: {why}"
                if detail is not None:
                    message += f"\n{detail()}"
                if process is not None:
                    message += f"\n--- {process} log ---\n{self.processes[process].tail()}"
                raise AssertionError(message)
            time.sleep(interval)
            interval = min(interval * 1.5, 1.0)
