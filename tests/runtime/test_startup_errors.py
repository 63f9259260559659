"""Start-up failures through the real server process: one last line, no traceback.

Issue 16, item 2: operators read the last lines of `kubectl logs`. For every start-up
dependency the real `serve` (and `node-agent`) process must exit non-zero with one line that
names what failed, the call (verb and URL), what came back and the setting or permission to
fix; the traceback only at debug verbosity (`-v=3`). The dependencies are the fakes of the
other integration tests: the TokenReview/SubjectAccessReview server with the
`extension-apiserver-authentication` ConfigMap (`tests.fakes.auth_webhooks`) and the
kube-apiserver (`tests.fakes.kube_apiserver`), refusing what each case needs.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from custom_metrics_server.testing.server_process import server_command
from tests.fakes.auth_webhooks import FakeAuthApiServer
from tests.fakes.cluster_process import write_kubeconfig
from tests.fakes.kube_apiserver import FakeKubeApiServer

pytestmark = pytest.mark.integration

CONFIGMAP = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"


def run(workdir: Path, *args: str, demo: bool = False, timeout: float = 90) -> tuple[int, str]:
    """Run `serve` to its end; (exit status, stderr)."""
    workdir.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        server_command(workdir, *args, demo=demo),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=workdir,
        check=False,
    )
    return result.returncode, result.stderr


def last_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert lines, "nothing was logged"
    return lines[-1]


def assert_one_line(stderr: str, *parts: str) -> str:
    """The last line is the start-up failure and holds every part; no traceback anywhere."""
    line = last_line(stderr)
    assert " E custom_metrics_server" in line, stderr
    assert "start-up failed: " in line, stderr
    for part in parts:
        assert part in line, (part, stderr)
    assert "Traceback" not in stderr, stderr
    assert stderr.count("start-up failed") == 1, stderr
    return line


@pytest.fixture
def auth(tmp_path: Path) -> Iterator[FakeAuthApiServer]:
    with FakeAuthApiServer() as fake:
        fake.allow_all = True
        fake.write_kubeconfig(tmp_path / "auth-kubeconfig")
        yield fake


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as fake:
        write_kubeconfig(tmp_path / "kubeconfig", fake.url)
        yield fake


def delegated(tmp_path: Path, *, lookup: bool = False) -> list[str]:
    auth = str(tmp_path / "auth-kubeconfig")
    flags = [
        "--kubeconfig",
        str(tmp_path / "kubeconfig"),
        "--authentication-kubeconfig",
        auth,
        "--authorization-kubeconfig",
        auth,
    ]
    return flags if lookup else [*flags, "--authentication-skip-lookup"]


def test_a_forbidden_authentication_configmap_is_one_line_naming_the_role_binding(
    tmp_path: Path, auth: FakeAuthApiServer, api: FakeKubeApiServer
) -> None:
    auth.configmap_forbidden = True
    code, stderr = run(tmp_path / "run", *delegated(tmp_path, lookup=True))
    assert code == 3
    assert_one_line(
        stderr,
        "cannot read ConfigMap kube-system/extension-apiserver-authentication: "
        f"GET {auth.url}{CONFIGMAP} answered 403 Forbidden",
        'User "system:serviceaccount:custom-metrics:custom-metrics-server" cannot get',
        "Fix: the service account needs the RoleBinding to "
        "extension-apiserver-authentication-reader in kube-system "
        "(manifests/base/role-binding-auth-reader.yaml), or pass --authentication-skip-lookup",
    )
    assert not auth.access_reviews  # it never served


def test_the_traceback_is_there_at_debug_verbosity(
    tmp_path: Path, auth: FakeAuthApiServer, api: FakeKubeApiServer
) -> None:
    auth.configmap_forbidden = True
    code, stderr = run(tmp_path / "run", *delegated(tmp_path, lookup=True), "-v=3")
    assert code == 3
    assert "Traceback (most recent call last)" in stderr
    assert "KubeApiError: 403 Forbidden" in stderr
    assert "start-up failed: cannot read ConfigMap" in stderr


def test_a_kubeconfig_that_does_not_exist_is_one_line(
    tmp_path: Path, auth: FakeAuthApiServer
) -> None:
    missing = tmp_path / "nowhere" / "kubeconfig"
    code, stderr = run(
        tmp_path / "run",
        "--kubeconfig",
        str(missing),
        "--authentication-kubeconfig",
        str(tmp_path / "auth-kubeconfig"),
        "--authorization-kubeconfig",
        str(tmp_path / "auth-kubeconfig"),
        "--authentication-skip-lookup",
    )
    assert code == 2
    assert_one_line(
        stderr,
        f"cannot load --kubeconfig {missing}: no such file",
        "Fix: give --kubeconfig (or $KUBECONFIG) a valid kubeconfig file",
    )


def test_an_invalid_delegated_auth_kubeconfig_is_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "auth-kubeconfig"
    broken.write_text("clusters: [\n")
    code, stderr = run(tmp_path / "run", "--authentication-kubeconfig", str(broken))
    assert code == 2
    assert_one_line(
        stderr,
        f"cannot load --authentication-kubeconfig {broken}: ",
        "Fix: give --authentication-kubeconfig a valid kubeconfig file",
    )


def test_credentials_the_api_server_refuses_are_one_line(
    tmp_path: Path, auth: FakeAuthApiServer, api: FakeKubeApiServer
) -> None:
    api.fail_next(kind="list", code=401, reason="Unauthorized", message="Unauthorized", count=50)
    code, stderr = run(tmp_path / "run", *delegated(tmp_path))
    assert code == 3
    assert_one_line(
        stderr,
        "cannot list ",
        f"GET {api.url}/",
        "answered 401 Unauthorized",
        f"Fix: the API server does not accept the credentials of kubeconfig {tmp_path}/kubeconfig",
    )


def test_a_cluster_role_without_list_is_one_line_naming_the_resource(
    tmp_path: Path, auth: FakeAuthApiServer, api: FakeKubeApiServer
) -> None:
    api.fail_next(
        kind="list",
        path="/apis/apps/v1/deployments",
        code=403,
        reason="Forbidden",
        message='deployments.apps is forbidden: User "system:serviceaccount:custom-metrics:'
        'custom-metrics-server" cannot list resource "deployments" in API group "apps" at '
        "the cluster scope",
        count=50,
    )
    code, stderr = run(tmp_path / "run", *delegated(tmp_path))
    assert code == 3
    assert_one_line(
        stderr,
        f"cannot list deployments.apps: GET {api.url}/apis/apps/v1/deployments answered "
        "403 Forbidden",
        "Fix: the service account needs get, list and watch on deployments.apps: the "
        "ClusterRole custom-metrics-server (manifests/base/cluster-role.yaml)",
    )


def test_a_forbidden_lease_namespace_is_one_line_naming_the_role(
    tmp_path: Path, auth: FakeAuthApiServer, api: FakeKubeApiServer
) -> None:
    path = "/apis/coordination.k8s.io/v1/namespaces/locked/leases"
    api.fail_next(path=path, code=403, reason="Forbidden", message="leases is forbidden", count=50)
    code, stderr = run(
        tmp_path / "run",
        *delegated(tmp_path),
        "--leader-elect",
        "--leader-elect-resource-namespace",
        "locked",
    )
    assert code == 3
    assert_one_line(
        stderr,
        "cannot take part in leader election on Lease locked/custom-metrics-server "
        f"(--leader-elect): GET {api.url}{path}/custom-metrics-server answered 403 Forbidden",
        "Fix: the service account needs the verbs get, create and update on leases in locked: "
        "the Role and RoleBinding custom-metrics-server-leader-election",
    )


def test_a_missing_auth_delegator_binding_is_one_line(
    tmp_path: Path, auth: FakeAuthApiServer, api: FakeKubeApiServer
) -> None:
    auth.self_denied = {"subjectaccessreviews"}
    code, stderr = run(tmp_path / "run", *delegated(tmp_path))
    assert code == 3
    assert_one_line(
        stderr,
        f"the identity of kubeconfig {tmp_path}/auth-kubeconfig may not create "
        "subjectaccessreviews.authorization.k8s.io, which delegated authorization needs: "
        f"POST {auth.url}/apis/authorization.k8s.io/v1/selfsubjectaccessreviews answered "
        "allowed: false",
        "Fix: bind the ClusterRole system:auth-delegator",
        "manifests/base/cluster-role-binding-auth-delegator.yaml",
    )


def test_an_api_server_that_cannot_be_reached_is_retried_then_one_line(
    tmp_path: Path, auth: FakeAuthApiServer
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{closed}")
    code, stderr = run(tmp_path / "run", *delegated(tmp_path))
    assert code == 3
    assert "retrying for up to 15s" in stderr  # one warning, then the line
    assert_one_line(
        stderr,
        f"GET http://127.0.0.1:{closed}/",
        "failed: cannot connect (connection refused)",
        f"Fix: check the server address http://127.0.0.1:{closed} in kubeconfig "
        f"{tmp_path}/kubeconfig and that the API server is reachable from here",
    )


@pytest.mark.parametrize("which", ["--tls-cert-file", "--tls-private-key-file"])
def test_a_missing_certificate_file_is_one_line(tmp_path: Path, which: str) -> None:
    files = {
        "--tls-cert-file": tmp_path / "tls.crt",
        "--tls-private-key-file": tmp_path / "tls.key",
    }
    for path in files.values():
        path.write_text("")
    files[which].unlink()
    flags = [part for flag, path in files.items() for part in (flag, str(path))]
    code, stderr = run(tmp_path / "run", *flags, demo=True)
    assert code == 2
    assert_one_line(
        stderr,
        f"cannot read {which} {files[which]}: No such file or directory",
        "Fix: mount the serving certificate Secret at that path",
    )


def test_a_certificate_that_does_not_match_its_key_is_one_line(tmp_path: Path) -> None:
    ca = trustme.CA()  # a certificate with the key of another
    cert = ca.issue_cert("localhost")
    other = ca.issue_cert("localhost")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    other.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    code, stderr = run(
        tmp_path / "run",
        "--tls-cert-file",
        str(tmp_path / "tls.crt"),
        "--tls-private-key-file",
        str(tmp_path / "tls.key"),
        demo=True,
    )
    assert code == 2
    assert_one_line(
        stderr,
        f"cannot load the serving certificate {tmp_path}/tls.crt with the key {tmp_path}/tls.key",
        "Fix: the key must be the certificate's own",
    )


def test_an_invalid_prometheus_configuration_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "rules.yaml"
    config.write_text("rules:\n  - seriesQuery: 42\n    metricsQuery: [\n")
    code, stderr = run(
        tmp_path / "run",
        "--prometheus-url",
        "http://127.0.0.1:1",
        "--config",
        str(config),
        demo=True,
    )
    assert code == 2
    assert_one_line(
        stderr,
        "invalid Prometheus backend configuration: ",
        str(config),
        "Fix: correct --config (prometheus-adapter's format, docs/prometheus.md)",
    )


def test_a_port_in_use_is_one_line_after_the_shutdown(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, stderr = run(tmp_path / "run", "--secure-port", str(port), demo=True)
    assert code == 3
    assert_one_line(
        stderr,
        f"cannot listen on 127.0.0.1:{port}: address already in use",
        "Fix: another process listens there: stop it, or pick another --secure-port or "
        "--bind-address",
    )


def test_the_node_agent_names_a_missing_cri_socket(tmp_path: Path) -> None:
    socket_path = tmp_path / "containerd.sock"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "custom_metrics_server",
            "node-agent",
            "--cri-endpoint",
            f"unix://{socket_path}",
            "--cert-dir",
            str(tmp_path / "certs"),
            "--secure-port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    line = last_line(result.stderr)
    assert "Traceback" not in result.stderr
    assert (
        f"start-up failed: cannot use the CRI socket {socket_path} (--cri-endpoint): no such "
        "file or directory. Fix: mount the runtime's socket there (a hostPath volume of type "
        "Socket)"
    ) in line
