"""Which backends are replicable (plugins.replicas): built-ins by type, plugins by
`sdk.Replicable` (only a literal `True`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from custom_metrics_server.plugins.config import parse_backends_file
from custom_metrics_server.plugins.loader import load_backends
from custom_metrics_server.plugins.replicas import is_replicable, not_replicable, watching
from tests.conftest import CONTRACT_FIXTURE
from tests.fakes.cluster_process import write_kubeconfig

P = "tests.fakes.plugins"
DEMO = "  - {name: simulated, type: demo, settings: {pods: 10}}\n"


def load(text: str) -> Any:
    config = parse_backends_file("backends:\n" + text, source="b.yaml")
    return load_backends(config, base_dir=Path("/"), default_timeout=10.0)


def test_a_plugin_declaring_replicable_is() -> None:
    loaded = load(DEMO + f"  - {{name: copied, type: '{P}:replicable_instant'}}\n")
    assert [is_replicable(built) for built in loaded.built] == [True, True]
    assert not_replicable(loaded) == []


@pytest.mark.parametrize("factory", ["instant", "truthy_replicable"])
def test_a_plugin_not_declaring_it_is_not(factory: str) -> None:
    loaded = load(DEMO + f"  - {{name: held, type: '{P}:{factory}'}}\n")
    assert not_replicable(loaded) == ["held"]


def test_the_built_in_types_that_are_replicable(tmp_path: Path) -> None:
    loaded = load(
        DEMO
        + f"  - {{name: fixture, type: fixture, settings: {{file: {CONTRACT_FIXTURE}}}}}\n"
        + "  - {name: prom, type: prometheus, settings: {url: 'http://127.0.0.1:1'}}\n"
        + "  - {name: up, type: passthrough, settings: {url: 'https://127.0.0.1:1'}}\n"
    )
    assert [is_replicable(built) for built in loaded.built] == [True, True, True, True]
    assert not_replicable(loaded) == []


@pytest.mark.parametrize("kind", ["kubernetes", "pod-metrics"])
def test_the_built_in_types_that_watch_or_scrape_are_not(tmp_path: Path, kind: str) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(kubeconfig, "https://127.0.0.1:1")
    settings = f"{{kubeconfig: '{kubeconfig}'}}"
    if kind == "pod-metrics":
        settings = f"{{kubeconfig: '{kubeconfig}', scrape: [{{name: app, selector: 'a=b', port: 9090}}], metrics: [m]}}"
    loaded = load(DEMO + f"  - {{name: held, type: {kind}, settings: {settings}}}\n")
    assert [is_replicable(built) for built in loaded.built] == [True, False]
    assert not_replicable(loaded) == ["held"]


@pytest.mark.parametrize("kind", ["kubernetes", "pod-metrics"])
def test_the_operator_may_replicate_the_watching_ones(tmp_path: Path, kind: str) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(kubeconfig, "https://127.0.0.1:1")
    settings = f"{{kubeconfig: '{kubeconfig}'}}"
    if kind == "pod-metrics":
        settings = f"{{kubeconfig: '{kubeconfig}', scrape: [{{name: app, selector: 'a=b', port: 9090}}], metrics: [m]}}"
    loaded = load(
        DEMO
        + f"  - {{name: copied, type: {kind}, settings: {settings}}}\n"
        + f"  - {{name: held, type: '{P}:instant'}}\n"
    )
    assert [b.name for b in watching(loaded)] == ["copied"]
    assert [is_replicable(built, watches=True) for built in loaded.built] == [True, True, False]
    assert not_replicable(loaded, watches=True) == ["held"]
    assert not_replicable(loaded) == ["copied", "held"]
