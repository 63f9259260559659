"""The package as a plugin: its entry point, its contract version, and its only import of the
server being the SDK (no database needed)."""

from __future__ import annotations

import ast
import importlib.metadata
from pathlib import Path

from custom_metrics_server import sdk

import cms_postgres
from cms_postgres import Settings, factory

SOURCE = Path(cms_postgres.__file__).resolve().parent


def test_the_entry_point_names_the_factory() -> None:
    (point,) = [
        point
        for point in importlib.metadata.entry_points(group="custom_metrics_server.backends")
        if point.name == "postgres"
    ]
    assert point.value == "cms_postgres:factory"
    assert point.load() is factory
    assert point.dist is not None
    assert point.dist.name == "cms-postgres-backend"


def test_the_factory_declares_its_settings_model_and_contract() -> None:
    assert factory.settings_model is Settings  # type: ignore[attr-defined]
    assert factory.sdk_version == "1.0"  # type: ignore[attr-defined]
    assert sdk.compatible(factory.sdk_version)  # type: ignore[attr-defined]


def test_the_plugin_imports_only_the_sdk_of_the_server() -> None:
    imported = set()
    for path in sorted(SOURCE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                imported |= {(path.name, alias.name) for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported |= {(path.name, f"{node.module}.{alias.name}") for alias in node.names}
    server = {(where, name) for where, name in imported if name.startswith("custom_metrics_server")}
    assert server, "the plugin imports the SDK"
    assert {name for _, name in server} == {"custom_metrics_server.sdk"}


def test_the_backend_is_both_sources_with_a_lifecycle_and_readiness() -> None:
    backend = factory(
        Settings.model_validate(
            {"host": "db", "external": [{"metric": "m", "queryAll": "SELECT 1"}]}
        )
    )
    assert isinstance(backend, sdk.ExternalMetricsSource)
    assert isinstance(backend, sdk.CustomMetricsSource)
    assert isinstance(backend, sdk.Lifecycle)
    assert isinstance(backend, sdk.ReadinessCheck)
    assert backend.ready() == sdk.Readiness(False, "not started")
    assert list(backend.list_external_metrics()) == ["m"]
    assert list(backend.list_metrics()) == []
