"""The external tools some tests drive (kubectl, helm, prometheus, promtool, containerd), found
in one way: `$KUBECTL`-style environment variables, then `.tools/bin` (`make tools`), then PATH.

A test that needs a missing tool is skipped, except under `CI=true`, where the missing tool
fails the run: CI must run every test (`.ci/run` installs the tools).
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / ".tools" / "bin"

#: How to get each tool, for the skip message.
HOW = {
    "kubectl": "in the base image, or `make tools` for kubectl 1.37 in .tools/bin",
    "helm": "set $HELM, or run `make tools` for .tools/bin/helm",
    "prometheus": "Debian package `prometheus`; .ci/run installs it",
    "promtool": "Debian package `prometheus`; .ci/run installs it",
    "containerd": "Debian package `containerd`; .ci/run installs it",
    "openssl": "Debian package `openssl`; .ci/run installs it",
}


def _executable(path: str | Path | None) -> str | None:
    if path and Path(path).is_file() and os.access(path, os.X_OK):
        return str(path)
    return None


@functools.cache
def find(tool: str, *, prefer_tools_dir: bool = False) -> str | None:
    """`$TOOL` (upper case), then `.tools/bin` or PATH (in that order when
    `prefer_tools_dir`, else PATH first), or None."""
    from_env = _executable(os.environ.get(tool.upper()))
    local = _executable(TOOLS / tool)
    on_path = shutil.which(tool)
    ordered = (local, on_path) if prefer_tools_dir else (on_path, local)
    return from_env or next((found for found in ordered if found), None)


def missing(tool: str, why: str = "") -> None:
    """Skip the test (fail it under CI=true): `tool` is needed and absent."""
    message = f"{tool} is not installed ({HOW.get(tool, 'see README.md')})"
    if why:
        message += f": {why}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run this test: {message}")
    pytest.skip(message)


def require(tool: str, *, prefer_tools_dir: bool = False) -> str:
    """The tool's path, or skip the test (fail it under CI=true)."""
    found = find(tool, prefer_tools_dir=prefer_tools_dir)
    if found is None:
        missing(tool)
    assert found is not None
    return found
