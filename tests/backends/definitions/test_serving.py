"""Which definition serves, and what it serves: the older of two of one name, the namespace's
limits, the platform's allowed sources, deletion at once, the request's namespace only, and
the router's lowest precedence for definitions."""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest

from custom_metrics_server.backends.definitions.backend import DefinitionsBackend
from custom_metrics_server.backends.definitions.policy import Limits, Platform
from custom_metrics_server.backends.definitions.schedule import make_schedule
from custom_metrics_server.backends.definitions.source import SourceError, SourceTools, Value
from custom_metrics_server.backends.definitions.spec import Definition
from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    GroupResource,
    MetricInfo,
    ResourceMapping,
)
from custom_metrics_server.errors import BackendUnavailable
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.machinery.labels import EVERYTHING
from custom_metrics_server.query.routes import Host
from custom_metrics_server.query.routing import Router
from tests.backends.definitions.test_spec import SCHEDULE, definition
from tests.query.test_routing import Listed

NOW = 1_765_000_000.0
PODS = GroupResource("", "pods")


def constant(
    value: float, *, created: str = "2026-12-01T10:00:00Z", **extra: Any
) -> dict[str, Any]:
    spec = copy.deepcopy(SCHEDULE)
    spec["source"]["schedule"] = {"windows": [], "defaultValue": value}
    spec.update(extra)
    return spec


def obj(spec: dict[str, Any], name: str, namespace: str = "shop", created: str = "") -> Any:
    made = definition(spec, name=name, namespace=namespace)
    if created:
        made["metadata"]["creationTimestamp"] = created
    return made


class Fixed:
    """A source with given values (a stand-in for the sources of later slices)."""

    def __init__(self, values: list[Value], failing: str | None = None) -> None:
        self._values = values
        self.failing = failing
        self.entered = self.exited = 0

    async def __aenter__(self) -> Fixed:
        self.entered += 1
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.exited += 1

    async def refresh(self) -> None:
        if self.failing:
            raise SourceError(self.failing)

    def values(self, now: float) -> list[Value]:
        return list(self._values)

    def targets(self) -> int:
        return len(self._values)


def backend(platform: Platform | None = None, **makers: Any) -> DefinitionsBackend:
    made = DefinitionsBackend(
        cast("KubeClient", object()),
        makers={"Schedule": make_schedule, **makers},
        platform=platform or Platform(),
        clock=lambda: NOW,
    )
    made.catalog.list_started()
    made.catalog.list_finished()
    return made


async def external(made: DefinitionsBackend, metric: str, namespace: str = "shop") -> list[float]:
    answers = await made.fetch_external(
        ExternalBackendRequest(metric=metric, namespace=namespace, metric_selector=EVERYTHING)
    )
    return [float(answer.value) for answer in answers]


async def test_a_schedule_is_served_in_its_namespace_only() -> None:
    made = backend()
    made.catalog.event("ADDED", obj(constant(7), "load"))
    assert made.list_external_metrics() == frozenset({"expected_load"})
    assert await external(made, "expected_load") == [7.0]
    assert await external(made, "expected_load", namespace="other") == []


async def test_deleting_a_definition_stops_serving_at_once() -> None:
    made = backend()
    made.catalog.event("ADDED", obj(constant(7), "load"))
    assert await external(made, "expected_load") == [7.0]
    made.catalog.event("DELETED", obj(constant(7), "load"))
    assert await external(made, "expected_load") == []
    assert made.list_external_metrics() == frozenset()
    assert made.definition_states() == []


async def test_of_two_definitions_of_one_metric_the_older_serves() -> None:
    made = backend()
    made.catalog.event("ADDED", obj(constant(2), "newer", created="2026-12-02T00:00:00Z"))
    made.catalog.event("ADDED", obj(constant(1), "older", created="2026-12-01T00:00:00Z"))
    assert await external(made, "expected_load") == [1.0]
    states = {state["name"]: state for state in made.definition_states()}
    assert states["newer"]["reason"] == "Shadowed"
    assert states["newer"]["shadowedBy"] == "MetricDefinition shop/older"
    assert states["older"]["reason"] == "Serving"
    # The older one leaves: the newer serves, with no restart.
    made.catalog.event("DELETED", obj(constant(1), "older"))
    assert await external(made, "expected_load") == [2.0]


async def test_explain_names_the_serving_definition_and_the_shadowed_one() -> None:
    made = backend()
    made.catalog.event("ADDED", obj(constant(2), "newer", created="2026-12-02T00:00:00Z"))
    made.catalog.event("ADDED", obj(constant(1), "older", created="2026-12-01T00:00:00Z"))
    await made.tick()
    request = ExternalBackendRequest(
        metric="expected_load", namespace="shop", metric_selector=EVERYTHING
    )
    explained = await made.explain_fetch(request)
    assert explained["servedBy"] == "older"
    definitions = explained["definitions"]
    assert isinstance(definitions, list)
    assert [(d["name"], d["reason"], d["lastValue"]) for d in definitions] == [
        ("older", "Serving", 1.0),
        ("newer", "Shadowed", None),
    ]
    elsewhere = await made.explain_fetch(
        ExternalBackendRequest(metric="expected_load", namespace="b", metric_selector=EVERYTHING)
    )
    assert elsewhere["servedBy"] is None
    assert elsewhere["definitions"] == []


async def test_the_same_creation_time_is_decided_by_name() -> None:
    made = backend()
    made.catalog.event("ADDED", obj(constant(2), "b"))
    made.catalog.event("ADDED", obj(constant(1), "a"))
    assert await external(made, "expected_load") == [1.0]


async def test_a_namespace_over_its_definitions_limit_refuses_the_newest() -> None:
    made = backend(Platform(limits=Limits(definitions=1)))
    made.catalog.event("ADDED", obj(constant(1, metricName="m1"), "first"))
    made.catalog.event(
        "ADDED", obj(constant(2, metricName="m2"), "second", created="2026-12-09T00:00:00Z")
    )
    made.catalog.event("ADDED", obj(constant(3, metricName="m3"), "other", namespace="team-b"))
    assert await external(made, "m1") == [1.0]
    assert await external(made, "m2") == []  # refused whole, not half-served
    assert await external(made, "m3", namespace="team-b") == [3.0]  # another namespace's limit
    states = {state["name"]: state for state in made.definition_states()}
    assert states["second"]["reason"] == "OverLimit"
    assert not states["second"]["valid"]
    assert "limit" in str(states["second"]["message"])


async def test_the_platform_decides_the_source_types_and_the_shortest_interval() -> None:
    made = backend(Platform(allowed=frozenset({"Pods"})))
    made.catalog.event("ADDED", obj(constant(1), "load"))
    assert await external(made, "expected_load") == []
    (state,) = made.definition_states()
    assert state["reason"] == "SourceNotAllowed"
    assert "Pods" in str(state["message"])
    fast = backend(Platform(limits=Limits(min_interval=60)))
    fast.catalog.event("ADDED", obj(constant(1, interval="10s"), "load"))
    (state,) = fast.definition_states()
    assert state["reason"] == "OverLimit"
    assert "60s" in str(state["message"])


async def test_a_source_type_without_a_maker_is_refused() -> None:
    made = backend(Platform(allowed=frozenset({"Schedule", "Prometheus"})))
    spec = {
        "metricName": "q",
        "servedAs": {"type": "External"},
        "source": {"type": "Prometheus", "prometheus": {"query": "up"}},
    }
    made.catalog.event("ADDED", obj(spec, "q"))
    (state,) = made.definition_states()
    assert state["reason"] == "SourceNotAllowed"
    assert "not served" in str(state["message"])


def pods_definition(served: dict[str, Any]) -> dict[str, Any]:
    return {
        "metricName": "inflight",
        "servedAs": served,
        "source": {"type": "Pods", "pods": {"port": 9090, "metric": "inflight"}},
    }


DEPLOY = GroupResource("apps", "deployments")
WEB = frozenset({(DEPLOY, "web")})
POD_VALUES = [
    Value(2.0, NOW - 5, {"pod": "web-1"}, pod="web-1", workloads=WEB),
    Value(4.0, NOW - 3, {"pod": "web-2"}, pod="web-2", workloads=WEB),
    Value(9.0, NOW - 1, {"pod": "job-1"}, pod="job-1"),
]


def fixed_maker(values: list[Value]) -> Any:
    return lambda definition, tools: Fixed(values)


async def test_pods_and_object_serving_over_per_pod_values() -> None:
    made = backend(Pods=fixed_maker(POD_VALUES))
    made.catalog.event("ADDED", obj(pods_definition({"type": "Pods"}), "per-pod"))
    assert made.list_metrics() == frozenset({MetricInfo(PODS, True, "inflight")})
    mapping = ResourceMapping(PODS, "v1", "Pod", True)
    answers = await made.fetch(
        BackendRequest(
            metric=MetricInfo(PODS, True, "inflight"),
            mapping=mapping,
            objects=(("shop", "web-2"), ("shop", "gone"), ("other", "web-1")),
            metric_selector=EVERYTHING,
        )
    )
    assert [(a.described.name, float(a.value)) for a in answers] == [("web-2", 4.0)]

    whole = backend(Pods=fixed_maker(POD_VALUES))
    served = {
        "type": "Object",
        "describedObject": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "podValues": "average",
    }
    whole.catalog.event("ADDED", obj(pods_definition(served), "avg"))
    assert whole.list_metrics() == frozenset({MetricInfo(DEPLOY, True, "inflight")})
    answers = await whole.fetch(
        BackendRequest(
            metric=MetricInfo(DEPLOY, True, "inflight"),
            mapping=ResourceMapping(DEPLOY, "v1", "Deployment", True),
            objects=(("shop", "web"), ("shop", "api")),
            metric_selector=EVERYTHING,
        )
    )
    assert [(a.described.name, float(a.value), a.timestamp) for a in answers] == [
        ("web", 3.0, NOW - 5)
    ]


async def test_an_external_metric_over_pods_sums_or_averages_them() -> None:
    for pod_values, expected in (("sum", 15.0), ("average", 5.0)):
        made = backend(Pods=fixed_maker(POD_VALUES))
        made.catalog.event(
            "ADDED", obj(pods_definition({"type": "External", "podValues": pod_values}), "e")
        )
        assert await external(made, "inflight") == [expected]


async def test_a_failing_source_follows_the_failure_policy() -> None:
    failing = Fixed([], failing="connection refused")
    made = backend(Pods=lambda definition, tools: failing)
    made.catalog.event("ADDED", obj(pods_definition({"type": "External"}), "e"))
    await made.tick()
    with pytest.raises(BackendUnavailable, match="shop/e: connection refused"):
        await external(made, "inflight")
    (state,) = made.definition_states()
    assert state["lastError"] == "connection refused"
    zero = backend(Pods=lambda definition, tools: Fixed([], failing="down"))
    zero.catalog.event(
        "ADDED", obj({**pods_definition({"type": "External"}), "failure": "zero"}, "e")
    )
    await zero.tick()
    assert await external(zero, "inflight") == [0.0]


def test_the_platforms_backends_win_over_a_definition_of_the_same_name() -> None:
    platform = Listed("prometheus", external=["queue_depth"])
    teams = Listed(
        "metric-definitions", custom=[(PODS, "inflight")], external=["queue_depth", "load"]
    )
    router = Router([Host(backend=teams, yields=True, dynamic=True), Host(backend=platform)])
    assert router.start() == []  # never a conflict
    assert router.conflicts() == []
    assert router.external("queue_depth").name == "prometheus"  # type: ignore[union-attr]
    assert router.external("load").name == "metric-definitions"  # type: ignore[union-attr]
    assert router.custom(PODS, "inflight").name == "metric-definitions"  # type: ignore[union-attr]


def test_definition_value_tools_are_what_makers_receive() -> None:
    seen: list[tuple[Definition, SourceTools]] = []

    def maker(definition: Definition, tools: SourceTools) -> Fixed:
        seen.append((definition, tools))
        return Fixed([])

    made = backend(Pods=maker)
    made.catalog.event("ADDED", obj(pods_definition({"type": "Pods"}), "p"))
    ((definition_seen, tools),) = seen
    assert definition_seen.namespace == "shop"
    assert definition_seen.pods is not None
    made.catalog.event("ADDED", obj(constant(5, metricName="other"), "c"))
    assert tools.external_value("shop", "other", NOW) == 5.0
    assert tools.external_value("elsewhere", "other", NOW) is None


async def test_a_sources_work_starts_with_serving_and_stops_with_its_definition() -> None:
    made_sources: list[Fixed] = []

    def maker(definition: Definition, tools: SourceTools) -> Fixed:
        made_sources.append(Fixed(list(POD_VALUES)))
        return made_sources[-1]

    made = backend(Pods=maker)
    made.catalog.event("ADDED", obj(pods_definition({"type": "Pods"}), "p"))
    await made.tick()
    (first,) = made_sources
    assert (first.entered, first.exited) == (1, 0)
    # A changed spec is a new source: the old one's work stops.
    changed = obj({**pods_definition({"type": "Pods"}), "interval": "1m"}, "p")
    changed["metadata"]["generation"] = 4
    made.catalog.event("MODIFIED", changed)
    await made.tick()
    assert len(made_sources) == 2
    assert first.exited == 1
    assert made_sources[1].entered == 1
    # The same object again (a status write, a relist) changes nothing.
    made.catalog.event("MODIFIED", changed)
    await made.tick()
    assert len(made_sources) == 2
    # Deleted: stopped at the next tick; made and deleted between two ticks: never entered.
    made.catalog.event("DELETED", changed)
    await made.tick()
    assert made_sources[1].exited == 1
    made.catalog.event("ADDED", obj(pods_definition({"type": "Pods"}), "brief"))
    made.catalog.event("DELETED", obj(pods_definition({"type": "Pods"}), "brief"))
    await made.tick()
    assert (made_sources[2].entered, made_sources[2].exited) == (0, 0)


async def test_a_namespace_past_its_scrape_targets_refuses_the_newer_pods_definition() -> None:
    made = backend(Platform(limits=Limits(scrape_targets=4)), Pods=fixed_maker(POD_VALUES))
    older = pods_definition({"type": "External"})
    made.catalog.event("ADDED", obj(older, "older", created="2026-12-01T00:00:00Z"))
    newer = {**pods_definition({"type": "External"}), "metricName": "other"}
    made.catalog.event("ADDED", obj(newer, "newer", created="2026-12-02T00:00:00Z"))
    elsewhere = {**pods_definition({"type": "External"}), "metricName": "other"}
    made.catalog.event("ADDED", obj(elsewhere, "theirs", namespace="team-b"))
    await made.tick()  # each source has 3 targets: 3 + 3 > 4 in shop, 3 in team-b
    assert await external(made, "inflight") == [15.0]
    assert await external(made, "other") == []  # refused whole, not the first pod or two
    assert await external(made, "other", namespace="team-b") == [15.0]
    states = {state["name"]: state for state in made.definition_states()}
    assert states["newer"]["reason"] == "OverLimit"
    assert "4 scrape targets" in str(states["newer"]["message"])
    assert made.list_external_metrics() == frozenset({"inflight", "other"})  # team-b's
