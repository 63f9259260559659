"""The modules one demo Pods request passes (`benchmarks/request_modules.py`): the repeats that
issue 28 removed stay removed. Deterministic: a count of modules, not of time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _modules(request: str) -> dict[str, object]:
    tool = str(ROOT / "benchmarks" / "request_modules.py")
    output = subprocess.run(
        [sys.executable, tool, "--json", "--request", request, "--pods", "50"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=120,
    ).stdout
    found: dict[str, object] = json.loads(output.strip().splitlines()[-1])
    return found


def test_a_demo_pods_request_takes_one_pass_down() -> None:
    found = _modules("single")
    assert found["status"] == 200
    modules = found["modules"]
    assert isinstance(modules, list)
    # No second backend choice (the composite), no KEP-1748 room for the mapping, no second
    # path check for metrics.k8s.io; the representation is one memoised decision (no call
    # into api.negotiation, none through server.responses), and an empty metric selector is
    # read, not asked (no call into machinery.labels).
    for gone in (
        "plugins.builtin",
        "backends.kubernetes.metrics",
        "cluster_state.records",
        "metrics_api.request",
        "api.negotiation",
        "server.responses",
        "machinery.labels",
    ):
        assert gone not in modules
    assert len(modules) <= 18, modules
    packages = found["packages"]
    assert isinstance(packages, list)
    assert len(packages) <= 8, packages
