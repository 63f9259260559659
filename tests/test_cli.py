"""The command line: flags, refusal to expose the demo, fixtures, and the kubeconfig."""

from __future__ import annotations

import argparse
import base64
from pathlib import Path

import pytest
import yaml

from custom_metrics_server import cli


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10", 10.0), ("1.5", 1.5), ("10s", 10.0), ("1m30s", 90.0), ("250ms", 0.25), ("1h", 3600.0)],
)
def test_durations_parse_like_go(text: str, seconds: float) -> None:
    assert cli.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["ten", "10x", "s", "-1m"])
def test_bad_durations_are_rejected(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        cli.parse_duration(text)


def test_serve_without_a_reachable_cluster_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "missing-kubeconfig")
    args = ["serve", "--cert-dir", str(tmp_path), "--kubeconfig", missing]
    assert cli.main([*args, "--authentication-kubeconfig", missing]) == 2
    assert "missing-kubeconfig" in capsys.readouterr().err


def test_demo_refuses_non_loopback_addresses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        cli.main(["serve", "--demo", "--bind-address", "0.0.0.0", "--cert-dir", str(tmp_path)]) == 2
    )
    assert "binds loopback only" in capsys.readouterr().err


def test_bad_fixture_file_names_the_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixture = tmp_path / "bad.yaml"
    fixture.write_text("objects:\n  - resource: widgets\n    name: w\n")
    assert (
        cli.main(["serve", "--demo", "--demo-file", str(fixture), "--cert-dir", str(tmp_path)]) == 2
    )
    err = capsys.readouterr().err
    assert "invalid fixture at objects[0]" in err
    assert "unknown resource 'widgets'" in err


def test_kubeconfig_names_the_server_and_trusts_its_ca(tmp_path: Path) -> None:
    path = tmp_path / "kc" / "kubeconfig"
    cli.write_kubeconfig(path, server="https://127.0.0.1:1234", ca_pem=b"PEM")
    config = yaml.safe_load(path.read_text())
    cluster = config["clusters"][0]["cluster"]
    assert cluster["server"] == "https://127.0.0.1:1234"
    assert base64.b64decode(cluster["certificate-authority-data"]) == b"PEM"
    assert config["current-context"] == config["contexts"][0]["name"]
