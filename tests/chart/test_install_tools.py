""".ci/install-k8s-tools: the one script that puts helm and kubectl in .tools/bin. Installing
needs PyPI, so the download itself runs in CI (.ci/run), not here; these check the script's
contract without the network."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import tools
from tests.chart.conftest import ROOT, TOOLS
from tests.tools import missing

SCRIPT = ROOT / ".ci" / "install-k8s-tools"


def test_the_script_is_executable_bash_that_parses() -> None:
    assert os.access(SCRIPT, os.X_OK)
    assert SCRIPT.read_text().startswith("#!/usr/bin/env bash\n")
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_ci_installs_the_tools_before_the_tests_and_git_ignores_them() -> None:
    run = (ROOT / ".ci" / "run").read_text()
    assert run.index("\nmake tools\n") < run.index("\nmake test ")
    assert "tools:" in (ROOT / "Makefile").read_text()
    assert ".tools" in (ROOT / ".gitignore").read_text().split()  # a directory or a link


def test_installed_tools_are_kept_without_a_download(tmp_path: Path) -> None:
    """Idempotent: with both binaries at the wanted versions, nothing is fetched."""
    if not ((TOOLS / "helm").exists() and (TOOLS / "kubectl").exists()):
        missing("helm", "the pinned helm and kubectl in .tools/bin (run `make tools`)")
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


def test_a_missing_tool_skips_locally_and_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must run this test: helm"):
        missing("helm")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="helm is not installed"):
        missing("helm")


def test_helm_is_found_through_the_environment_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "helm"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("HELM", str(fake))
    tools.find.cache_clear()
    try:
        assert tools.require("helm", prefer_tools_dir=True) == str(fake)
    finally:
        monkeypatch.undo()  # the caller's $HELM back, then a fresh lookup for later tests
        tools.find.cache_clear()
    assert tools.find("helm", prefer_tools_dir=True) != str(fake)
