"""The backends in force: start-up order and failures, conflicts, and reloads of the file that
keep the last good configuration."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from custom_metrics_server.backends.definitions.backend import DefinitionsBackend
from custom_metrics_server.domain import ExternalMetricRequest, MetricInfo, Readiness
from custom_metrics_server.machinery.labels import EVERYTHING
from custom_metrics_server.plugins.config import read_backends_file
from custom_metrics_server.plugins.live import LiveBackends, StartupFailure
from custom_metrics_server.plugins.loader import load_backends
from custom_metrics_server.plugins.registry import BUILTIN_TYPES, _Builtin
from custom_metrics_server.query.engine import QueryEngine
from custom_metrics_server.sdk import BackendContext
from custom_metrics_server.sdk.precedence import Precedence, Winner
from tests.conftest import CONTRACT_FIXTURE
from tests.fakes.cluster_process import write_kubeconfig
from tests.fakes.kube_apiserver import FakeKubeApiServer

P = "tests.fakes.plugins"
BASE = f"""
backends:
  - name: contract
    type: fixture
    settings: {{file: {CONTRACT_FIXTURE}}}
"""


def live(path: Path, text: str, **options: object) -> tuple[LiveBackends, CollectorRegistry]:
    path.write_text(text)
    config, digest = read_backends_file(path)
    loaded = load_backends(config, base_dir=path.parent, default_timeout=5.0)
    engine = QueryEngine(cluster=loaded.cluster, backends=loaded.hosts)
    registry = CollectorRegistry()
    backends = LiveBackends(
        engine,
        loaded=loaded,
        source=path,
        digest=digest,
        reload_interval=0,  # reloads are driven by the tests
        default_timeout=0.05,
        registry=registry,
        **options,  # type: ignore[arg-type]
    )
    return backends, registry


def served(backends: LiveBackends) -> list[str]:
    return [host.name for host in backends.engine.router.hosts]


async def external(backends: LiveBackends, metric: str) -> list[object]:
    request = ExternalMetricRequest(namespace="default", metric=metric, metric_selector=EVERYTHING)
    return [s.value for s in await backends.engine.external(request)]


def reloads(registry: CollectorRegistry, result: str) -> float:
    value = registry.get_sample_value(
        "custom_metrics_server_backends_config_reloads_total", {"result": result}
    )
    return value or 0.0


async def test_a_reload_adds_removes_restarts_and_keeps_backends(tmp_path: Path) -> None:
    path = tmp_path / "backends.yaml"
    backends, registry = live(
        path,
        BASE
        + f"""
  - {{name: keep, type: '{P}:instant', settings: {{prefix: keep}}}}
  - {{name: change, type: '{P}:instant', settings: {{prefix: before}}}}
  - {{name: drop, type: '{P}:instant', settings: {{prefix: drop}}}}
""",
    )
    async with backends:
        kept = backends.engine.router.hosts[1].backend
        assert await external(backends, "drop_total") == [7, 7]
        path.write_text(
            BASE
            + f"""
  - {{name: keep, type: '{P}:instant', settings: {{prefix: keep}}, timeout: 2s}}
  - {{name: change, type: '{P}:instant', settings: {{prefix: after}}}}
  - {{name: new, type: '{P}:instant', settings: {{prefix: new}}}}
"""
        )
        assert await backends.reload() is True
        assert served(backends) == ["contract", "keep", "change", "new"]
        router = backends.engine.router
        assert router.hosts[1].backend is kept  # unchanged settings: the same running backend
        assert router.hosts[1].timeout == 2.0  # with its new deadline
        assert await external(backends, "after_total") == [7, 7]
        assert await external(backends, "new_total") == [7, 7]
        assert await external(backends, "drop_total") == []
        assert await external(backends, "before_total") == []
        assert reloads(registry, "success") == 1
        assert await backends.reload() is False  # unchanged file


async def test_a_bad_file_keeps_the_last_good_one_and_is_reported_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "backends.yaml"
    backends, registry = live(path, BASE + f"  - {{name: a, type: '{P}:instant'}}\n")
    async with backends:
        for broken in (
            "backends: [\n",
            BASE + "  - {name: b, type: nosuch}\n",
            BASE + f"  - {{name: c, type: '{P}:with_settings'}}\n",
        ):
            path.write_text(broken)
            caplog.clear()
            assert await backends.reload() is False
            assert await backends.reload() is False
            errors = [r for r in caplog.records if r.levelno == logging.ERROR]
            assert len(errors) == 1, [r.getMessage() for r in errors]
            assert "not reloaded, keeping the last good one" in errors[0].getMessage()
            assert served(backends) == ["contract", "a"]
            assert await external(backends, "instant_total") == [7, 7]
        assert reloads(registry, "failure") == 3
        assert (
            registry.get_sample_value(
                "custom_metrics_server_backends_config_last_reload_successful"
            )
            == 0
        )
        assert "settings.dsn: field required" in errors[0].getMessage()


async def test_a_backend_that_fails_to_start_on_reload_is_not_swapped_in(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "backends.yaml"
    backends, _ = live(path, BASE + f"  - {{name: a, type: '{P}:instant'}}\n")
    async with backends:
        path.write_text(
            BASE
            + f"  - {{name: a, type: '{P}:instant'}}\n  - {{name: db, type: '{P}:failing_start'}}\n"
        )
        assert await backends.reload() is False
        assert served(backends) == ["contract", "a"]
        assert (
            "backend 'db' failed to start: ConnectionRefusedError: db:5432 refused the connection"
            in caplog.text
        )


async def test_a_reload_that_makes_a_conflict_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "backends.yaml"
    backends, _ = live(path, BASE + f"  - {{name: a, type: '{P}:instant'}}\n")
    async with backends:
        path.write_text(
            BASE + f"  - {{name: a, type: '{P}:instant'}}\n  - {{name: b, type: '{P}:instant'}}\n"
        )
        assert await backends.reload() is False
        assert "backends 'a' and 'b' both list the external metric instant_total" in caplog.text
        assert served(backends) == ["contract", "a"]


async def test_a_replicated_worker_refuses_a_reload_adding_a_backend_that_is_not_replicable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "backends.yaml"
    backends, _ = live(path, BASE, replicated=True)
    async with backends:
        path.write_text(BASE + f"  - {{name: held, type: '{P}:instant'}}\n")
        assert await backends.reload() is False
        assert "not replicable: held; every worker of serve --workers runs its own" in caplog.text
        assert served(backends) == ["contract"]
        path.write_text(BASE + f"  - {{name: copied, type: '{P}:replicable_instant'}}\n")
        assert await backends.reload() is True
        assert served(backends) == ["contract", "copied"]


async def test_a_worker_replicating_watches_may_reload_in_a_watching_backend(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # `--workers-replicate-watches` holds for reloads too; without it the reload is refused.
    api = FakeKubeApiServer()
    api.start()
    try:
        write_kubeconfig(tmp_path / "kubeconfig", api.url)
        entry = f"  - {{name: cluster, type: kubernetes, settings: {{kubeconfig: '{tmp_path / 'kubeconfig'}'}}}}\n"
        path = tmp_path / "held.yaml"
        held, _ = live(path, BASE, replicated=True)
        async with held:
            path.write_text(BASE + entry)
            assert await held.reload() is False
            assert "not replicable: cluster; every worker of serve --workers" in caplog.text
            assert served(held) == ["contract"]
        assert api.count() == 0  # refused before it started
        path = tmp_path / "copied.yaml"
        copied, _ = live(path, BASE, replicated=True, replicate_watches=True)
        async with copied:
            path.write_text(BASE + entry)
            assert await copied.reload() is True
            assert served(copied) == ["contract", "cluster"]
        assert api.count("list", "/api/v1/pods") >= 1  # started: its own lists
    finally:
        api.close()


async def test_the_cluster_backend_cannot_change_without_a_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "backends.yaml"
    backends, _ = live(path, BASE)
    async with backends:
        path.write_text(BASE.replace("type: fixture", "type: memory"))
        assert await backends.reload() is False
        assert (
            "backend 'contract' provides the cluster view: changing or removing it needs a restart"
            in caplog.text
        )


async def test_start_up_stops_at_the_first_backend_that_fails_and_names_it(tmp_path: Path) -> None:
    path = tmp_path / "backends.yaml"
    backends, _ = live(
        path,
        BASE
        + f"  - {{name: db, type: '{P}:failing_start'}}\n  - {{name: later, type: '{P}:instant'}}\n",
    )
    with pytest.raises(StartupFailure) as caught:
        await backends.__aenter__()
    assert str(caught.value) == (
        "backend 'db' failed to start: ConnectionRefusedError: db:5432 refused the connection"
    )
    later = backends.engine.router.hosts[2].backend
    assert later.ready().reason == "starting"  # never started after the failure


async def test_start_up_conflicts_name_both_backends(tmp_path: Path) -> None:
    path = tmp_path / "backends.yaml"
    backends, _ = live(
        path, BASE + f"  - {{name: a, type: '{P}:instant'}}\n  - {{name: b, type: '{P}:instant'}}\n"
    )
    with pytest.raises(StartupFailure) as caught:
        await backends.__aenter__()
    assert str(caught.value).split("; ") == [
        "backends 'a' and 'b' both list the custom metric pods/instant_pod: add a route that "
        "decides (docs/backends.md, Routing)",
        "backends 'a' and 'b' both list the external metric instant_total: add a route that "
        "decides (docs/backends.md, Routing)",
    ]


async def test_a_reload_reports_the_backends_it_adds_and_drops(tmp_path: Path) -> None:
    events: list[str] = []
    path = tmp_path / "backends.yaml"
    backends, _ = live(
        path,
        BASE + f"  - {{name: a, type: '{P}:instant', settings: {{prefix: a}}}}\n",
        added=lambda backend: events.append(f"+{backend.name}"),
        removed=lambda backend: events.append(f"-{backend.name}"),
    )
    async with backends:
        path.write_text(BASE + f"  - {{name: b, type: '{P}:instant', settings: {{prefix: b}}}}\n")
        assert await backends.reload() is True
    assert events == ["-a", "+b"]


async def test_a_plugin_lists_nothing_before_it_is_started(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "backends.yaml"
    backends, _ = live(path, BASE + f"  - {{name: broken, type: '{P}:broken_listing'}}\n")
    assert "catalog unavailable" not in caplog.text  # its listing is not read before the start
    async with backends:
        assert "catalog unavailable" in caplog.text


async def test_a_backend_reading_external_metrics_is_connected_at_start_and_reload(
    tmp_path: Path,
) -> None:
    """`Provision.reads_external` (a MetricDefinitions formula's platform inputs) gets the
    engine's reader when the backend is made by a reload too, over the routing in force."""
    api = FakeKubeApiServer()
    api.start()
    try:
        write_kubeconfig(tmp_path / "kubeconfig", api.url)
        definitions = (
            "  - {name: definitions, type: metric-definitions, settings: "
            f"{{kubeconfig: '{tmp_path / 'kubeconfig'}', formulaPlatformInputs: [my-.*]}}}}\n"
        )
        path = tmp_path / "backends.yaml"
        backends, _ = live(path, BASE)
        async with backends:
            path.write_text(BASE + definitions)
            assert await backends.reload() is True
            made = backends.engine.router.hosts[1].backend
            assert isinstance(made, DefinitionsBackend)
            read = made.catalog.tools.platform_value
            assert read is not None
            assert await read("default", "my-external-metric") == 85.0  # 42 + 43
    finally:
        api.close()


class Yielder:
    """A built-in-like backend that yields and records the precedence it is handed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.handed: list[Precedence] = []

    def yield_to(self, precedence: Precedence) -> None:
        self.handed.append(precedence)

    def list_metrics(self) -> frozenset[MetricInfo]:
        return frozenset()

    def list_external_metrics(self) -> frozenset[str]:
        return frozenset({"queue_total", "mine"})

    async def fetch(self, request: object) -> list[object]:
        return []

    async def fetch_external(self, request: object) -> list[object]:
        return []

    def ready(self) -> Readiness:
        return Readiness(True)

    async def __aenter__(self) -> Yielder:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


def yielder(settings: object, *, context: BackendContext) -> Yielder:
    return Yielder(context.name)


async def test_each_yielding_backend_is_handed_the_router_in_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(
        BUILTIN_TYPES, "yielder", _Builtin(f"{__name__}:yielder", dynamic=True, yields=True)
    )
    path = tmp_path / "backends.yaml"
    backends, _ = live(path, BASE + "  - {name: teams, type: yielder}\n")
    teams = backends.engine.router.hosts[1].backend
    assert isinstance(teams, Yielder)
    assert teams.handed == []  # not before it is started
    async with backends:
        (first,) = teams.handed
        assert first.winner(None, "queue_total") is None  # only the yielding one lists it
        # A reload adds a platform backend that lists the name: the new router is handed over,
        # and it names the winner; the old one is not asked again.
        path.write_text(
            BASE
            + "  - {name: teams, type: yielder}\n"
            + f"  - {{name: queues, type: '{P}:instant', settings: {{prefix: queue}}}}\n"
        )
        assert await backends.reload()
        kept = backends.engine.router.hosts[1].backend
        assert kept is teams
        assert len(teams.handed) == 2
        assert teams.handed[1].winner(None, "queue_total") == Winner("queues")
        assert teams.handed[1].winner(None, "mine") is None
