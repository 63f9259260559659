"""The five KEP-1748 questions, each one `kubectl get --raw` call from the README, against the
demo server: every command in the README section runs as written and answers sensibly."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from custom_metrics_server.machinery.quantity import Quantity
from custom_metrics_server.testing.server_process import ServerProcess as RunningServer

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

README = Path(__file__).resolve().parents[2] / "README.md"
P = "/apis/custom.metrics.k8s.io/v1beta2"


def readme_commands() -> list[str]:
    section = (
        README.read_text().split("## The five questions of KEP-1748", 1)[1].split("\n## ", 1)[0]
    )
    return re.findall(r"`(kubectl --kubeconfig \$KC get --raw \"[^\"]+\")`", section)


def run(server: RunningServer, command: str) -> dict[str, Any]:
    expanded = command.replace("$KC", str(server.kubeconfig)).replace("$P", P)
    result = subprocess.run(
        shlex.split(expanded),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, f"{expanded}: {result.stderr}"
    return dict(json.loads(result.stdout))


def values(body: dict[str, Any]) -> dict[str, float]:
    return {
        i["describedObject"]["name"]: float(Quantity.parse(i["value"]).value) for i in body["items"]
    }


def test_the_readme_lists_five_questions() -> None:
    assert len(readme_commands()) == 5


def test_each_question_is_answered_by_its_readme_command(demo_server: RunningServer) -> None:
    capacity, underuse, eviction, contention, pending = (
        run(demo_server, c) for c in readme_commands()
    )
    free = values(capacity)
    assert free
    assert all(name.startswith("node-") for name in free)
    assert all(value < 8 for value in free.values())  # allocatable cpu is 3.92 or 7.91 cores
    ratios = values(underuse)
    assert set(ratios) >= {"web", "api"}
    assert all(0 < r < 2 for r in ratios.values())
    on_node = values(eviction)
    assert on_node
    assert all(
        item["metric"]["selector"]["matchLabels"]["node"] == "node-a-0"
        for item in eviction["items"]
    )
    gpus = values(contention)
    assert gpus
    assert all(v <= 4 for v in gpus.values())
    too_big = values(pending)
    assert too_big
    assert min(too_big.values()) > max(free.values())  # requests no node can satisfy
