"""The values tables in the chart's README and docs/deployment.md are the ones
scripts/chart_values_table.py generates from values.schema.json (as `make verify` checks)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.chart.conftest import ROOT

SCRIPT = ROOT / "scripts" / "chart_values_table.py"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chart_values_table", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tables_are_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_a_stale_table_is_detected_and_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    generator = _generator()
    stale = tmp_path / "doc.md"
    stale.write_text(f"# doc\n\n{generator.BEGIN}\n| old | table |\n{generator.END}\n\ntail\n")
    monkeypatch.setattr(generator, "TARGETS", (stale,))
    monkeypatch.setattr(generator, "ROOT", tmp_path)
    assert generator.main(["--check"]) == 1
    assert generator.main(["--write"]) == 0
    text = stale.read_text()
    assert text.startswith("# doc\n\n")
    assert text.endswith("\n\ntail\n")
    assert "| `tls.mode` |" in text
    assert "| old | table |" not in text
    assert generator.main(["--check"]) == 0


def test_every_value_has_a_row() -> None:
    generator = _generator()
    keys = [
        row[0] for row in generator.rows(generator.json.loads(generator.SCHEMA.read_text()), {})
    ]
    for key in (
        "`image.tag`",
        "`tls.mode`",
        "`tls.existingSecret.caBundle`",
        "`metricsApi.versions`",
        "`backends.config`",
        "`nodeAgent.enabled`",
        "`serviceMonitor.enabled`",
        "`extraArgs`",
    ):
        assert key in keys
    assert len(keys) == len(set(keys))
    table = (ROOT / "docs" / "deployment.md").read_text()
    assert all(f"| {key} |" in table for key in keys)
