"""The server's External metrics as a backend reads them through the engine
(plugins/external_reads.py): the answer of `GET .../namespaces/<ns>/<metric>` with no selector
(the request's namespace only, the host's deadline), and never the reading backend's own, so
a MetricDefinitions formula never reads the definitions backend through the engine. The whole
chain, a formula over a platform metric in the real server: the control-plane test
`tests/controlplane/test_metric_definitions_sources.py::test_a_formula_over_the_platforms_external_metric`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import cast

import pytest

from custom_metrics_server.backends.definitions.backend import DefinitionsBackend
from custom_metrics_server.backends.definitions.formula_source import PlatformInputs
from custom_metrics_server.backends.definitions.policy import Platform
from custom_metrics_server.backends.definitions.schedule import make_schedule
from custom_metrics_server.backends.definitions.source import SourceError, SourceTools
from custom_metrics_server.backends.memory import MemoryBackend, SnapshotBuilder
from custom_metrics_server.cluster.in_memory import InMemoryCluster
from custom_metrics_server.errors import BackendTimeout, BackendUnavailable
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.plugins.builtin_definitions import MAKERS
from custom_metrics_server.plugins.config import parse_backends_file
from custom_metrics_server.plugins.external_reads import connect, external_reader
from custom_metrics_server.plugins.loader import load_backends
from custom_metrics_server.query.engine import QueryEngine
from custom_metrics_server.query.routes import Host
from tests.backends.definitions.test_formula_source import formula_spec
from tests.backends.definitions.test_serving import NOW, constant, external, obj
from tests.fakes.cluster_process import write_kubeconfig
from tests.query.test_engine import StubbornBackend


def platform_backend() -> MemoryBackend:
    """`queue_depth` in namespaces shop (two series) and other; `slow` never answers."""
    cluster = InMemoryCluster()
    builder = SnapshotBuilder(cluster, timestamp=NOW)
    builder.add_external("queue_depth", 30, labels={"queue": "orders"}, namespace="shop")
    builder.add_external("queue_depth", 12, labels={"queue": "mails"}, namespace="shop")
    builder.add_external("queue_depth", 9000, labels={"queue": "orders"}, namespace="other")
    builder.add_external("cluster_queue", 500)  # no namespace: visible from every namespace
    return MemoryBackend(snapshot=builder.build())


def definitions(platform: Platform) -> tuple[DefinitionsBackend, PlatformInputs]:
    """A definitions backend wired as `builtin_definitions` wires it."""
    made = DefinitionsBackend(
        cast("KubeClient", object()),
        makers={"Schedule": make_schedule, "Formula": MAKERS["Formula"]},
        platform=platform,
        clock=lambda: NOW,
    )
    inputs = PlatformInputs(platform.allows_formula_input)
    made.catalog.tools = SourceTools(
        client=object(),
        external_value=made.external_value,
        defines=lambda namespace, metric: (namespace, metric) in made.catalog.serving,
        platform_value=inputs.value,
    )
    made.catalog.list_started()
    made.catalog.list_finished()
    return made, inputs


def engine_over(made: DefinitionsBackend, timeout: float = 10.0) -> QueryEngine:
    return QueryEngine(
        cluster=InMemoryCluster(),
        backends=[
            platform_backend(),
            Host(backend=StubbornBackend(ready=True, delay=30), timeout=timeout),
            Host(backend=made, yields=True, dynamic=True),
        ],
    )


async def test_the_read_is_the_engines_answer_in_the_asked_namespace() -> None:
    made, _ = definitions(Platform())
    read = external_reader(engine_over(made), [made])
    assert sorted(float(s.value) for s in await read("shop", "queue_depth")) == [12.0, 30.0]
    assert [float(s.value) for s in await read("other", "queue_depth")] == [9000.0]
    assert await read("elsewhere", "queue_depth") == []
    assert await read("shop", "nobody_serves_this") == ()


async def test_the_reading_backend_is_never_asked() -> None:
    made, _ = definitions(Platform())
    made.catalog.event("ADDED", obj(constant(7), "load"))  # serves expected_load in shop
    engine = engine_over(made)
    # The engine routes the metric to the definitions backend (so the exclusion is what
    # keeps a read out of it) ...
    decision = engine.router.decide_external("expected_load")
    assert decision is not None
    assert decision.backend is made
    # ... and a read by the definitions backend does not reach it.
    assert await external_reader(engine, [made])("shop", "expected_load") == ()


async def test_the_hosts_deadline_applies() -> None:
    made, _ = definitions(Platform())
    read = external_reader(engine_over(made, timeout=0.05), [made])
    with pytest.raises(BackendTimeout, match="did not answer within 0.05s"):
        await read("shop", "slow")


async def test_a_formula_over_platform_metrics_through_the_engine() -> None:
    """The chain: a definition's input from memory, the platform's (allowed) through the
    engine, in the definition's namespace; a failing one is the source's error with the
    engine's reason."""
    made, inputs = definitions(
        Platform(formula_inputs=(re.compile("queue_depth"), re.compile("slow|cluster_.*")))
    )
    inputs.connect(external_reader(engine_over(made, timeout=0.05), [made]))
    made.catalog.event("ADDED", obj(constant(2), "workers"))  # expected_load = 2
    spec = formula_spec("per_worker", "q / w", q="queue_depth", w="expected_load")
    made.catalog.event("ADDED", obj(spec, "per-worker"))
    made.catalog.event("ADDED", obj(spec, "per-worker", namespace="other"))
    made.catalog.event("ADDED", obj(formula_spec("slowly", "s * 1.0", s="slow"), "slowly"))
    made.catalog.event("ADDED", obj(formula_spec("global", "c * 1.0", c="cluster_queue"), "gl"))
    await made.tick()
    assert await external(made, "per_worker") == [21.0]  # (30 + 12) / 2
    assert await external(made, "global") == [500.0]
    states = {(s["namespace"], s["name"]): s for s in made.definition_states()}
    # In namespace other, expected_load is no definition's and not allowed: refused ...
    assert states[("other", "per-worker")]["reason"] == "InputNotAllowed"
    assert "input w (expected_load)" in str(states[("other", "per-worker")]["message"])
    # ... and a failing platform input is the source's error, with the engine's reason.
    failing = states[("shop", "slowly")]
    assert failing["lastError"] is not None
    assert "input s (slow)" in str(failing["lastError"])
    assert "did not answer within 0.05s" in str(failing["lastError"])
    with pytest.raises(BackendUnavailable, match=r"input s \(slow\): the stubborn backend"):
        await external(made, "slowly")


async def test_connect_gives_the_definitions_entry_of_a_backends_file_its_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real loader and factories: a fixture entry's External metric, read as the
    `metric-definitions` entry's formulas read it once `connect` ran (LiveBackends runs it
    before the start and at each reload). Nothing is started: no address is dialled."""
    write_kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:1")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    text = """
backends:
  - name: platform
    type: fixture
    settings:
      external:
        - {metric: platform_queue, value: 40, namespace: shop}
        - {metric: platform_queue, value: 2, namespace: shop}
        - {metric: hidden_queue, value: 9, namespace: shop}
  - name: metric-definitions
    type: metric-definitions
    settings: {formulaPlatformInputs: ["platform_.*"]}
"""
    loaded = load_backends(
        parse_backends_file(text, source="test"), base_dir=tmp_path, default_timeout=5.0
    )
    (made,) = [
        b.host.backend for b in loaded.built if isinstance(b.host.backend, DefinitionsBackend)
    ]
    platform_value = made.catalog.tools.platform_value
    assert platform_value is not None
    with pytest.raises(SourceError, match="not connected yet"):
        await platform_value("shop", "platform_queue")
    connect(QueryEngine(cluster=loaded.cluster, backends=loaded.hosts), loaded.built)
    assert await platform_value("shop", "platform_queue") == 42.0
    assert await platform_value("other", "platform_queue") is None
    with pytest.raises(SourceError, match="formulaPlatformInputs"):
        await platform_value("shop", "hidden_queue")
