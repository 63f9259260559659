"""The platform wins: a definition whose metric the router gives to a platform backend (by a
route or by its listing) does not serve and says so (`ShadowedByPlatform`, `route.shadowedBy:
backend <name>`, the Ready Event), in every namespace; it serves again by itself when the
platform stops listing the name. The real `metric-definitions` backend and the real router
(`query.routing.Router` through `query.precedence.RouterPrecedence`), the platform a backend
that lists."""

from __future__ import annotations

from typing import Any

from custom_metrics_server.backends.definitions.backend import DefinitionsBackend
from custom_metrics_server.backends.definitions.policy import Limits, Platform
from custom_metrics_server.backends.definitions.status import desired, pending, ready_event
from custom_metrics_server.domain import BackendRequest, GroupResource, MetricInfo, ResourceMapping
from custom_metrics_server.machinery.labels import EVERYTHING
from custom_metrics_server.query.precedence import RouterPrecedence
from custom_metrics_server.query.routes import CUSTOM, Host, Route
from custom_metrics_server.query.routing import Router
from custom_metrics_server.sdk.precedence import Winner
from tests.backends.definitions.test_serving import (
    DEPLOY,
    NOW,
    POD_VALUES,
    PODS,
    Fixed,
    backend,
    constant,
    external,
    obj,
    pods_definition,
)
from tests.query.test_routing import Listed


class Counting:
    """`RouterPrecedence` that counts the questions asked of it."""

    def __init__(self, router: Router) -> None:
        self.inner = RouterPrecedence(router)
        self.asked = 0

    @property
    def platform_generation(self) -> int:
        return self.inner.platform_generation

    def winner(self, resource: GroupResource | None, metric: str) -> Winner | None:
        self.asked += 1
        return self.inner.winner(resource, metric)


def routed(made: DefinitionsBackend, *platform: Host | Listed) -> tuple[Router, Counting]:
    hosts = [Host(backend=made, yields=True, dynamic=True)]
    hosts += [item if isinstance(item, Host) else Host(backend=item) for item in platform]
    router = Router(hosts)
    precedence = Counting(router)
    made.yield_to(precedence)
    return router, precedence


def states(made: DefinitionsBackend) -> dict[str, dict[str, Any]]:
    return {str(state["name"]): state for state in made.definition_states()}


async def test_a_listed_name_shadows_every_definition_of_it_until_the_platform_drops_it() -> None:
    made = backend()
    prometheus = Listed("prometheus", external=["expected_load"])
    router, _ = routed(made, prometheus)
    made.catalog.event("ADDED", obj(constant(7), "load", created="2026-12-01T00:00:00Z"))
    made.catalog.event("ADDED", obj(constant(8), "again", created="2026-12-02T00:00:00Z"))
    made.catalog.event("ADDED", obj(constant(9), "load", namespace="ops"))
    await made.tick()
    # Nothing serves and nothing is listed, in either namespace.
    assert made.list_external_metrics() == frozenset()
    assert await external(made, "expected_load") == []
    assert await external(made, "expected_load", namespace="ops") == []
    found = states(made)
    for name in ("load", "again"):
        assert (found[name]["valid"], found[name]["ready"]) == (True, False)
        assert found[name]["reason"] == "ShadowedByPlatform"
        assert found[name]["shadowedBy"] == "backend prometheus"
    state = made.catalog.states[("shop", "load")]
    assert not pending(state, NOW)  # its status is written, not waiting for a value
    status = desired(state, {}, NOW)
    conditions = {c["type"]: c for c in status["conditions"]}
    assert (conditions["Valid"]["status"], conditions["Valid"]["reason"]) == ("True", "Accepted")
    ready = conditions["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "ShadowedByPlatform")
    assert "backend prometheus (it lists the metric)" in ready["message"]
    assert status["route"] == {"api": "external", "shadowedBy": "backend prometheus"}
    assert "lastValue" not in status
    explained = made.catalog.explain("shop", "expected_load")
    assert explained["servedBy"] is None
    assert [d["reason"] for d in explained["definitions"]] == ["ShadowedByPlatform"] * 2

    # The platform stops listing the name: the oldest serves again by itself, the newer is
    # shadowed by it, and the Ready transition has its Event.
    prometheus.set([], [])
    assert router.refresh(force=True)
    await made.tick()
    assert made.list_external_metrics() == frozenset({"expected_load"})
    assert await external(made, "expected_load") == [7.0]
    assert await external(made, "expected_load", namespace="ops") == [9.0]
    found = states(made)
    assert (found["load"]["reason"], found["load"]["shadowedBy"]) == ("Serving", None)
    assert found["again"]["shadowedBy"] == "MetricDefinition shop/load"
    serving = desired(state, status, NOW)
    assert "shadowedBy" not in serving["route"]
    event = ready_event(state, status, serving)
    assert event is not None
    assert event[:2] == ("Normal", "Serving")

    # It lists it again: not served after the next tick, and a Warning names the backend.
    prometheus.set([], ["expected_load"])
    assert router.refresh(force=True)
    await made.tick()
    assert await external(made, "expected_load") == []
    again = desired(state, serving, NOW)
    event = ready_event(state, serving, again)
    assert event is not None
    kind, reason, note = event
    assert (kind, reason) == ("Warning", "ShadowedByPlatform")
    assert note.startswith("Not ready (was Serving): metric expected_load is answered by backend")


async def test_a_route_a_pods_name_and_an_objects_resource_decide_as_the_router_does() -> None:
    made = backend(
        Pods=lambda definition, tools: Fixed(list(POD_VALUES)),
    )
    upstream = Host(
        backend=Listed("upstream"),
        routes=(Route(api=CUSTOM, resource=PODS, metric="infl*", where="backends[1].routes[0]"),),
    )
    prometheus = Listed("prometheus", custom=[(DEPLOY, "busy")])
    routed(made, upstream, prometheus)
    made.catalog.event("ADDED", obj(pods_definition({"type": "Pods"}), "pods", namespace="a"))
    workload = {
        "type": "Object",
        "describedObject": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
    }
    made.catalog.event(
        "ADDED", obj({**pods_definition(workload), "metricName": "busy"}, "object", namespace="b")
    )
    # A Pods definition of `busy` is not the platform's (it lists busy for deployments only).
    made.catalog.event(
        "ADDED",
        obj({**pods_definition({"type": "Pods"}), "metricName": "busy"}, "busy-pods", "c"),
    )
    await made.tick()
    found = states(made)
    assert (found["pods"]["reason"], found["pods"]["shadowedBy"]) == (
        "ShadowedByPlatform",
        "backend upstream",
    )
    assert (
        "its route backends[1].routes[0]: api=custom resource=pods metric=infl*"
        in (found["pods"]["message"])
    )
    assert (found["object"]["reason"], found["object"]["shadowedBy"]) == (
        "ShadowedByPlatform",
        "backend prometheus",
    )
    assert desired(made.catalog.states[("b", "object")], {}, NOW)["route"] == {
        "api": "custom",
        "resource": "deployments.apps",
        "shadowedBy": "backend prometheus",
    }
    assert (found["busy-pods"]["reason"], found["busy-pods"]["shadowedBy"]) == ("Serving", None)
    assert made.list_metrics() == frozenset({MetricInfo(PODS, True, "busy")})
    request = BackendRequest(
        metric=MetricInfo(PODS, True, "inflight"),
        mapping=ResourceMapping(PODS, "Pod", "v1", True),
        objects=(("a", "web-1"),),
        metric_selector=EVERYTHING,
    )
    assert await made.fetch(request) == []


async def test_the_router_is_asked_once_per_platform_change_and_never_per_request() -> None:
    made = backend()
    prometheus = Listed("prometheus", external=["other"])
    router, precedence = routed(made, prometheus)
    for index in range(20):
        made.catalog.event("ADDED", obj(constant(index, metricName=f"m{index}"), f"d{index}"))
    await made.tick()
    generation = router.platform_generation
    assert router.refresh(force=True)  # the definitions' own listing: read, yet no platform move
    assert router.platform_generation == generation
    precedence.asked = 0
    for _ in range(3):
        await made.tick()
        assert await external(made, "m3") == [3.0]
    assert router.refresh(force=True) is False
    assert precedence.asked == 0  # nothing moved: O(1) per tick, nothing per request
    prometheus.set([], ["other", "m3"])
    assert router.refresh(force=True)
    await made.tick()
    # Each valid definition asked once, and the one namespace that moved re-decided once.
    assert precedence.asked == 20 + 20
    assert await external(made, "m3") == []
    assert await external(made, "m4") == [4.0]


async def test_a_new_router_is_asked_again_and_a_limit_still_counts_shadowed_ones() -> None:
    made = backend(Platform(limits=Limits(definitions=1)))
    routed(made, Listed("prometheus", external=["expected_load"]))
    made.catalog.event("ADDED", obj(constant(7), "load", created="2026-12-01T00:00:00Z"))
    made.catalog.event(
        "ADDED", obj(constant(1, metricName="x"), "later", created="2026-12-02T00:00:00Z")
    )
    await made.tick()
    found = states(made)
    assert found["load"]["reason"] == "ShadowedByPlatform"
    assert found["later"]["reason"] == "OverLimit"  # the shadowed one holds the place
    assert found["later"]["shadowedBy"] is None
    # A reload: a router without the platform backend serves the definition, even though its
    # generation number may equal the last one seen.
    routed(made)
    await made.tick()
    assert states(made)["load"]["reason"] == "Serving"
    assert await external(made, "expected_load") == [7.0]
