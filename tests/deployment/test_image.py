"""The built image (`make image`), run by a real container runtime as the Deployment runs it.

The archive `build/image/custom-metrics-server.tar` (`make image`, `.ci/run` builds it before
`make test`) is imported into a private containerd (Debian's, with its own root, state and
socket under /tmp, as tests/node_agent/test_runtime_containerd.py starts it) and run by runc as the
image's user 65534:65534, on a read-only root filesystem, with every capability dropped, on the
host's network (loopback only). Each run is one `ctr run`: `--version`; `serve --demo` to
/readyz; the Deployment's own args (manifests/base/deployment.yaml) against the fake cluster
(`tests.fakes.cluster_process`) with the serving Secret and the kubeconfigs mounted read-only;
`node-agent --help`; and, inside the image, the C reader loaded and nothing of what
scripts/image/prune_venv.py removed ever imported.

Skipped with the reason (failed under CI=true, which builds the archive and installs
containerd) when the archive, containerd or root are missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
import trustme
import yaml

from tests.private_containerd import private_containerd

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent.parent
ARCHIVE = Path(os.environ.get("IMAGE_ARCHIVE", ROOT / "build/image/custom-metrics-server.tar"))
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE = os.environ.get("IMAGE_REF", f"localhost/custom-metrics-server:{VERSION}")
NAMESPACE = "cms-image-test"
#: runc's default set for a container; all dropped (the Deployment's `capabilities.drop: [ALL]`).
CAPABILITIES = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FSETID",
    "FOWNER",
    "MKNOD",
    "NET_RAW",
    "SETGID",
    "SETUID",
    "SETFCAP",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "KILL",
    "AUDIT_WRITE",
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def unavailable(reason: str) -> NoReturn:
    """Skip (fail under CI=true: .ci/run builds the image and installs containerd)."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the image tests: {reason}")
    pytest.skip(reason)


class Ctr:
    """`ctr` against the private containerd, in this test's namespace."""

    def __init__(self, address: Path) -> None:
        self.base = ["ctr", "--address", str(address), "--namespace", NAMESPACE]
        self.runs = 0

    def __call__(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.base, *args], capture_output=True, text=True, timeout=timeout, check=False
        )

    def run_args(
        self, command: list[str], mounts: tuple[str, ...], env: tuple[str, ...]
    ) -> list[str]:
        """A `ctr run` of the image as the Deployment runs it; the user is the image's."""
        self.runs += 1
        flags = ["--rm", "--read-only", "--net-host"]
        flags += [f"--cap-drop=CAP_{name}" for name in CAPABILITIES]
        flags += [f"--mount={mount}" for mount in mounts]
        flags += [f"--env={pair}" for pair in env]
        return [*self.base, "run", *flags, IMAGE, f"cms-test-{os.getpid()}-{self.runs}", *command]

    def run(
        self, *command: str, mounts: tuple[str, ...] = (), env: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.run_args(list(command), mounts, env),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


@pytest.fixture(scope="module")
def ctr() -> Iterator[Ctr]:
    if not ARCHIVE.is_file():
        unavailable(
            f"no image archive at {ARCHIVE}: run `make image` (buildah, docs/deployment.md)"
        )
    if shutil.which("ctr") is None:
        unavailable("ctr is not installed (Debian: apt-get install containerd)")
    with private_containerd(unavailable, prefix="cimg-") as work:
        client = Ctr(work / "containerd.sock")
        imported = client("images", "import", str(ARCHIVE), timeout=300)
        assert imported.returncode == 0, imported.stderr
        assert IMAGE in client("images", "ls", "--quiet").stdout.split()
        yield client


class Running:
    """A server container started with `ctr run` (foreground, in a child process); stopped
    with SIGTERM through `ctr task kill`, then its output is read."""

    def __init__(
        self, ctr: Ctr, command: list[str], mounts: tuple[str, ...] = (), env: tuple[str, ...] = ()
    ) -> None:
        self.ctr = ctr
        args = ctr.run_args(command, mounts, env)
        self.id = args[-len(command) - 1]
        self.output = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed by stop()
        self.process = subprocess.Popen(
            args, stdout=self.output, stderr=subprocess.STDOUT, text=True
        )

    def stop(self) -> tuple[int, str]:
        if self.process.poll() is None:
            self.ctr("task", "kill", "--signal", "SIGTERM", self.id)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.ctr("task", "kill", "--signal", "SIGKILL", self.id)
                self.process.wait(timeout=30)
        self.output.seek(0)
        text = self.output.read()
        self.output.close()
        return self.process.returncode, text

    def wait_ready(self, port: int, context: ssl.SSLContext, *, within: float = 120) -> float:
        """Seconds until /readyz answered 200 (bounded; fails with the container's output)."""
        started = time.monotonic()
        while time.monotonic() - started < within:
            if self.process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(
                    f"https://127.0.0.1:{port}/readyz", context=context, timeout=5
                ) as answer:
                    if answer.status == 200:
                        return time.monotonic() - started
            except OSError:
                pass
            time.sleep(0.2)
        code, text = self.stop()
        pytest.fail(f"not ready on :{port} (exit {code}):\n{text}")


def insecure() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def no_traceback(text: str) -> None:
    assert "Traceback" not in text, text


def test_version(ctr: Ctr) -> None:
    result = ctr.run("custom-metrics-server", "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"custom-metrics-server v{VERSION}"


def test_runs_as_nobody_on_a_read_only_root_without_capabilities(ctr: Ctr) -> None:
    script = "id -u; id -g; pwd; grep CapEff /proc/self/status; touch probe || echo read-only"
    result = ctr.run("sh", "-c", script)
    assert result.returncode == 0, result.stderr
    uid, gid, cwd, caps, probe = result.stdout.split("\n")[:5]
    assert (uid, gid) == ("65534", "65534")
    assert cwd == "/var/lib/custom-metrics-server"  # the final stage's WORKDIR
    assert caps.split() == ["CapEff:", "0000000000000000"]
    assert probe == "read-only"
    assert "Read-only file system" in result.stderr


def test_the_c_reader_is_loaded_and_nothing_pruned_is_imported(ctr: Ctr) -> None:
    """Every module of the package imports in the pruned venv, the kubeconfig loader runs, the
    kubelet reader is the C one, and none of what prune_venv.py removed is loaded."""
    script = """
import importlib, pkgutil, sys
import custom_metrics_server
for module in pkgutil.walk_packages(custom_metrics_server.__path__, "custom_metrics_server."):
    if not module.name.endswith("__main__"):
        importlib.import_module(module.name)
from custom_metrics_server.kubelet_format import runs as kubelet_runs
from custom_metrics_server.kube.config import KubeConfigError, load_connection
try:
    load_connection("/etc/hostname")
except KubeConfigError as err:
    print("loader:", err.reason[:40])
print("scanner:", kubelet_runs.SCANNER.__module__)
pruned = ("pip", "setuptools", "aiohttp", "yarl", "multidict", "frozenlist", "attr",
          "kubernetes.aio", "kubernetes.client.api.", "kubernetes.client.models.")
print("pruned:", sorted(m for m in sys.modules if m.startswith(pruned)))
print("kubernetes:", sorted(m for m in sys.modules if m.startswith("kubernetes"))[:3])
"""
    result = ctr.run("python", "-P", "-c", script)
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(": ", 1) for line in result.stdout.strip().splitlines())
    assert lines["scanner"] == "custom_metrics_server.kubelet_format._scan"
    assert lines["pruned"] == "[]"
    assert lines["kubernetes"].startswith("['kubernetes', 'kubernetes.client'")
    assert lines["loader"]  # it ran and refused a file that is no kubeconfig


def test_serve_demo_on_a_read_only_root(ctr: Ctr) -> None:
    port = free_port()
    running = Running(ctr, ["custom-metrics-server", "serve", "--demo", f"--secure-port={port}"])
    try:
        seconds = running.wait_ready(port, insecure())
    finally:
        code, text = running.stop()
    print(f"serve --demo in the image: ready in {seconds:.2f} s")  # docs/performance.md
    assert code == 0, text
    no_traceback(text)
    assert "serving a self-signed certificate kept in memory" in text, text
    assert "cannot write its kubeconfig to /var/lib/custom-metrics-server/" in text, text
    assert "BEGIN CERTIFICATE" in text  # the CA, printed instead


def deployment_args() -> list[str]:
    documents = yaml.safe_load_all((ROOT / "manifests/base/deployment.yaml").read_text())
    (deployment,) = [d for d in documents if d and d.get("kind") == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return list(container["args"])


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Path]:
    """The fake cluster (kube-apiserver and the auth webhooks) on loopback; its kubeconfigs
    and a serving pair in tmp_path/mounted."""
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.fakes.cluster_process",
            "--nodes",
            "2",
            "--pods-per-node",
            "2",
            "--namespaces",
            "2",
            "--kubeconfig",
            str(mounted / "kubeconfig"),
            "--auth-kubeconfig",
            str(mounted / "auth-kubeconfig"),
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("ready "), "the fake cluster did not start"
        ca = trustme.CA()
        leaf = ca.issue_cert("localhost", "127.0.0.1")
        leaf.cert_chain_pems[0].write_to_path(str(mounted / "tls.crt"))
        leaf.private_key_pem.write_to_path(str(mounted / "tls.key"))
        for path in mounted.iterdir():
            path.chmod(0o644)  # readable by 65534, as a Secret volume's files are
        mounted.chmod(0o755)
        yield mounted
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def out_of_cluster(mounted: Path, port: int) -> tuple[list[str], tuple[str, ...], tuple[str, ...]]:
    """The Deployment's args with the fake's kubeconfigs for the in-cluster settings."""
    args = [
        a if not a.startswith("--secure-port=") else f"--secure-port={port}"
        for a in deployment_args()
    ]
    assert args[0] == "serve"
    assert f"--secure-port={port}" in args
    args += [
        "--kubeconfig=/etc/cms/kubeconfig",
        "--authentication-kubeconfig=/etc/cms/auth-kubeconfig",
        "--authorization-kubeconfig=/etc/cms/auth-kubeconfig",
        "--authentication-skip-lookup",
    ]
    mounts = (
        f"type=bind,src={mounted},dst=/var/run/serving-cert,options=rbind:ro",
        f"type=bind,src={mounted},dst=/etc/cms,options=rbind:ro",
    )
    return ["custom-metrics-server", *args], mounts, ("POD_NAMESPACE=default",)


def test_the_deployment_args_need_a_writable_tmp_for_inline_kubeconfig_data(
    ctr: Ctr, cluster: Path
) -> None:
    """Out of cluster on a bare read-only root: the auth kubeconfig's inline CA has nowhere to
    go, which is one line naming TMPDIR (in a pod the in-cluster settings need no file)."""
    command, mounts, env = out_of_cluster(cluster, free_port())
    result = ctr.run(*command, mounts=mounts, env=env)
    no_traceback(result.stderr)
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "cannot load --authentication-kubeconfig /etc/cms/auth-kubeconfig" in last, last
    assert "set TMPDIR to a writable directory" in last, last


def test_the_deployment_args_against_the_fake_cluster(ctr: Ctr, cluster: Path) -> None:
    port = free_port()
    command, mounts, env = out_of_cluster(cluster, port)
    tmp = "type=tmpfs,src=tmpfs,dst=/tmp,options=nosuid:nodev:mode=1777"
    running = Running(ctr, command, (*mounts, tmp), env)
    try:
        running.wait_ready(port, insecure())
        with urllib.request.urlopen(
            f"https://127.0.0.1:{port}/livez", context=insecure(), timeout=10
        ) as answer:
            assert answer.status == 200
    finally:
        code, text = running.stop()
    assert code == 0, text
    no_traceback(text)


def test_node_agent_help(ctr: Ctr) -> None:
    result = ctr.run("custom-metrics-server", "node-agent", "--help")
    assert result.returncode == 0, result.stderr
    assert "--cri-endpoint" in result.stdout
