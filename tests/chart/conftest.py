"""Shared helpers of the Helm chart tests: finding helm and kubectl, rendering, selecting.

helm comes from $HELM, then `.tools/bin/helm` (`make tools`, .ci/install-k8s-tools), then
PATH; kubectl (for `kubectl kustomize`) from $KUBECTL, then PATH, then `.tools/bin/kubectl`.
Without them the tests that need them are skipped, except under CI=true, where a missing tool
fails the run (as the Prometheus tests do): CI must run them.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_metrics_server.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent.parent
CHART = ROOT / "charts" / "custom-metrics-server"
EXAMPLES = CHART / "examples"
MANIFESTS = ROOT / "manifests"
TOOLS = ROOT / ".tools" / "bin"

#: The documented install: this release name gives manifests/base's object names.
RELEASE = "custom-metrics-server"
NAMESPACE = "custom-metrics"
NAME = "custom-metrics-server"

Obj = dict[str, Any]


def _missing(tool: str, how: str) -> None:
    message = f"{tool} is not installed ({how})"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the chart tests: {message}")
    pytest.skip(message)


def _executable(path: str | Path | None) -> str | None:
    if path and Path(path).is_file() and os.access(path, os.X_OK):
        return str(path)
    return None


@functools.cache
def _find_helm() -> str | None:
    return (
        _executable(os.environ.get("HELM")) or _executable(TOOLS / "helm") or shutil.which("helm")
    )


@functools.cache
def _find_kubectl() -> str | None:
    return (
        _executable(os.environ.get("KUBECTL"))
        or shutil.which("kubectl")
        or _executable(TOOLS / "kubectl")
    )


def helm_binary() -> str:
    found = _find_helm()
    if found is None:
        _missing("helm", "set $HELM, or run `make tools` for .tools/bin/helm")
    assert found is not None
    return found


def kubectl_binary() -> str:
    found = _find_kubectl()
    if found is None:
        _missing("kubectl", "set $KUBECTL, or run `make tools` for .tools/bin/kubectl")
    assert found is not None
    return found


def helm(
    *args: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [helm_binary(), *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
    if check:
        assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stderr}"
    return result


def template_args(
    values_files: tuple[str, ...],
    sets: tuple[str, ...] = (),
    set_json: tuple[str, ...] = (),
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> list[str]:
    """`helm template` arguments: values files, then --set, then --set-json (key=JSON)."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    for path in values_files:
        args += ["--values", path]
    for assignment in sets:
        args += ["--set", assignment]
    for assignment in set_json:
        args += ["--set-json", assignment]
    return args


@functools.cache
def _render(args: tuple[str, ...]) -> str:
    return helm(*args).stdout


def render(
    *values_files: str | Path,
    sets: tuple[str, ...] = (),
    set_json: tuple[str, ...] = (),
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> list[Obj]:
    """`helm template` of the chart, parsed (cached: a render's certificates are random)."""
    files = tuple(str(p) for p in values_files)
    stdout = _render(tuple(template_args(files, sets, set_json, release, namespace)))
    return [doc for doc in yaml.safe_load_all(stdout) if doc]


def render_fails(
    *values_files: str | Path, sets: tuple[str, ...] = (), set_json: tuple[str, ...] = ()
) -> str:
    """`helm template` that must fail: its error output."""
    args = template_args(tuple(str(p) for p in values_files), sets, set_json)
    result = helm(*args, check=False)
    assert result.returncode != 0, f"helm {' '.join(args)} rendered:\n{result.stdout[:2000]}"
    return result.stderr


def example(name: str) -> Path:
    path = EXAMPLES / f"{name}.yaml"
    assert path.is_file(), path
    return path


def example_names() -> list[str]:
    return sorted(p.stem for p in EXAMPLES.glob("*.yaml"))


@functools.cache
def _kustomize(directory: str) -> str:
    result = subprocess.run(
        [kubectl_binary(), "kustomize", directory], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def kustomize(directory: Path) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(_kustomize(str(directory))) if doc]


def select(objects: list[Obj], kind: str, name: str | None = None) -> list[Obj]:
    return [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = select(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def server_container(objects: list[Obj], name: str = NAME) -> Obj:
    (container,) = one(objects, "Deployment", name)["spec"]["template"]["spec"]["containers"]
    return container  # type: ignore[no-any-return]


def subcommand_parser(name: str) -> argparse.ArgumentParser:
    """A subcommand's parser (serve, node-agent), out of the real `build_parser()`."""
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name]  # type: ignore[no-any-return]
    raise AssertionError("build_parser() has no subcommands")
