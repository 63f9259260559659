"""A minimal `realnode` fixture for the real-node tier (the interface the tier's own conftest
provides: the lead keeps that one at merge). It reads `$REALNODE_DIR/env.sh` (default
/tmp/realnode) written by `../shared/realnode/up.sh`, and skips when it is absent or the API
server does not answer; it never brings a node up or down."""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class RealNode:
    """Where the shared realnode is and how to reach it."""

    dir: Path
    kubeconfig: Path
    apiserver: str
    ca: Path
    kubelet_url: str
    node: str
    containerd_sock: Path
    k8s_bin: Path
    metrics_server_kubeconfig: Path

    def kubectl(self, *args: str) -> str:
        """`kubectl` of the node's Kubernetes version as the admin; its stdout."""
        result = subprocess.run(
            [str(self.k8s_bin / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"kubectl {shlex.join(args)}: {result.stderr.strip()}")
        return result.stdout


def _env(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line.removeprefix("export ").partition("=")
            values[key] = value.strip().strip("'\"")
    return values


@pytest.fixture(scope="session")
def realnode() -> RealNode:
    """The running realnode (see the module); skipped when it is not up."""
    base = Path(os.environ.get("REALNODE_DIR", "/tmp/realnode"))
    env_file = base / "env.sh"
    if not env_file.is_file():
        pytest.skip(f"no realnode: {env_file} is absent (../shared/realnode/up.sh)")
    env = _env(env_file)
    node = RealNode(
        dir=base,
        kubeconfig=Path(env["KUBECONFIG"]),
        apiserver=env["REALNODE_APISERVER"],
        ca=Path(env["REALNODE_CA"]),
        kubelet_url=env["REALNODE_KUBELET"],
        node=env["REALNODE_NODE"],
        containerd_sock=Path(env["REALNODE_CONTAINERD_SOCK"]),
        k8s_bin=Path(env["REALNODE_K8S_BIN"]),
        metrics_server_kubeconfig=Path(env["REALNODE_METRICS_SERVER_KUBECONFIG"]),
    )
    try:
        node.kubectl("get", "--raw", "/readyz")
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as err:
        pytest.skip(f"the realnode's API server does not answer: {err}")
    return node
