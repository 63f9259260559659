"""The realnode (`../shared/realnode`): a real control plane and one real node (kubelet,
containerd, runc, a CNI bridge) on this host, as the tests see it.

`RealNode` is what the session fixture `realnode` (tests/realnode/conftest.py) yields: the
paths and URLs of `$REALNODE_DIR/env.sh` and a `kubectl` bound to the admin kubeconfig.
`find_realnode` reads an existing one; `bring_up`/`bring_down` run the scripts. The helpers
below it (`wait_for`, `namespace`, `apply`) are what every real-node test needs: bounded waits
(generous deadlines as failure limits, never speed assertions) and namespaces that are deleted
again.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent.parent
#: Where the scripts are: `$REALNODE_SCRIPTS`, else `<repo>/../shared/realnode`.
SCRIPTS = Path(os.environ.get("REALNODE_SCRIPTS", ROOT.parent / "shared" / "realnode"))
#: `$REALNODE_DIR` as up.sh uses it.
DEFAULT_DIR = Path(os.environ.get("REALNODE_DIR", "/tmp/realnode"))

#: The settings the tier needs (see tests/realnode/README in docs/status.md): the HPA's
#: scale-to-zero gate on both sides, the controllers a DaemonSet (node agent, chart) needs, and
#: the clusterrole-aggregation controller, which folds the MetricDefinition roles into `admin`
#: (test_metric_definitions_hpa.py).
UP_ENV: Mapping[str, str] = {
    "REALNODE_EXTRA_CONTROLLERS": (
        "daemonset-controller,statefulset-controller,job-controller,"
        "clusterrole-aggregation-controller"
    ),
    "REALKUBE_APISERVER_ARGS": "--feature-gates=HPAScaleToZero=true",
    "REALKUBE_KCM_ARGS": "--feature-gates=HPAScaleToZero=true",
}

#: Debian packages up.sh needs, by the command or file that shows each is there.
PACKAGES: Mapping[str, str] = {
    "etcd": "etcd-server",
    "containerd": "containerd",
    "ctr": "containerd",
    "runc": "runc",
}
CNI_DIRS = (Path("/usr/lib/cni"), Path("/opt/cni/bin"))

#: Every namespace the tier creates starts with this: it keeps the tier's objects apart from
#: other users of a shared realnode (and theirs from its clean-up).
NS_PREFIX = "wiprn-"

#: The local images on the node (README "The workload and the images").
BUSYBOX = "localhost/realnode/busybox:1.35.0"


@dataclass(frozen=True)
class RealNode:
    """A running realnode: its files, URLs and an admin `kubectl`."""

    dir: Path
    kubeconfig: Path
    apiserver: str
    ca: Path
    kubelet_url: str
    node: str
    containerd_sock: Path
    k8s_bin: Path
    metrics_server_kubeconfig: Path
    front_proxy_ca: Path
    apiserver_pod_url: str

    @property
    def node_ip(self) -> str:
        """The node's InternalIP, the bridge address (10.244.0.1): the host side of the pod
        network, where a host process listens to be reachable from pods and the aggregator."""
        return self.kubelet_url.split("//", 1)[1].rsplit(":", 1)[0]

    @property
    def admin_cert(self) -> tuple[str, str]:
        """The admin client certificate and key (system:masters), for httpx's `cert=`."""
        pki = self.dir / "cp" / "pki"
        return str(pki / "admin.crt"), str(pki / "admin.key")

    def ssl_context(self) -> ssl.SSLContext:
        """Verifies the API server and the kubelet against the cluster CA, as admin."""
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(*self.admin_cert)
        return context

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 120) -> str:
        """kubectl (the realnode's, v1.36) as admin; stdout, or AssertionError with stderr."""
        result = subprocess.run(
            [str(self.k8s_bin / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            input=input,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def get(self, *args: str) -> Any:
        """`kubectl get ... -o json`, decoded."""
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def raw(self, path: str) -> str:
        """`kubectl get --raw PATH`."""
        return self.kubectl("get", "--raw", path)

    def apply(self, *objects: Mapping[str, Any]) -> None:
        """Server-side apply of `objects` (field manager `realnode-tests`)."""
        documents = yaml.safe_dump_all([dict(o) for o in objects], sort_keys=False)
        self.kubectl(
            "apply", "--server-side", "--force-conflicts", "--field-manager=realnode-tests",
            "-f", "-", input=documents,
        )  # fmt: skip

    def alive(self) -> bool:
        """The API server answers `/readyz` (anonymous) over TLS verified by the cluster CA."""
        return api_ready(self.apiserver, self.ca)


def api_ready(url: str, ca: Path, timeout: float = 5) -> bool:
    try:
        context = ssl.create_default_context(cafile=str(ca))
        with urllib.request.urlopen(f"{url}/readyz", context=context, timeout=timeout) as answer:
            return bool(answer.status == 200)
    except (OSError, ValueError):
        return False


def read_env(path: Path) -> dict[str, str]:
    """`export NAME=value` lines of env.sh (values without quotes or spaces, as up.sh writes)."""
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            name, value = line[len("export ") :].split("=", 1)
            found[name.strip()] = value.strip().strip("'\"")
    return found


def from_env(env: Mapping[str, str]) -> RealNode:
    return RealNode(
        dir=Path(env["REALNODE_DIR"]),
        kubeconfig=Path(env["KUBECONFIG"]),
        apiserver=env["REALNODE_APISERVER"],
        ca=Path(env["REALNODE_CA"]),
        kubelet_url=env["REALNODE_KUBELET"],
        node=env["REALNODE_NODE"],
        containerd_sock=Path(env["REALNODE_CONTAINERD_SOCK"]),
        k8s_bin=Path(env["REALNODE_K8S_BIN"]),
        metrics_server_kubeconfig=Path(env["REALNODE_METRICS_SERVER_KUBECONFIG"]),
        front_proxy_ca=Path(env["REALNODE_FRONT_PROXY_CA"]),
        apiserver_pod_url=env["REALNODE_APISERVER_POD_URL"],
    )


def find_realnode(directory: Path = DEFAULT_DIR) -> RealNode | None:
    """The realnode at `directory` when its env.sh exists and its API server answers."""
    env_file = directory / "env.sh"
    if not env_file.is_file():
        return None
    try:
        node = from_env(read_env(env_file))
    except KeyError:
        return None
    return node if node.alive() else None


def missing_requirements() -> list[str]:
    """Why up.sh cannot run here (empty when it can): OS, user, packages, the scripts."""
    if platform.system() != "Linux":
        return [f"the realnode needs Linux (this is {platform.system()})"]
    problems = []
    if os.geteuid() != 0:
        problems.append("the realnode needs root (it starts containerd and a kubelet, mounts)")
    packages = sorted({pkg for cmd, pkg in PACKAGES.items() if shutil.which(cmd) is None})
    if not any((d / "bridge").exists() for d in CNI_DIRS):
        packages.append("containernetworking-plugins")
    if packages:
        problems.append(f"missing Debian packages: apt-get install {' '.join(sorted(packages))}")
    if not (SCRIPTS / "up.sh").is_file():
        problems.append(f"no realnode scripts at {SCRIPTS} (set $REALNODE_SCRIPTS)")
    if Path("/sys/class/net/realnode0").exists() and not (DEFAULT_DIR / "env.sh").is_file():
        # One realnode per host: its bridge is up but not the one at $REALNODE_DIR. Bringing up
        # another would fight it, and tearing it down break it. (The one at $REALNODE_DIR left
        # half up, its processes gone, is up.sh's business: it runs down.sh first.)
        problems.append(
            "a realnode's bridge realnode0 exists but no realnode answers at "
            f"{DEFAULT_DIR} (set $REALNODE_DIR to its directory, or run its down.sh)"
        )
    return problems


def bring_up(directory: Path = DEFAULT_DIR, timeout: float = 300) -> RealNode:
    """Run up.sh with the tier's settings (`UP_ENV`); its log is in the AssertionError."""
    env = {**os.environ, **UP_ENV, "REALNODE_DIR": str(directory)}
    result = subprocess.run(
        ["bash", str(SCRIPTS / "up.sh")],
        capture_output=True, text=True, env=env, timeout=timeout, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise AssertionError(
            f"realnode up.sh failed ({result.returncode}):\n{result.stdout[-4000:]}"
        )
    node = find_realnode(directory)
    if node is None:
        raise AssertionError(
            f"realnode up.sh succeeded but the API server does not answer:\n{result.stdout[-2000:]}"
        )
    return node


def bring_down(directory: Path = DEFAULT_DIR, timeout: float = 180) -> None:
    env = {**os.environ, "REALNODE_DIR": str(directory)}
    subprocess.run(
        ["bash", str(SCRIPTS / "down.sh")],
        capture_output=True, text=True, env=env, timeout=timeout, check=False,
    )  # fmt: skip


def wait_for(
    what: str, probe: Callable[[], T | None], *, timeout: float = 120, interval: float = 0.5
) -> T:
    """Call `probe` until it returns something true; AssertionError naming
    `what` (and the last exception or value) after `timeout` s. The deadline is a failure
    limit for a busy machine, not a speed target."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = probe()
        except (AssertionError, OSError, ValueError, KeyError, subprocess.SubprocessError) as error:
            value, last = None, error
        else:
            last = value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:.0f}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


@contextlib.contextmanager
def namespace(node: RealNode, name: str) -> Iterator[str]:
    """A namespace of the tests' own (`wiprn-...`), deleted afterwards (without waiting for
    its pods to go: the namespace controller finishes that)."""
    with contextlib.suppress(AssertionError):
        node.kubectl(
            "delete", "namespace", name, "--wait=true", "--timeout=60s", "--ignore-not-found"
        )
    node.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_for(
        f"the default ServiceAccount of {name}",
        lambda: node.kubectl("get", "serviceaccount", "default", "-n", name, "-o", "name"),
        timeout=60,
    )
    try:
        yield name
    finally:
        with contextlib.suppress(AssertionError, subprocess.SubprocessError):
            node.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


def busybox_container(
    name: str, command: list[str], *, requests: Mapping[str, str], limits: Mapping[str, str]
) -> dict[str, Any]:
    """A container of the node's busybox image (never pulled)."""
    return {
        "name": name,
        "image": BUSYBOX,
        "imagePullPolicy": "Never",
        "command": command,
        "resources": {"requests": dict(requests), "limits": dict(limits)},
    }


def deployment(
    namespace: str, name: str, containers: list[dict[str, Any]], *, replicas: int = 1
) -> dict[str, Any]:
    """A Deployment of `containers`, label `app: <name>`, a short grace period."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"terminationGracePeriodSeconds": 1, "containers": containers},
            },
        },
    }


#: A CPU loop (the burner manifest's) and a sleeper.
SPIN = ["sh", "-c", "while :; do :; done"]
SLEEP = ["sh", "-c", "exec sleep 100000"]


def running_pods(node: RealNode, namespace: str, selector: str) -> list[dict[str, Any]]:
    """Pods of `selector` that are Running and Ready (not deleting)."""
    pods = node.get("pods", "-n", namespace, "-l", selector)["items"]
    return [
        pod
        for pod in pods
        if pod["status"].get("phase") == "Running"
        and not pod["metadata"].get("deletionTimestamp")
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in pod["status"].get("conditions", ())
        )
    ]


def wait_ready(
    node: RealNode, namespace: str, selector: str, count: int, timeout: float = 120
) -> list[dict[str, Any]]:
    """Wait until exactly `count` pods of `selector` run and are ready."""
    found = wait_for(
        f"{count} ready pod(s) {selector} in {namespace}",
        lambda: [pods] if len(pods := running_pods(node, namespace, selector)) == count else None,
        timeout=timeout,
    )
    return found[0]
