"""What the router tells a backend that yields (`query.precedence.RouterPrecedence`): which
backend that does not yield wins a metric, by a route (named where the backends file writes it)
or by its listing; and `platform_generation`, which moves with the listings of the backends that
do not yield and not with the yielding backend's own."""

from __future__ import annotations

from custom_metrics_server.domain import GroupResource
from custom_metrics_server.query.precedence import RouterPrecedence
from custom_metrics_server.query.routes import EXTERNAL, Host, Route
from custom_metrics_server.query.routing import Router
from custom_metrics_server.sdk.precedence import Precedence, Winner
from tests.query.test_routing import Listed

PODS = GroupResource("", "pods")
DEPLOYMENTS = GroupResource("apps", "deployments")


def routers() -> tuple[Router, Listed, Listed]:
    teams = Listed(
        "metric-definitions",
        custom=[(PODS, "inflight"), (DEPLOYMENTS, "inflight")],
        external=["queue_depth", "load", "queue_age"],
    )
    prometheus = Listed("prometheus", custom=[(PODS, "inflight")], external=["queue_depth"])
    passthrough = Listed("upstream")
    route = Route(api=EXTERNAL, metric="queue_a*", where="backends[2].routes[0]")
    router = Router(
        [
            Host(backend=teams, yields=True, dynamic=True),
            Host(backend=prometheus, dynamic=True),
            Host(backend=passthrough, routes=(route,)),
        ]
    )
    return router, teams, prometheus


def test_the_winner_is_the_backend_the_router_gives_the_metric_to_by_route_or_listing() -> None:
    router, _, _ = routers()
    precedence: Precedence = RouterPrecedence(router)
    assert precedence.winner(None, "queue_depth") == Winner("prometheus")
    assert precedence.winner(PODS, "inflight") == Winner("prometheus")
    routed = precedence.winner(None, "queue_age")
    assert routed == Winner("upstream", "backends[2].routes[0]: api=external metric=queue_a*")
    assert str(routed) == (
        "backend upstream (its route backends[2].routes[0]: api=external metric=queue_a*)"
    )
    assert str(Winner("prometheus")) == "backend prometheus (it lists the metric)"
    # Only the yielding backend answers, or nobody does: no winner.
    assert precedence.winner(None, "load") is None
    assert precedence.winner(DEPLOYMENTS, "inflight") is None
    assert precedence.winner(None, "nobody_lists_this") is None
    # The winner is the router's own decision.
    assert router.external("queue_depth").name == "prometheus"  # type: ignore[union-attr]
    assert router.external("load").name == "metric-definitions"  # type: ignore[union-attr]


def test_the_generation_moves_with_the_platforms_listings_only() -> None:
    router, teams, prometheus = routers()
    precedence = RouterPrecedence(router)
    start = precedence.platform_generation
    assert not router.refresh(force=True)
    assert precedence.platform_generation == start
    # The yielding backend's own listing changes (a definition starts or stops serving): the
    # answers cannot have changed, and the generation stays.
    teams.set([(PODS, "inflight")], ["queue_depth"])
    assert router.refresh(force=True)
    assert precedence.platform_generation == start
    # The platform stops listing queue_depth: the generation moves, and the answer follows.
    prometheus.set([(PODS, "inflight")], [])
    assert router.refresh(force=True)
    moved = precedence.platform_generation
    assert moved != start
    assert precedence.winner(None, "queue_depth") is None
    # It lists it again (a custom change counts as well).
    prometheus.set([(PODS, "inflight"), (PODS, "other")], ["queue_depth"])
    assert router.refresh(force=True)
    assert precedence.platform_generation != moved
    assert precedence.winner(None, "queue_depth") == Winner("prometheus")


def test_a_question_never_reads_the_listings_again() -> None:
    """A miss on the request path re-reads the listings; a yielding backend's question never
    does (it would cost O(listed metrics) for each definition of a list)."""
    router, _, _ = routers()
    refreshes: list[bool] = []
    real = router.refresh

    def counted(*, force: bool = False) -> bool:
        refreshes.append(force)
        return real(force=force)

    router.refresh = counted  # type: ignore[method-assign]
    precedence = RouterPrecedence(router)
    assert precedence.winner(None, "nobody_lists_this") is None
    assert precedence.winner(PODS, "nobody_lists_this") is None
    assert refreshes == []
    assert router.decide_external("nobody_lists_this") is None
    assert refreshes == [False]
