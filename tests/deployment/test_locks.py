"""The image's dependency locks (requirements/, `make lock`), checked offline.

`make verify-lock` (CI) re-resolves against PyPI and fails on any difference; these checks
need no network and run with the suite: every runtime dependency of pyproject.toml (and the
extras it names) is pinned at a version its range admits, everything is pinned exactly with
hashes (`pip install --require-hashes` in the Dockerfile needs both), and the build lock's
setuptools is one pyproject's build-system admits.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s\\;]+)")


def pins(lock: str) -> dict[str, tuple[Version, list[str]]]:
    """name -> (version, hashes) of a `uv pip compile --generate-hashes` file."""
    found: dict[str, tuple[Version, list[str]]] = {}
    entries = re.split(r"\n(?=[A-Za-z0-9])", (ROOT / "requirements" / lock).read_text())
    for entry in entries:
        if entry.startswith("#") or not entry.strip():
            continue
        match = PIN.match(entry)
        assert match, f"{lock}: not an exact pin: {entry.splitlines()[0]}"
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", entry)
        assert hashes, f"{lock}: {match[1]} has no hash"
        found[canonicalize_name(match[1])] = (Version(match[2]), hashes)
    return found


@pytest.mark.parametrize("dependency", PYPROJECT["project"]["dependencies"])
def test_every_runtime_dependency_is_locked_within_its_range(dependency: str) -> None:
    requirement = Requirement(dependency)
    locked = pins("runtime.lock")
    name = canonicalize_name(requirement.name)
    assert name in locked, f"{name} is not in requirements/runtime.lock: run `make lock`"
    version, _ = locked[name]
    assert requirement.specifier.contains(version, prereleases=True), (name, version)


def test_the_extras_named_are_locked_too() -> None:
    # uvicorn[standard]: what the server runs on (uvloop, httptools, websockets, watchfiles...).
    locked = pins("runtime.lock")
    for name in ("uvloop", "httptools", "python-dotenv", "watchfiles", "websockets"):
        assert name in locked, name


def test_the_build_lock_pins_a_setuptools_the_build_system_admits() -> None:
    (requirement,) = [Requirement(r) for r in PYPROJECT["build-system"]["requires"]]
    version, _ = pins("build.lock")["setuptools"]
    assert requirement.specifier.contains(version)
    assert version >= Version("77")  # the SPDX `license` string
    assert isinstance(PYPROJECT["project"]["license"], str)
