"""The MetricDefinition guides stay true to the code: docs/tutorial-metric-definitions.md,
docs/metric-definitions-platform.md and docs/migration-metric-definitions.md.

Here (unit tier): every MetricDefinition block is read by the server's own reader
(`spec.parse_definition`: time zones, windows, selectors, durations) and admitted by the
default platform policy (the source allowed, `interval` at least the default 15s); every
backends-file block of the pages loads through the real loader
(`plugins.loader.load_backends`) into a `metric-definitions` backend whose policy is the block's
settings; every `prometheus` query of their MetricDefinitions is confined by the server's own
confinement (`promql_scope.confine`), as the server would at serving time; the pages link each
other and are linked from docs/metric-definitions.md. Against a real kube-apiserver with the CRD
installed (server-side dry run of every MetricDefinition and HorizontalPodAutoscaler block):
tests/controlplane/test_metric_definition_docs.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_metrics_server.backends.definitions.backend import DefinitionsBackend
from custom_metrics_server.backends.definitions.policy import SOURCE_TYPES, Platform
from custom_metrics_server.backends.definitions.promql_scope import Confined, confine
from custom_metrics_server.backends.definitions.spec import parse_definition
from custom_metrics_server.plugins.config import parse_backends_file
from custom_metrics_server.plugins.loader import load_backends
from tests.fakes.cluster_process import write_kubeconfig

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = (
    DOCS / "tutorial-metric-definitions.md",
    DOCS / "metric-definitions-platform.md",
    DOCS / "migration-metric-definitions.md",
)


def yaml_blocks(page: Path) -> list[Any]:
    """Every ```yaml block of `page`, parsed."""
    return [
        yaml.safe_load(block)
        for block in re.findall(r"```yaml\n(.*?)```", page.read_text(), flags=re.DOTALL)
    ]


def blocks_of_kind(kind: str, pages: tuple[Path, ...] = PAGES) -> list[tuple[str, dict[str, Any]]]:
    """(page name, object) for every block of the pages whose `kind` is `kind`."""
    return [
        (page.name, block)
        for page in pages
        for block in yaml_blocks(page)
        if isinstance(block, dict) and block.get("kind") == kind
    ]


def backends_blocks() -> list[tuple[str, str]]:
    """(page name, text) of every block that is a backends file."""
    found = []
    for page in PAGES:
        for text in re.findall(r"```yaml\n(.*?)```", page.read_text(), flags=re.DOTALL):
            block = yaml.safe_load(text)
            if isinstance(block, dict) and "backends" in block:
                found.append((page.name, text))
    return found


def test_the_pages_hold_what_the_tests_below_check() -> None:
    definitions = blocks_of_kind("MetricDefinition")
    assert {name for name, _ in definitions} == {page.name for page in PAGES} - {
        "metric-definitions-platform.md"
    }
    assert {d["spec"]["source"]["type"] for _, d in definitions} == {
        "Pods",
        "Prometheus",
        "Schedule",
        "HTTP",
        "Formula",
    }
    assert len(blocks_of_kind("HorizontalPodAutoscaler")) >= 5
    assert [name for name, _ in backends_blocks()] == ["metric-definitions-platform.md"]


@pytest.mark.parametrize(("page", "text"), backends_blocks())
def test_every_backends_file_block_loads_through_the_real_loader(
    page: str, text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The blocks name no kubeconfig (in a cluster: the pod's ServiceAccount); outside one the
    # loader takes $KUBECONFIG. Nothing is started, so the address is never dialled.
    write_kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:1")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    config = parse_backends_file(text, source=page)
    loaded = load_backends(config, base_dir=tmp_path, default_timeout=10.0)
    entries = yaml.safe_load(text)["backends"]
    assert [built.entry.name for built in loaded.built] == [e["name"] for e in entries]
    (settings,) = [e["settings"] for e in entries if e["type"] == "metric-definitions"]
    (backend,) = [b.host.backend for b in loaded.built if b.entry.type == "metric-definitions"]
    assert isinstance(backend, DefinitionsBackend)
    platform = backend.catalog.platform
    # The policy the server enforces is the one the page shows.
    assert platform.allowed == frozenset(settings["allowedSources"])
    assert platform.limits.definitions == settings["limits"]["definitions"]
    assert platform.limits.scrape_targets == settings["limits"]["scrapeTargets"]
    assert platform.limits.series_per_query == settings["limits"]["seriesPerQuery"]
    for namespace, limits in settings["namespaces"].items():
        assert platform.namespace_limits(namespace).definitions == limits["definitions"]
    assert [p.pattern for p in platform.formula_inputs] == settings["formulaPlatformInputs"]
    servers = backend.catalog.tools.settings["prometheus"]
    assert set(servers.servers) == {s["name"] for s in settings["prometheus"]["servers"]}


def test_a_backends_block_with_a_wrong_setting_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above can fail: the same block with an unknown source type is refused."""
    write_kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:1")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    ((page, text),) = backends_blocks()
    broken = text.replace("allowedSources: [Pods,", "allowedSources: [Pod,", 1)
    assert broken != text
    with pytest.raises(Exception, match="allowedSources"):
        load_backends(
            parse_backends_file(broken, source=page), base_dir=tmp_path, default_timeout=10.0
        )


@pytest.mark.parametrize(
    ("page", "definition"),
    blocks_of_kind("MetricDefinition"),
    ids=lambda value: value if isinstance(value, str) else value["metadata"]["name"],
)
def test_every_definition_is_read_and_admitted_by_the_server_under_the_default_policy(
    page: str, definition: dict[str, Any]
) -> None:
    read = parse_definition(definition)
    assert read.metric == definition["spec"]["metricName"]
    assert read.source_type == definition["spec"]["source"]["type"]
    assert Platform().admit(read, SOURCE_TYPES) is None


@pytest.mark.parametrize(
    ("page", "definition"),
    [
        (page, d)
        for page, d in blocks_of_kind("MetricDefinition")
        if d["spec"]["source"]["type"] == "Prometheus"
    ],
    ids=lambda value: value if isinstance(value, str) else value["metadata"]["name"],
)
def test_every_prometheus_query_is_one_the_server_confines(
    page: str, definition: dict[str, Any]
) -> None:
    namespace = definition["metadata"]["namespace"]
    confined = confine(definition["spec"]["source"]["prometheus"]["query"], namespace)
    assert isinstance(confined, Confined), confined
    assert f'namespace="{namespace}"' in confined.query


def test_the_pages_are_linked() -> None:
    reference = (DOCS / "metric-definitions.md").read_text()
    head = reference.split("\n## ", 1)[0]
    for page in PAGES:
        assert f"({page.name})" in head, page.name
    readme = (ROOT / "README.md").read_text()
    for page in PAGES:
        assert f"docs/{page.name}" in readme, page.name
