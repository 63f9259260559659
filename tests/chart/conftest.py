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
import subprocess
from pathlib import Path
from typing import Any

import yaml

from custom_metrics_server.cli import build_parser
from tests.tools import require

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


def helm_binary() -> str:
    """helm: $HELM, then .tools/bin (the pinned v4), then PATH."""
    return require("helm", prefer_tools_dir=True)


def kubectl_binary() -> str:
    """kubectl (for `kubectl kustomize`): $KUBECTL, then PATH, then .tools/bin."""
    return require("kubectl")


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


def chart_crds() -> list[Obj]:
    """The CRDs of the chart's `crds/` directory, as `helm install` creates them (Helm applies
    them as they are, before the templates, and `helm template` leaves them out unless asked
    with `--include-crds`)."""
    return [
        doc
        for path in sorted((CHART / "crds").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


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
