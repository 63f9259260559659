"""Static checks of the deployment: `manifests/` (kustomize), `generate-certs.sh`, `Dockerfile`.

The kustomize builds run the real `kubectl kustomize` (skipped when kubectl is missing). The
production overlay is built from a temporary copy of `manifests/` in which `generate-certs.sh`
has written its certificates, so no key material is ever left in the repository. Docker cannot
run here, so the Dockerfile and `.dockerignore` are read, not built.

Every build applied to a real API server, and the server run with only the RBAC it grants:
tests/controlplane/test_deployment_files.py.
"""

from __future__ import annotations

import argparse
import base64
import fnmatch
import json
import os
import queue
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from custom_metrics_server.cli import build_parser
from tests.pod_security import enforced_level, pod_spec, violations

ROOT = Path(__file__).resolve().parent.parent.parent
MANIFESTS = ROOT / "manifests"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"

NAMESPACE = "custom-metrics"
NAME = "custom-metrics-server"
SERVICE_DNS = f"{NAME}.{NAMESPACE}.svc"
SERVICE_NAMES = [NAME, f"{NAME}.{NAMESPACE}", SERVICE_DNS, f"{SERVICE_DNS}.cluster.local"]
TLS_SECRET = "custom-metrics-server-tls"
SA_SUBJECT = {"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}
#: APIService name -> (group, version, groupPriorityMinimum, versionPriority)
API_SERVICES = {
    "v1beta2.custom.metrics.k8s.io": ("custom.metrics.k8s.io", "v1beta2", 100, 200),
    "v1beta1.custom.metrics.k8s.io": ("custom.metrics.k8s.io", "v1beta1", 100, 100),
    "v1beta1.external.metrics.k8s.io": ("external.metrics.k8s.io", "v1beta1", 100, 100),
}

Obj = dict[str, Any]


# --- builds -----------------------------------------------------------------------------------


def kustomize(directory: Path) -> list[Obj]:
    """`kubectl kustomize DIR`, parsed; skips the test when kubectl is not installed."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def generate_certs(out_dir: Path | None, *, cwd: Path, script: Path) -> None:
    """Run generate-certs.sh (skips when openssl is missing)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    args = ["bash", str(script)] + ([str(out_dir)] if out_dir else [])
    result = subprocess.run(args, capture_output=True, text=True, cwd=cwd, check=False)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def base() -> list[Obj]:
    return kustomize(MANIFESTS / "base")


@pytest.fixture(scope="module")
def production_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of manifests/ whose production overlay has freshly generated certificates.

    The script runs without arguments, so its default output directory (next to the overlay,
    relative to the script's own location) is what gets exercised.
    """
    copy = tmp_path_factory.mktemp("manifests") / "manifests"
    shutil.copytree(MANIFESTS, copy, ignore=shutil.ignore_patterns("certs"))
    generate_certs(None, cwd=copy.parent, script=copy / "generate-certs.sh")
    return copy / "overlays" / "production"


@pytest.fixture(scope="module")
def production(production_dir: Path) -> list[Obj]:
    return kustomize(production_dir)


@pytest.fixture(scope="module")
def cert_manager() -> list[Obj]:
    return kustomize(MANIFESTS / "overlays" / "cert-manager")


def select(objects: list[Obj], kind: str, name: str | None = None) -> list[Obj]:
    return [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = select(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def container(objects: list[Obj]) -> Obj:
    containers: list[Obj] = one(objects, "Deployment", NAME)["spec"]["template"]["spec"][
        "containers"
    ]
    assert len(containers) == 1
    return containers[0]


def serve_parser() -> argparse.ArgumentParser:
    """The `serve` subcommand's parser, out of the real `build_parser()`."""
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices["serve"]  # type: ignore[no-any-return]
    raise AssertionError("build_parser() has no subcommands")


# --- kustomize layout -------------------------------------------------------------------------


def test_base_has_one_object_per_file_and_lists_every_file() -> None:
    base_dir = MANIFESTS / "base"
    resources = yaml.safe_load((base_dir / "kustomization.yaml").read_text())["resources"]
    # The CRDs come from manifests/crds (tests/deployment/test_manifests_crds.py).
    listed = [r for r in resources if not r.startswith("../")]
    assert [r for r in resources if r.startswith("../")] == ["../crds"]
    on_disk = sorted(p.name for p in base_dir.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(listed) == on_disk
    for name in on_disk:
        documents = [d for d in yaml.safe_load_all((base_dir / name).read_text()) if d]
        assert len(documents) == 1, f"{name} holds {len(documents)} objects"
        kind = documents[0]["kind"]
        # Named by kind (and role): deployment.yaml, cluster-role-binding-....yaml, ...
        kebab = re.sub(r"(?<!^)(?=[A-Z][a-z])", "-", kind).lower()  # APIService: api-service
        assert name.startswith(kebab), f"{name} holds a {kind}"


def test_production_overlay_refuses_to_build_without_certificates(
    tmp_path: Path,
) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    copy = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, copy, ignore=shutil.ignore_patterns("certs"))
    result = subprocess.run(
        [kubectl, "kustomize", str(copy / "overlays" / "production")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert "certs/" in result.stderr


def test_generated_certificates_are_gitignored() -> None:
    patterns = (MANIFESTS / "overlays" / "production" / ".gitignore").read_text().split()
    assert "/certs/" in patterns or "certs/" in patterns


# --- APIService -------------------------------------------------------------------------------


@pytest.mark.parametrize("build", ["base", "production", "cert_manager"])
def test_api_services_are_named_version_group_with_the_usual_priorities(
    build: str, request: pytest.FixtureRequest
) -> None:
    objects: list[Obj] = request.getfixturevalue(build)
    services = {o["metadata"]["name"]: o for o in select(objects, "APIService")}
    assert set(services) == set(API_SERVICES)
    for name, (group, version, group_priority, version_priority) in API_SERVICES.items():
        spec = services[name]["spec"]
        assert name == f"{spec['version']}.{spec['group']}"
        assert (spec["group"], spec["version"]) == (group, version)
        assert spec["groupPriorityMinimum"] == group_priority
        assert spec["versionPriority"] == version_priority
        assert "insecureSkipTLSVerify" not in spec


@pytest.mark.parametrize("build", ["base", "production", "cert_manager"])
def test_api_services_point_at_the_service(build: str, request: pytest.FixtureRequest) -> None:
    objects: list[Obj] = request.getfixturevalue(build)
    for api_service in select(objects, "APIService"):
        ref = api_service["spec"]["service"]
        service = one(objects, "Service", ref["name"])
        assert service["metadata"]["namespace"] == ref["namespace"] == NAMESPACE
        assert ref.get("port", 443) in [p["port"] for p in service["spec"]["ports"]]


@pytest.mark.parametrize("build", ["base", "production"])
def test_api_services_carry_a_ca_bundle(build: str, request: pytest.FixtureRequest) -> None:
    objects: list[Obj] = request.getfixturevalue(build)
    for api_service in select(objects, "APIService"):
        assert base64.b64decode(api_service["spec"]["caBundle"])


def test_base_ca_bundle_is_a_marked_placeholder(base: list[Obj]) -> None:
    for api_service in select(base, "APIService"):
        decoded = base64.b64decode(api_service["spec"]["caBundle"], validate=True)
        assert decoded.startswith(b"PLACEHOLDER")
        assert b"CERTIFICATE-----" not in decoded


def test_production_ca_bundle_is_the_generated_ca(
    production: list[Obj], production_dir: Path
) -> None:
    ca_pem = (production_dir / "certs" / "ca.crt").read_bytes()
    x509.load_pem_x509_certificate(ca_pem)
    for api_service in select(production, "APIService"):
        assert base64.b64decode(api_service["spec"]["caBundle"]) == ca_pem


def test_cert_manager_overlay_injects_the_ca_of_the_serving_certificate(
    cert_manager: list[Obj],
) -> None:
    serving = one(cert_manager, "Certificate", "custom-metrics-server-serving")
    for api_service in select(cert_manager, "APIService"):
        annotations = api_service["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == (
            f"{serving['metadata']['namespace']}/{serving['metadata']['name']}"
        )
        # cainjector owns caBundle: a value in the manifest would fight it on every apply.
        assert "caBundle" not in api_service["spec"]
    assert serving["spec"]["secretName"] == TLS_SECRET
    assert sorted(serving["spec"]["dnsNames"]) == sorted(SERVICE_NAMES)
    assert "server auth" in serving["spec"]["usages"]


def test_cert_manager_overlay_chains_self_signed_to_ca_to_serving(
    cert_manager: list[Obj],
) -> None:
    issuers = {o["metadata"]["name"]: o for o in select(cert_manager, "Issuer")}
    certificates = {o["metadata"]["name"]: o for o in select(cert_manager, "Certificate")}
    serving = certificates["custom-metrics-server-serving"]["spec"]
    ca_issuer = issuers[serving["issuerRef"]["name"]]["spec"]
    ca_certificate = next(
        c["spec"]
        for c in certificates.values()
        if c["spec"]["secretName"] == ca_issuer["ca"]["secretName"]
    )
    assert ca_certificate["isCA"] is True
    assert "selfSigned" in issuers[ca_certificate["issuerRef"]["name"]]["spec"]
    for obj in [*issuers.values(), *certificates.values()]:
        assert obj["metadata"]["namespace"] == NAMESPACE


# --- TLS material -----------------------------------------------------------------------------


def test_production_secret_holds_a_serving_certificate_valid_for_the_service(
    production: list[Obj],
) -> None:
    secret = one(production, "Secret", TLS_SECRET)
    assert secret["metadata"]["namespace"] == NAMESPACE
    assert secret["type"] == "kubernetes.io/tls"
    data = {key: base64.b64decode(value) for key, value in secret["data"].items()}
    assert set(data) == {"tls.crt", "tls.key", "ca.crt"}  # never the CA key
    ca = x509.load_pem_x509_certificate(data["ca.crt"])
    leaf, *intermediates = x509.load_pem_x509_certificates(data["tls.crt"])
    for name in SERVICE_NAMES:
        verifier = PolicyBuilder().store(Store([ca])).build_server_verifier(x509.DNSName(name))
        chain = verifier.verify(leaf, intermediates)
        assert chain[-1] == ca
    wrong = (
        PolicyBuilder()
        .store(Store([ca]))
        .build_server_verifier(x509.DNSName("kubernetes.default.svc"))
    )
    with pytest.raises(VerificationError):
        wrong.verify(leaf, intermediates)
    usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usages
    key = serialization.load_pem_private_key(data["tls.key"], password=None)
    public = serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    assert key.public_key().public_bytes(*public) == leaf.public_key().public_bytes(*public)


def test_generate_certs_writes_to_the_given_directory_and_keeps_the_ca(tmp_path: Path) -> None:
    out = tmp_path / "out"
    script = MANIFESTS / "generate-certs.sh"
    generate_certs(out, cwd=tmp_path, script=script)
    first = {name: (out / name).read_bytes() for name in ("ca.crt", "ca.key", "tls.crt")}
    assert (out / "ca.key").stat().st_mode & 0o077 == 0
    assert (out / "tls.key").stat().st_mode & 0o077 == 0
    generate_certs(out, cwd=tmp_path, script=script)
    # A second run rotates the serving certificate under the same CA (same caBundle).
    assert (out / "ca.crt").read_bytes() == first["ca.crt"]
    assert (out / "ca.key").read_bytes() == first["ca.key"]
    assert (out / "tls.crt").read_bytes() != first["tls.crt"]


def _start(
    command: list[str], cwd: Path, timeout: float
) -> tuple[subprocess.Popen[str], threading.Thread, int]:
    """Start the server; return it, the thread reading its output, and its port once the
    banner is printed."""
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    stdout = process.stdout

    def read() -> None:
        with stdout:
            for line in stdout:
                lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    seen = ""
    while " on https://" not in seen:
        try:
            seen += lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            _stop(process, reader)
            raise AssertionError(f"server did not start:\n{seen}") from None
    port = int(seen.split(" on https://", 1)[1].split()[0].rsplit(":", 1)[1])
    return process, reader, port


def _stop(process: subprocess.Popen[str], reader: threading.Thread) -> None:
    """SIGTERM, SIGKILL after 15 s; then the reader sees EOF and closes the pipe."""
    process.terminate()
    try:
        process.wait(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        reader.join(timeout=5)


def _get(port: int, path: str, context: ssl.SSLContext) -> bytes:
    """One HTTP/1.1 GET over TLS to 127.0.0.1, verifying the certificate for the Service name."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=SERVICE_DNS) as tls,
    ):
        tls.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {SERVICE_DNS}\r\nConnection: close\r\n\r\n".encode()
        )
        response = b""
        while chunk := tls.recv(65536):
            response += chunk
    return response


@pytest.mark.integration
def test_server_serves_the_generated_certificate_as_the_aggregator_checks_it(
    production_dir: Path, tmp_path: Path
) -> None:
    """The real server loads tls.crt/tls.key; a client trusting only ca.crt, dialling by the
    Service's DNS name as kube-aggregator does, completes the handshake and gets the probes."""
    certs = production_dir / "certs"
    command = [
        sys.executable, "-m", "custom_metrics_server", "serve", "--demo",
        "--secure-port=0",
        f"--tls-cert-file={certs / 'tls.crt'}",
        f"--tls-private-key-file={certs / 'tls.key'}",
        f"--cert-dir={tmp_path}",
    ]  # fmt: skip
    process, reader, port = _start(command, tmp_path, timeout=30)
    try:
        context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        deadline = time.monotonic() + 30
        while not _get(port, "/readyz", context).startswith(b"HTTP/1.1 200"):
            assert time.monotonic() < deadline, "never ready"
            time.sleep(0.1)
        assert _get(port, "/livez", context).startswith(b"HTTP/1.1 200")
        untrusting = ssl.create_default_context()
        with pytest.raises(ssl.SSLCertVerificationError):
            _get(port, "/livez", untrusting)
    finally:
        _stop(process, reader)


# --- Deployment -------------------------------------------------------------------------------


def test_deployment_is_hardened(base: list[Obj]) -> None:
    deployment = one(base, "Deployment", NAME)
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    main = container(base)
    pod_security = pod["securityContext"]
    security = main["securityContext"]
    assert pod_security["runAsNonRoot"] is True
    assert pod_security["runAsUser"] == 65534
    assert security.get("runAsUser", 65534) == 65534
    assert security.get("runAsNonRoot", True) is True
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert "add" not in security["capabilities"]
    assert pod_security["seccompProfile"]["type"] == "RuntimeDefault"
    for host_namespace in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(host_namespace)
    assert all("hostPath" not in v for v in pod["volumes"])
    # The server talks to kube-apiserver with its ServiceAccount token.
    assert pod.get("automountServiceAccountToken", True) is True
    assert pod["serviceAccountName"] == one(base, "ServiceAccount", NAME)["metadata"]["name"]
    assert main["resources"]["requests"]["memory"]
    assert main["resources"]["limits"]["memory"]
    mounts = {m["mountPath"]: m["name"] for m in main["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    namespace = one(base, "Namespace", NAMESPACE)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_deployment_spreads_replicas_across_nodes_with_a_disruption_budget(
    base: list[Obj],
) -> None:
    deployment = one(base, "Deployment", NAME)
    template = deployment["spec"]["template"]
    labels = template["metadata"]["labels"]
    spread = template["spec"].get("topologySpreadConstraints", [])
    anti = template["spec"].get("affinity", {}).get("podAntiAffinity", {})
    by_host = [c for c in spread if c["topologyKey"] == "kubernetes.io/hostname"]
    assert by_host or anti
    for constraint in by_host:
        assert constraint["labelSelector"]["matchLabels"].items() <= labels.items()
    budget = one(base, "PodDisruptionBudget", NAME)
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_probes_use_https_on_livez_and_readyz(base: list[Obj]) -> None:
    main = container(base)
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    expected = {"livenessProbe": "/livez", "readinessProbe": "/readyz"}
    for probe, path in expected.items():
        get = main[probe]["httpGet"]
        assert get["path"] == path
        assert get["scheme"] == "HTTPS"
        assert ports.get(get["port"], get["port"]) == 6443
    if "startupProbe" in main:
        assert main["startupProbe"]["httpGet"]["scheme"] == "HTTPS"


def test_container_args_are_flags_the_serve_command_accepts(base: list[Obj]) -> None:
    main = container(base)
    assert "command" not in main, "the image's ENTRYPOINT is the console script"
    args: list[str] = main["args"]
    assert args[0] == "serve"
    known = set(serve_parser()._option_string_actions)
    for arg in args[1:]:
        flag = arg.split("=", 1)[0]
        if flag.startswith("-"):
            # Exact names only: argparse would also accept an abbreviation.
            assert flag in known, f"{flag} is not a flag of `custom-metrics-server serve`"
    try:
        parsed = build_parser().parse_args(args)
    except SystemExit:
        pytest.fail(f"custom-metrics-server rejects {args}")
    # --demo is loopback-only and unauthenticated: never in a Deployment.
    assert parsed.demo is False
    assert parsed.demo_file is None
    assert parsed.secure_port == 6443
    assert parsed.secure_port in [p["containerPort"] for p in main["ports"]]


def test_serving_certificate_comes_from_the_tls_secret(
    base: list[Obj], production: list[Obj]
) -> None:
    main = container(base)
    parsed = build_parser().parse_args(main["args"])
    pod = one(base, "Deployment", NAME)["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    secret_keys = set(one(production, "Secret", TLS_SECRET)["data"])
    for path in (parsed.tls_cert_file, parsed.tls_private_key_file):
        mount = next(m for m in main["volumeMounts"] if Path(m["mountPath"]) == path.parent)
        assert mount.get("readOnly") is True
        assert volumes[mount["name"]]["secret"]["secretName"] == TLS_SECRET
        assert path.name in secret_keys


def test_service_forwards_443_to_the_secure_port(base: list[Obj]) -> None:
    service = one(base, "Service", NAME)
    labels = one(base, "Deployment", NAME)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    (port,) = service["spec"]["ports"]
    assert port["port"] == 443
    assert port["targetPort"] == 6443


def test_namespaced_objects_live_in_custom_metrics(base: list[Obj]) -> None:
    elsewhere = [
        (o["kind"], o["metadata"]["name"], o["metadata"]["namespace"])
        for o in base
        if o["metadata"].get("namespace", NAMESPACE) != NAMESPACE
    ]
    assert elsewhere == [("RoleBinding", "custom-metrics-server-auth-reader", "kube-system")]


# --- RBAC -------------------------------------------------------------------------------------


def test_rbac_delegates_authentication_and_authorization(base: list[Obj]) -> None:
    delegators = [
        b
        for b in select(base, "ClusterRoleBinding")
        if b["roleRef"]
        == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "system:auth-delegator",
        }
    ]
    assert len(delegators) == 1
    assert delegators[0]["subjects"] == [SA_SUBJECT]
    readers = [
        b
        for b in select(base, "RoleBinding")
        if b["roleRef"]["name"] == "extension-apiserver-authentication-reader"
    ]
    assert len(readers) == 1
    assert readers[0]["metadata"]["namespace"] == "kube-system"
    assert readers[0]["roleRef"]["kind"] == "Role"
    assert readers[0]["subjects"] == [SA_SUBJECT]


def _rules_granted_cluster_wide(objects: list[Obj], subject: Obj) -> list[Obj]:
    roles = {r["metadata"]["name"]: r for r in select(objects, "ClusterRole")}
    return [
        rule
        for binding in select(objects, "ClusterRoleBinding")
        if subject in binding["subjects"] and binding["roleRef"]["name"] in roles
        for rule in roles[binding["roleRef"]["name"]]["rules"]
    ]


def _allows(rules: list[Obj], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r.get("apiGroups", []) and resource in r["resources"] and verb in r["verbs"]
        for r in rules
    )


def test_cluster_role_reads_the_inventory_and_nothing_more(base: list[Obj]) -> None:
    rules = _rules_granted_cluster_wide(base, SA_SUBJECT)
    wanted = {
        "": ["pods", "nodes", "namespaces", "services"],
        "apps": ["replicasets", "deployments", "statefulsets", "daemonsets"],
        "batch": ["jobs"],
        "networking.k8s.io": ["ingresses"],
    }
    for group, resources in wanted.items():
        for resource in resources:
            for verb in ("get", "list", "watch"):
                assert _allows(rules, group, resource, verb), f"{verb} {group}/{resource}"
    assert _allows(rules, "", "nodes/metrics", "get")
    assert _allows(rules, "", "nodes/proxy", "get")
    own = one(base, "ClusterRole", NAME)["rules"]
    # The one kind it writes: MetricDefinitions' status, and Events about them; never their spec.
    writes = [
        {
            "apiGroups": ["metrics.custom-metrics-server.io"],
            "resources": ["metricdefinitions/status"],
            "verbs": ["update"],
        },
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
    ]
    assert [r for r in own if r in writes] == writes
    assert _allows(rules, "metrics.custom-metrics-server.io", "metricdefinitions", "watch")
    for verb in ("get", "create", "update", "patch", "delete"):
        assert not _allows(rules, "metrics.custom-metrics-server.io", "metricdefinitions", verb)
    for rule in own:
        if rule in writes:
            continue
        assert set(rule["verbs"]) <= {"get", "list", "watch"}
        assert "*" not in rule["resources"]
        assert "*" not in rule["apiGroups"]
        assert "configmaps" not in rule["resources"]
        assert "secrets" not in rule["resources"]
    # The one ConfigMap it reads is granted in kube-system only (auth reader RoleBinding).
    for verb in ("get", "list", "watch"):
        assert not _allows(rules, "", "configmaps", verb)


def test_hpa_controller_may_read_both_metrics_apis(base: list[Obj]) -> None:
    hpa = {
        "kind": "ServiceAccount",
        "name": "horizontal-pod-autoscaler",
        "namespace": "kube-system",
    }
    role = one(base, "ClusterRole", "custom-metrics-server-resources")
    rules = _rules_granted_cluster_wide(base, hpa)
    assert rules == role["rules"]
    for group in ("custom.metrics.k8s.io", "external.metrics.k8s.io"):
        for verb in ("get", "list", "watch"):
            assert _allows(rules, group, "*", verb)
    assert all(set(r["verbs"]) <= {"get", "list", "watch"} for r in rules)


def test_metrics_reading_is_aggregated_into_view_edit_and_admin(base: list[Obj]) -> None:
    for level in ("view", "edit", "admin"):
        label = f"rbac.authorization.k8s.io/aggregate-to-{level}"
        roles = [
            r for r in select(base, "ClusterRole") if r["metadata"]["labels"].get(label) == "true"
        ]
        assert roles, f"nothing aggregates into {level}"
        rules = [rule for role in roles for rule in role["rules"]]
        for group in ("custom.metrics.k8s.io", "external.metrics.k8s.io"):
            assert _allows(rules, group, "*", "get")
        metric_rules = [r for r in rules if "custom.metrics.k8s.io" in r["apiGroups"]]
        assert all(set(r["verbs"]) <= {"get", "list", "watch"} for r in metric_rules)


def test_metric_definitions_are_managed_by_admin_and_edit_and_read_by_view(
    base: list[Obj],
) -> None:
    """No binding of ours: the aggregation labels put the rules into Kubernetes' own admin,
    edit and view ClusterRoles (kube-controller-manager's clusterrole-aggregation)."""
    group, resource = "metrics.custom-metrics-server.io", "metricdefinitions"
    write = ("create", "update", "patch", "delete", "deletecollection")
    for level, may_write in (("admin", True), ("edit", True), ("view", False)):
        label = f"rbac.authorization.k8s.io/aggregate-to-{level}"
        rules = [
            rule
            for role in select(base, "ClusterRole")
            if role["metadata"].get("labels", {}).get(label) == "true"
            for rule in role["rules"]
        ]
        for verb in ("get", "list", "watch"):
            assert _allows(rules, group, resource, verb), (level, verb)
            assert _allows(rules, group, f"{resource}/status", verb), (level, verb)
        for verb in write:
            assert _allows(rules, group, resource, verb) is may_write, (level, verb)
        for verb in ("update", "patch"):  # the status is the server's to write
            assert not _allows(rules, group, f"{resource}/status", verb), level
    assert not [
        b
        for b in select(base, "ClusterRoleBinding") + select(base, "RoleBinding")
        if b["roleRef"]["name"].startswith(f"{NAME}:metric-definitions")
    ]


# --- Dockerfile -------------------------------------------------------------------------------


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """Instructions (KEYWORD, arguments) per stage, continuation lines joined; ARG defaults
    declared before the first FROM are substituted in FROM lines."""
    logical: list[str] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    global_args: dict[str, str] = {}
    stages: list[list[tuple[str, str]]] = []
    for text in logical:
        keyword, _, rest = text.strip().partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "ARG" and not stages:
            name, _, default = rest.partition("=")
            global_args[name] = default
            continue
        if keyword == "FROM":
            for name, value in global_args.items():
                rest = rest.replace(f"${{{name}}}", value).replace(f"${name}", value)
            stages.append([])
        stages[-1].append((keyword, rest))
    return stages


def _exec_form(value: str) -> list[str]:
    parsed = json.loads(value)  # shell form would not parse as JSON
    assert isinstance(parsed, list)
    return parsed


def test_dockerfile_final_stage_runs_the_console_script_as_non_root() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    (script,) = [
        name for name, target in scripts.items() if target == "custom_metrics_server.cli:main"
    ]
    final = dockerfile_stages()[-1]
    users = [value for keyword, value in final if keyword == "USER"]
    assert users, "the final stage sets no USER and would run as root"
    user, _, group = users[-1].partition(":")
    assert user not in {"0", "root", ""}
    assert group not in {"0", "root"}
    assert int(user) == 65534
    (entrypoint,) = [_exec_form(v) for k, v in final if k == "ENTRYPOINT"]
    assert entrypoint == [script]
    (cmd,) = [_exec_form(v) for k, v in final if k == "CMD"]
    assert cmd == ["serve"]
    assert build_parser().parse_args(cmd).command == "serve"
    # The working directory is the server's own: with a writable root `serve --demo` keeps its
    # relative --cert-dir there (tests/deployment/test_image.py runs it on a read-only one).
    (workdir,) = [value for keyword, value in final if keyword == "WORKDIR"]
    assert f"--from=builder --chown=65534:65534 {workdir} {workdir}" in [
        value for keyword, value in final if keyword == "COPY"
    ]
    assert not serve_parser().get_default("cert_dir").is_absolute()


def test_dockerfile_is_multi_stage_on_python_311_slim_by_digest_and_ships_only_the_venv() -> None:
    stages = dockerfile_stages()
    assert len(stages) >= 2
    for stage in stages:
        assert re.fullmatch(
            r"python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", stage[0][1].split()[0]
        )
    builder_name = stages[0][0][1].split()[-1]
    final = stages[-1]
    copies = [value for keyword, value in final if keyword in {"COPY", "ADD"}]
    assert copies[0] == f"--from={builder_name} /opt/venv /opt/venv"
    assert all(
        copy.startswith(f"--from={builder_name} --chown=65534:65534 /var/lib/")
        for copy in copies[1:]
    )
    env = " ".join(value for keyword, value in final if keyword == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert "PYTHONUNBUFFERED=1" in env
    assert "/opt/venv/bin" in env
    exposed = [value for keyword, value in final if keyword == "EXPOSE"]
    assert exposed == ["6443"]
    assert serve_parser().get_default("secure_port") == 6443


def test_dockerfile_installs_dependencies_before_copying_the_package() -> None:
    builder = dockerfile_stages()[0]
    steps = [f"{keyword} {value}" for keyword, value in builder]

    def index(predicate: Any) -> int:
        matches = [i for i, step in enumerate(steps) if predicate(step)]
        assert matches, steps
        return matches[0]

    copy_locks = index(
        lambda s: s.startswith("COPY requirements/runtime.lock requirements/build.lock ")
    )
    install_deps = index(
        lambda s: (
            s.startswith("RUN")
            and "pip install --require-hashes --no-deps --requirement requirements/runtime.lock"
            in s
            and "--requirement requirements/build.lock" in s
        )
    )
    copy_project = index(lambda s: s.startswith("COPY pyproject.toml"))
    copy_package = index(lambda s: s.startswith("COPY custom_metrics_server"))
    install_package = index(
        lambda s: s.startswith("RUN") and "pip install --no-deps --no-build-isolation ." in s
    )
    assert copy_locks < install_deps < copy_project < copy_package < install_package
    assert index(lambda s: s.startswith("RUN python -m venv /opt/venv")) < install_deps
    # The C reader is checked where the copied source cannot shadow the installed package.
    assert (
        "python -P -c 'import custom_metrics_server.kubelet_format._scan'" in steps[install_package]
    )
    # The host's pip settings come in as build secrets, never as layers.
    assert "--mount=type=secret,id=pip-conf" in steps[install_deps]
    assert "--mount=type=secret,id=pip-ca" in steps[install_deps]


def test_every_setup_runs_the_image_make_image_builds(
    base: list[Obj], production: list[Obj], cert_manager: list[Obj], production_dir: Path
) -> None:
    """`make image` names it localhost/custom-metrics-server:<version> (podman's and buildah's
    name for an unqualified local image); the overlays' `images:` entry rewrites exactly that
    name, so pointing them at a registry (docs/deployment.md) changes the running image."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    built = f"localhost/custom-metrics-server:{version}"
    makefile = (ROOT / "Makefile").read_text()
    assert "IMAGE_REPOSITORY ?= localhost/custom-metrics-server" in makefile
    for objects in (base, production, cert_manager):
        assert container(objects)["image"] == built
    for overlay in (production_dir, MANIFESTS / "overlays" / "cert-manager"):
        kustomization = yaml.safe_load((overlay / "kustomization.yaml").read_text())
        (entry,) = kustomization["images"]
        assert entry["name"] == built.split(":", maxsplit=1)[0]
        assert f"{entry['newName']}:{entry['newTag']}" == built
    # A digest, as docs/deployment.md shows: the runtime pulls name:tag@digest by the digest.
    kustomization = production_dir / "kustomization.yaml"
    saved = kustomization.read_text()
    digest = "sha256:" + "b" * 64
    try:
        kustomization.write_text(
            saved.replace("    newTag: 0.1.0\n", f"    newTag: 0.1.0\n    digest: {digest}\n")
        )
        pinned = container(kustomize(production_dir))["image"]
    finally:
        kustomization.write_text(saved)
    assert pinned == f"{built}@{digest}"


def _docker_ignored(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore rule, enough for our patterns: the last matching line wins and a
    pattern matching a directory matches what is inside it."""
    ignored = False
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for line in patterns:
        negated = line.startswith("!")
        pattern = line.removeprefix("!").rstrip("/")
        if any(fnmatch.fnmatchcase(prefix, pattern) for prefix in prefixes):
            ignored = not negated
    return ignored


def test_dockerignore_sends_what_the_dockerfile_copies_and_nothing_else() -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    sources = [
        source
        for stage in dockerfile_stages()
        for keyword, value in stage
        if keyword in {"COPY", "ADD"} and not value.startswith("--from")
        for source in value.split()[:-1]
    ]
    assert sources
    package = [str(p.relative_to(ROOT)) for p in (ROOT / "custom_metrics_server").rglob("*.py")]
    for path in [*sources, *package]:
        assert not _docker_ignored(path.rstrip("/"), patterns), f"{path} is not sent to the build"
    for path in [
        ".venv/bin/python",
        ".git/HEAD",
        "tests/deployment/test_manifests.py",
        ".pytest_cache/v/cache/nodeids",
        ".mypy_cache/3.11/cli.data.json",
        "manifests/overlays/production/certs/ca.key",
        "custom_metrics_server/__pycache__/cli.cpython-311.pyc",
        "custom_metrics_server/kubelet_format/_scan.cpython-311-x86_64-linux-gnu.so",
        "custom_metrics_server.egg-info/PKG-INFO",
    ]:
        assert _docker_ignored(path, patterns), f"{path} would be sent to the build"


@pytest.fixture(autouse=True, scope="module")
def _no_certificates_left_in_the_repository() -> Iterator[None]:
    certs = MANIFESTS / "overlays" / "production" / "certs"
    before = sorted(certs.iterdir()) if certs.exists() else None
    yield
    after = sorted(certs.iterdir()) if certs.exists() else None
    assert before == after, "a test wrote into manifests/overlays/production/certs"


# --- the optional metrics.k8s.io component ------------------------------------------------------

COMPONENT = MANIFESTS / "components" / "resource-metrics"


def with_component(overlay: Path) -> list[Obj]:
    """Build `overlay` with the resource-metrics component added, as docs/metrics-api.md says."""
    kustomization = overlay / "kustomization.yaml"
    kustomization.write_text(
        kustomization.read_text() + "components:\n  - ../../components/resource-metrics\n"
    )
    return kustomize(overlay)


@pytest.fixture(scope="module")
def production_with_metrics_api(
    production_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> list[Obj]:
    copy = tmp_path_factory.mktemp("with-component") / "manifests"
    shutil.copytree(production_dir.parent.parent, copy)
    return with_component(copy / "overlays" / "production")


@pytest.fixture(scope="module")
def cert_manager_with_metrics_api(tmp_path_factory: pytest.TempPathFactory) -> list[Obj]:
    copy = tmp_path_factory.mktemp("cm-with-component") / "manifests"
    shutil.copytree(MANIFESTS, copy, ignore=shutil.ignore_patterns("certs"))
    return with_component(copy / "overlays" / "cert-manager")


def test_component_files_hold_one_object_each_and_are_all_listed() -> None:
    listed = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert listed["kind"] == "Component"
    on_disk = sorted(p.name for p in COMPONENT.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(listed["resources"]) == on_disk
    for name in on_disk:
        documents = [d for d in yaml.safe_load_all((COMPONENT / name).read_text()) if d]
        assert len(documents) == 1


def test_the_base_does_not_take_metrics_k8s_io_over(base: list[Obj]) -> None:
    assert not [o for o in select(base, "APIService") if o["spec"]["group"] == "metrics.k8s.io"]
    assert "--enable-metrics-api" not in container(base)["args"]


def test_production_with_the_component_registers_v1_and_v1beta1_metrics_k8s_io(
    production_with_metrics_api: list[Obj],
) -> None:
    objects = production_with_metrics_api
    services = {o["metadata"]["name"]: o for o in select(objects, "APIService")}
    assert set(services) == {*API_SERVICES, "v1.metrics.k8s.io", "v1beta1.metrics.k8s.io"}
    old = services["v1beta1.metrics.k8s.io"]["spec"]
    new = services["v1.metrics.k8s.io"]["spec"]
    assert (old["group"], old["version"]) == ("metrics.k8s.io", "v1beta1")
    assert (new["group"], new["version"]) == ("metrics.k8s.io", "v1")
    # v1 preferred: kube-aggregator orders a group's versions by versionPriority.
    assert (old["groupPriorityMinimum"], old["versionPriority"]) == (100, 100)
    assert (new["groupPriorityMinimum"], new["versionPriority"]) == (100, 200)
    for spec in (old, new):
        assert spec["service"] == {"name": NAME, "namespace": NAMESPACE, "port": 443}
        assert "insecureSkipTLSVerify" not in spec
    # The overlay's replacement ran after the component: the same generated CA everywhere.
    bundles = {s["spec"]["caBundle"] for s in services.values()}
    assert len(bundles) == 1
    assert base64.b64decode(bundles.pop()).startswith(b"-----BEGIN CERTIFICATE-----")
    args = container(objects)["args"]
    assert "--enable-metrics-api" in args
    assert "--enable-metrics-api" in serve_parser()._option_string_actions


def test_cert_manager_with_the_component_injects_the_ca_into_the_new_api_services(
    cert_manager_with_metrics_api: list[Obj],
) -> None:
    for name in ("v1.metrics.k8s.io", "v1beta1.metrics.k8s.io"):
        service = one(cert_manager_with_metrics_api, "APIService", name)
        assert "caBundle" not in service["spec"] or service["spec"]["caBundle"] is None
        annotations = service["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/{NAME}-serving"


def test_the_component_grants_kubectl_top_like_metrics_server(
    production_with_metrics_api: list[Obj],
) -> None:
    role = one(production_with_metrics_api, "ClusterRole", "system:aggregated-metrics-reader")
    labels = role["metadata"]["labels"]
    for verb in ("view", "edit", "admin"):
        assert labels[f"rbac.authorization.k8s.io/aggregate-to-{verb}"] == "true"
    assert role["rules"] == [
        {
            "apiGroups": ["metrics.k8s.io"],
            "resources": ["pods", "nodes"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    # What the server itself reads for it (pods, nodes, the kubelets) is already in the base role.
    rules = one(production_with_metrics_api, "ClusterRole", NAME)["rules"]
    core = [r for r in rules if r["apiGroups"] == [""]]
    assert {"pods", "nodes"} <= set(core[0]["resources"])
    assert any("nodes/proxy" in r["resources"] for r in core)


# --- the node agent component (manifests/components/node-agent) ----------------------------------

AGENT = "custom-metrics-node-agent"


@pytest.fixture(scope="module")
def with_agents(production_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Obj]:
    """The production overlay with the node-agent component added, as its comment says
    (in a copy of its own, so the plain production build stays as it is)."""
    copy = tmp_path_factory.mktemp("with-agents") / "manifests"
    shutil.copytree(production_dir.parent.parent, copy)
    overlay = copy / "overlays" / "production"
    kustomization = overlay / "kustomization.yaml"
    document = yaml.safe_load(kustomization.read_text())
    document["components"] = ["../../components/node-agent"]
    kustomization.write_text(yaml.safe_dump(document))
    return kustomize(overlay)


def _subcommand(name: str) -> argparse.ArgumentParser:
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name]  # type: ignore[no-any-return]
    raise AssertionError("build_parser() has no subcommands")


def test_node_agent_component_switches_the_server_to_the_agents(with_agents: list[Obj]) -> None:
    args = container(with_agents)["args"]
    parsed = serve_parser().parse_args(args[1:])
    assert parsed.usage_source == "node-agent"
    daemon_set = one(with_agents, "DaemonSet", AGENT)
    labels = daemon_set["spec"]["template"]["metadata"]["labels"]
    key, _, value = parsed.node_agent_selector.partition("=")
    assert labels[key] == value  # the server's default selector finds the agent pods
    assert daemon_set["metadata"]["namespace"] == parsed.node_agent_namespace
    agent = daemon_set["spec"]["template"]["spec"]["containers"][0]
    agent_args = _subcommand("node-agent").parse_args(agent["args"][1:])
    assert agent["args"][0] == "node-agent"
    assert agent_args.secure_port == parsed.node_agent_port
    assert agent["ports"][0]["containerPort"] == parsed.node_agent_port
    https = {"port": "https", "scheme": "HTTPS"}
    assert agent["livenessProbe"]["httpGet"] == {"path": "/metrics", **https}
    assert agent["readinessProbe"]["httpGet"] == {"path": "/healthz", **https}
    # Without the component nothing changes.
    assert not select(kustomize(MANIFESTS / "base"), "DaemonSet")


def test_node_agent_runs_everywhere_read_only_without_privileges(with_agents: list[Obj]) -> None:
    pod_spec = one(with_agents, "DaemonSet", AGENT)["spec"]["template"]["spec"]
    assert pod_spec["tolerations"] == [{"operator": "Exists"}]
    assert pod_spec["automountServiceAccountToken"] is False
    assert not pod_spec.get("hostNetwork")
    assert not pod_spec.get("hostPID")
    agent = pod_spec["containers"][0]
    security = agent["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["privileged"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    mounts = {m["name"]: m for m in agent["volumeMounts"]}
    assert volumes["cri-socket"]["hostPath"]["type"] == "Socket"
    for name in ("cri-socket", "host-cgroup", "host-proc"):
        assert mounts[name]["readOnly"] is True
    agent_args = _subcommand("node-agent").parse_args(agent["args"][1:])
    socket_path = agent_args.cri_endpoint.removeprefix("unix://")
    assert mounts["cri-socket"]["mountPath"] == socket_path
    assert str(agent_args.host_cgroup_root) == mounts["host-cgroup"]["mountPath"]
    # The host's /proc, read-only, where --host-proc reads it (node swap, /proc/stat).
    assert str(agent_args.host_proc) == mounts["host-proc"]["mountPath"]
    assert volumes["host-proc"]["hostPath"] == {"path": "/proc", "type": "Directory"}
    account = one(with_agents, "ServiceAccount", AGENT)
    assert account["automountServiceAccountToken"] is False
    assert not [
        b
        for b in select(with_agents, "ClusterRoleBinding") + select(with_agents, "RoleBinding")
        if any(s.get("name") == AGENT for s in b.get("subjects", []))
    ]


def test_only_the_server_may_reach_the_agents(with_agents: list[Obj]) -> None:
    policy = one(with_agents, "NetworkPolicy", AGENT)["spec"]
    assert policy["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": AGENT}
    (rule,) = policy["ingress"]
    server_labels = one(with_agents, "Deployment", NAME)["spec"]["template"]["metadata"]["labels"]
    (peer,) = rule["from"]
    assert peer["podSelector"]["matchLabels"].items() <= server_labels.items()
    assert rule["ports"] == [{"protocol": "TCP", "port": 10443}]


# --- Pod Security: every pod is admitted by its namespace's enforced level ----------------------


def _pod_security_refusals(objects: list[Obj]) -> list[str]:
    """What the PodSecurity admission plugin would refuse in a build: each workload's pod
    template checked against the level its namespace (from the same build) enforces."""
    levels = {o["metadata"]["name"]: enforced_level(o) for o in select(objects, "Namespace")}
    refused = []
    for obj in objects:
        spec = pod_spec(obj)
        if spec is None:
            continue
        namespace = obj["metadata"].get("namespace", "default")
        assert namespace in levels, f"{obj['kind']} {obj['metadata']['name']} in {namespace}"
        level = levels[namespace]
        refused += [
            f"{obj['kind']} {namespace}/{obj['metadata']['name']} (enforce: {level}): {v}"
            for v in violations(spec, level)
        ]
    return refused


@pytest.mark.parametrize(
    "build",
    ["base", "production", "cert_manager", "production_with_metrics_api", "with_agents"],
)
def test_every_pod_is_admitted_by_the_pod_security_level_of_its_namespace(
    build: str, request: pytest.FixtureRequest
) -> None:
    objects: list[Obj] = request.getfixturevalue(build)
    assert select(objects, "Namespace"), "the build names the levels it enforces"
    assert _pod_security_refusals(objects) == []


def test_the_server_itself_still_meets_restricted_where_the_node_agent_runs(
    with_agents: list[Obj],
) -> None:
    """The node-agent component lowers its namespace to privileged (hostPath, UID 0); the
    server's own pods must still meet restricted, and the namespace keeps warning and
    auditing at restricted so any drift shows."""
    spec = pod_spec(one(with_agents, "Deployment", NAME))
    assert spec is not None
    assert violations(spec, "restricted") == []
    labels = one(with_agents, "Namespace", NAMESPACE)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"
    assert labels["pod-security.kubernetes.io/audit"] == "restricted"
    # The base alone keeps enforcing restricted.
    assert enforced_level(one(kustomize(MANIFESTS / "base"), "Namespace")) == "restricted"


def test_the_pod_security_check_refuses_what_admission_refuses() -> None:
    """The checker itself: the node agent's pod as it is refused by a restricted namespace,
    and a pod that meets restricted."""
    agent_pod = yaml.safe_load(
        (MANIFESTS / "components" / "node-agent" / "daemon-set-node-agent.yaml").read_text()
    )["spec"]["template"]["spec"]
    refused = violations(agent_pod, "restricted")
    assert 'hostPath volumes (volume "cri-socket")' in refused
    assert 'runAsNonRoot != true (container "node-agent")' in refused
    assert "runAsUser=0 (pod)" in refused
    assert violations(agent_pod, "baseline") == [
        'hostPath volumes (volume "cri-socket")',
        'hostPath volumes (volume "host-cgroup")',
        'hostPath volumes (volume "host-proc")',
    ]
    assert violations(agent_pod, "privileged") == []
    server_pod = yaml.safe_load((MANIFESTS / "base" / "deployment.yaml").read_text())["spec"][
        "template"
    ]["spec"]
    assert violations(server_pod, "restricted") == []
    escalating = {
        "containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}],
        "hostNetwork": True,
    }
    assert violations(escalating, "baseline") == [
        "host namespaces (hostNetwork=true)",
        "non-default capabilities (container \"c\": ['SYS_ADMIN'])",
    ]
