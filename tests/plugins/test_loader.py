"""Loading: types found, settings validated by the plugin's model, factories called with their
context, plugins adapted, and every problem named."""

from __future__ import annotations

import importlib.metadata
import logging
from pathlib import Path
from typing import Any

import pytest

from custom_metrics_server.backends.kubernetes.metrics import ResourceMetricsBackend
from custom_metrics_server.backends.simulated import SimulatedCluster
from custom_metrics_server.cluster.in_memory import InMemoryCluster
from custom_metrics_server.domain import GroupResource
from custom_metrics_server.plugins.adapter import PluginBackend, PluginError
from custom_metrics_server.plugins.config import parse_backends_file
from custom_metrics_server.plugins.loader import load_backends
from custom_metrics_server.plugins.registry import ENTRY_POINT_GROUP, find_type
from custom_metrics_server.query.engine import QueryEngine
from custom_metrics_server.query.routes import Route
from tests.conftest import CONTRACT_FIXTURE

P = "tests.fakes.plugins"


def load(text: str, **kwargs: Any) -> Any:
    config = parse_backends_file(text, source="b.yaml")
    return load_backends(config, base_dir=Path("/"), default_timeout=10.0, **kwargs)


def failure(text: str) -> list[str]:
    with pytest.raises(PluginError) as caught:
        load(text)
    return str(caught.value).splitlines()


def test_a_plugin_by_module_path_is_adapted_with_its_threads_and_deadline() -> None:
    loaded = load(
        f"""
defaults: {{threads: 2, timeout: 3s}}
backends:
  - name: jobs
    type: {P}:hanging
    threads: 1
    timeout: 1s
  - name: quick
    type: {P}:instant
"""
    )
    jobs, quick = loaded.built
    assert isinstance(jobs.host.backend, PluginBackend)
    assert jobs.host.backend.threads is not None
    assert jobs.host.backend.threads.size == 1
    assert (jobs.host.timeout, quick.host.timeout) == (1.0, 3.0)
    assert jobs.kind.origin == f"factory {P}:hanging"
    assert not jobs.host.gates_readiness
    assert quick.host.backend.threads is None  # async fetches need no threads


def test_a_settings_model_validates_and_the_factory_gets_its_context() -> None:
    loaded = load(
        f"""
backends:
  - name: orders-db
    type: {P}:with_settings
    settings: {{dsn: "postgresql://db/orders"}}
"""
    )
    backend = loaded.built[0].host.backend
    assert backend.name == "orders-db"
    assert backend.plugin.prefix == "orders_db"  # the context's name reached the factory


def test_settings_errors_name_the_backend_and_the_field() -> None:
    assert failure(
        f"""
backends:
  - name: orders
    type: {P}:with_settings
    settings: {{pool: many}}
"""
    ) == [
        f"backends[0] 'orders' (type {P}:with_settings): settings.dsn: field required",
        f"backends[0] 'orders' (type {P}:with_settings): settings.pool: Input should be a valid "
        "integer, unable to parse string as an integer",
    ]


def test_a_plugin_that_fails_to_import_is_one_line_naming_it_and_the_exception() -> None:
    (line,) = failure("backends: [{name: pg, type: 'tests.fakes.broken_plugin:make'}]")
    assert line == (
        "backends[0] 'pg' (type tests.fakes.broken_plugin:make): importing "
        "tests.fakes.broken_plugin:make failed: ModuleNotFoundError: No module named "
        "'psycopg_not_installed_here'"
    )


def test_an_unknown_type_lists_what_is_known() -> None:
    (line,) = failure("backends: [{name: x, type: nosuch}]")
    assert line.startswith("backends[0] 'x' (type nosuch): no backend type 'nosuch' (built-in: ")
    assert (
        "demo, fixture, kubernetes, memory, metric-definitions, passthrough, pod-metrics, "
        "prometheus, simulated" in line
    )


def test_a_plugin_for_a_newer_contract_is_refused() -> None:
    (line,) = failure(f"backends: [{{name: x, type: '{P}:from_the_future'}}]")
    assert line == (
        f"backends[0] 'x' (type {P}:from_the_future): written for backend contract 1.99; this "
        "server provides 1.2 (same major, not a newer minor)"
    )


def test_an_object_that_is_not_a_backend_is_refused_naming_it() -> None:
    (line,) = failure(f"backends: [{{name: x, type: '{P}:not_a_backend'}}]")
    assert line.startswith(
        "backends[0] 'x' (type tests.fakes.plugins:not_a_backend): object is not a backend: it "
        "needs list_metrics() + fetch() or list_external_metrics() + fetch_external()"
    )


def test_every_entry_is_checked_before_failing() -> None:
    lines = failure(
        f"""
backends:
  - {{name: a, type: nosuch}}
  - {{name: b, type: '{P}:with_settings'}}
  - {{name: c, type: '{P}:instant', routes: [{{metricRegex: '('}}]}}
"""
    )
    assert [line.split(")")[0] for line in lines] == [
        "backends[0] 'a' (type nosuch",
        f"backends[1] 'b' (type {P}:with_settings",
        f"backends[2] 'c' (type {P}:instant",
    ]
    assert "routes[0]: metricRegex '(': missing ), unterminated subpattern" in lines[2]


def test_the_fixture_provides_the_cluster_and_routes_resolve_resources_through_it() -> None:
    loaded = load(
        f"""
backends:
  - name: jobs
    type: {P}:instant
    routes: [{{resource: deployment.apps, metric: 'x_*'}}]
  - name: contract
    type: fixture
    settings: {{file: {CONTRACT_FIXTURE}}}
"""
    )
    assert loaded.cluster_backend == "contract"
    assert loaded.cluster.mapping("pods") is not None
    (route,) = loaded.built[0].host.routes
    assert route == Route(resource=GroupResource("apps", "deployments"), metric="x_*")
    assert loaded.built[1].host.gates_readiness  # built-in types gate readiness
    assert loaded.what() == f"the fixture {CONTRACT_FIXTURE} with backend jobs ({P}:instant)"


def test_a_route_resource_the_cluster_does_not_know_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    load(f"backends: [{{name: jobs, type: '{P}:instant', routes: [{{resource: deployments}}]}}]")
    assert (
        "backends[0] 'jobs' (type tests.fakes.plugins:instant): routes[0]: resource "
        "'deployments' is not known to the cluster view now" in caplog.text
    )


def test_without_a_cluster_backend_an_empty_view_is_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    loaded = load(f"backends: [{{name: jobs, type: '{P}:instant'}}]")
    assert isinstance(loaded.cluster, InMemoryCluster)
    assert loaded.cluster_backend is None
    assert "no backend provides a cluster view" in caplog.text


def test_a_cluster_entry_that_cannot_provide_one_is_refused() -> None:
    (line,) = failure(f"cluster: jobs\nbackends: [{{name: jobs, type: '{P}:instant'}}]")
    assert line == (
        f"cluster: backend 'jobs' (type {P}:instant) provides no cluster view (kubernetes, "
        "demo and fixture do)"
    )


def test_gates_readiness_can_be_set_per_entry() -> None:
    loaded = load(f"backends: [{{name: jobs, type: '{P}:instant', gatesReadiness: true}}]")
    assert loaded.built[0].host.gates_readiness


def test_entry_points_are_found_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    point = importlib.metadata.EntryPoint(
        name="jobs", value=f"{P}:instant", group=ENTRY_POINT_GROUP
    )
    monkeypatch.setattr(
        importlib.metadata,
        "entry_points",
        lambda group=None: [point] if group == ENTRY_POINT_GROUP else [],
    )
    found = find_type("jobs", where="here")
    assert found.origin.startswith(f"plugin jobs = {P}:instant")
    assert not found.builtin


def test_two_entry_points_of_one_name_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    points = [
        importlib.metadata.EntryPoint(name="jobs", value=f"{P}:{name}", group=ENTRY_POINT_GROUP)
        for name in ("instant", "hanging")
    ]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: points)
    with pytest.raises(PluginError, match="here: several plugins are named 'jobs'"):
        find_type("jobs", where="here")


def test_built_in_names_are_reserved(monkeypatch: pytest.MonkeyPatch) -> None:
    point = importlib.metadata.EntryPoint(
        name="demo", value=f"{P}:instant", group=ENTRY_POINT_GROUP
    )
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: [point])
    assert find_type("demo", where="here").builtin


def test_a_fixture_setting_with_a_typo_is_refused_not_ignored() -> None:
    (line,) = failure("backends: [{name: f, type: fixture, settings: {fiel: x.yaml}}]")
    assert line == "backends[0] 'f' (type fixture): settings.fiel: unknown field"


def test_a_misspelled_plugin_setting_is_refused_naming_the_field_and_the_known_ones() -> None:
    assert failure(
        f"""
backends:
  - name: orders
    type: {P}:with_settings
    settings: {{dsn: "postgresql://db/orders", pol: 2}}
"""
    ) == [
        f"backends[0] 'orders' (type {P}:with_settings): settings.pol: unknown field (known: dsn, pool)"
    ]


def test_a_nested_settings_model_is_checked_too() -> None:
    (line,) = failure(
        f"""
backends:
  - name: jobs
    type: {P}:with_nested_settings
    settings: {{queues: [{{name: emails}}, {{name: reports, wieght: 2}}]}}
"""
    )
    assert line == (
        f"backends[0] 'jobs' (type {P}:with_nested_settings): settings.queues[1].wieght: "
        "unknown field (known: name, weight)"
    )


def test_a_settings_model_that_states_its_extra_policy_opts_out() -> None:
    loaded = load(
        f"""
backends:
  - name: lenient
    type: {P}:with_lenient_settings
    settings: {{dsn: "postgresql://db/orders", comment: "kept for the operators"}}
"""
    )
    assert loaded.built[0].name == "lenient"


def test_aliases_are_the_keys_a_settings_model_reads() -> None:
    loaded = load(
        f"""
backends:
  - name: jobs
    type: {P}:with_nested_settings
    settings: {{queues: [], maxRows: 5}}
"""
    )
    assert loaded.built[0].host.backend.plugin.prefix == "5"
    (line,) = failure(
        f"backends: [{{name: jobs, type: '{P}:with_nested_settings', settings: {{queues: [], max_rows: 5}}}}]"
    )
    assert line.endswith("settings.max_rows: unknown field (known: maxRows, queues)")


def test_a_misspelled_required_setting_is_named_beside_the_missing_one() -> None:
    assert failure(
        f"""
backends:
  - name: orders
    type: {P}:with_settings
    settings: {{dns: "postgresql://db/orders"}}
"""
    ) == [
        f"backends[0] 'orders' (type {P}:with_settings): settings.dsn: field required",
        f"backends[0] 'orders' (type {P}:with_settings): settings.dns: unknown field (known: dsn, pool)",
    ]


def test_the_demo_composite_is_routed_to_its_members_once_per_decision() -> None:
    """The router chooses the demo's member per decision (`member_for`), so a fetch never makes
    a second choice inside the composite; the member answers what the composite answers."""
    loaded = load("backends:\n  - name: demo\n    type: demo\n    settings: {pods: 20}\n")
    engine = QueryEngine(cluster=loaded.cluster, backends=loaded.hosts)
    pods = GroupResource("", "pods")
    kep = engine.router.decide_custom(pods, "kube_pod_resource_request_hpa")
    app = engine.router.decide_custom(pods, "http_requests_per_second")
    external = engine.router.decide_external("queue_depth")
    assert kep is not None
    assert app is not None
    assert external is not None
    assert isinstance(kep.backend, ResourceMetricsBackend)
    assert isinstance(app.backend, SimulatedCluster)
    assert isinstance(external.backend, SimulatedCluster)
    assert kep.host is app.host  # one backend of the file, two members


def test_a_metric_definitions_backend_takes_no_routes() -> None:
    (line,) = failure(
        "backends: [{name: teams, type: metric-definitions, routes: [{metric: '*'}]}]"
    )
    assert line == (
        "backends[0] 'teams' (type metric-definitions): a metric-definitions backend takes no "
        "routes (it answers only what no other backend routes or lists)"
    )


def test_a_kept_backend_keeps_its_readiness_gate_across_a_reload() -> None:
    text = f"backends: [{{name: jobs, type: '{P}:instant', gatesReadiness: false}}]"
    first = load(text)
    again = load(
        text.replace("gatesReadiness: false", "gatesReadiness: false, routes: [{metric: x}]"),
        keep={"jobs": first.built[0]},
    )
    (built,) = again.built
    assert built.host.backend is first.built[0].host.backend  # kept, not made again
    assert built.host.routes is not None
    assert not built.host.gates_readiness


def test_the_prometheus_servers_of_definitions_are_checked_naming_the_field() -> None:
    entry = "backends: [{name: teams, type: metric-definitions, settings: {prometheus: %s}}]"
    (line,) = failure(entry % "{servers: [{name: main, url: 'http://p:9090'}], defaultServer: x}")
    assert line.startswith("backends[0] 'teams' (type metric-definitions): ")
    assert "prometheus.defaultServer 'x' is not a server" in line
    (line,) = failure(entry % "{servers: [{name: main, url: 'p:9090'}]}")
    assert "settings.prometheus.servers[0].url: String should match pattern" in line
    twice = "{servers: [{name: m, url: 'http://a'}, {name: m, url: 'http://b'}]}"
    (line,) = failure(entry % twice)
    assert "a name is given twice" in line
