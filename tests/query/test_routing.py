"""Routing: routes in order, listing claims, conflicts, memoised decisions and discovery."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from types import TracebackType
from typing import Self

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalSample,
    GroupResource,
    MetricInfo,
    Readiness,
    Sample,
)
from custom_metrics_server.query.routes import Host, Route, glob_pattern
from custom_metrics_server.query.routing import VOLATILE_RECHECK, Router

PODS = GroupResource("", "pods")
DEPLOYMENTS = GroupResource("apps", "deployments")


class Listed:
    """A backend that only lists (the router never fetches)."""

    def __init__(
        self,
        name: str,
        custom: Collection[tuple[GroupResource, str]] = (),
        external: Collection[str] = (),
    ) -> None:
        self.name = name
        self.set(custom, external)
        self.volatile = False

    def set(
        self, custom: Collection[tuple[GroupResource, str]], external: Collection[str] = ()
    ) -> None:
        self._custom = frozenset(MetricInfo(gr, True, metric) for gr, metric in custom)
        self._external = frozenset(external)

    def list_metrics(self) -> Collection[MetricInfo]:
        return set(self._custom) if self.volatile else self._custom

    def list_external_metrics(self) -> Collection[str]:
        return self._external

    async def fetch(self, request: BackendRequest) -> Sequence[Sample]:
        return ()

    async def fetch_external(self, request: ExternalBackendRequest) -> Sequence[ExternalSample]:
        return ()

    def ready(self) -> Readiness:
        return Readiness(True)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


def name_of(host: Host | None) -> str | None:
    return None if host is None else host.name


def test_a_backend_without_routes_answers_what_it_lists() -> None:
    router = Router([Host(backend=Listed("a", [(PODS, "rps")], ["depth"]))])
    assert name_of(router.custom(PODS, "rps")) == "a"
    assert name_of(router.external("depth")) == "a"
    assert router.custom(PODS, "other") is None
    assert router.custom(DEPLOYMENTS, "rps") is None
    assert router.external("rps") is None


def test_the_first_route_in_file_order_decides() -> None:
    first = Host(backend=Listed("first"), routes=(Route(metric="kube_*"),))
    second = Host(backend=Listed("second"), routes=(Route(metric="kube_pod_x"),))
    router = Router([first, second])
    assert name_of(router.custom(PODS, "kube_pod_x")) == "first"
    swapped = Router([second, first])
    assert name_of(swapped.custom(PODS, "kube_pod_x")) == "second"
    assert name_of(swapped.custom(PODS, "kube_other")) == "first"


def test_a_route_is_a_claim_even_for_metrics_its_backend_does_not_list() -> None:
    lister = Host(backend=Listed("lister", [(PODS, "orders_open")]))
    routed = Host(backend=Listed("routed"), routes=(Route(api="custom", metric="orders_*"),))
    router = Router([lister, routed])
    assert name_of(router.custom(PODS, "orders_open")) == "routed"
    assert name_of(router.custom(PODS, "orders_unlisted")) == "routed"


def test_a_backend_with_routes_answers_only_what_its_routes_match() -> None:
    narrow = Host(backend=Listed("narrow", [(PODS, "a"), (PODS, "b")]), routes=(Route(metric="a"),))
    router = Router([narrow])
    assert name_of(router.custom(PODS, "a")) == "narrow"
    assert router.custom(PODS, "b") is None
    assert [info.metric for info in router.custom_metrics()] == ["a"]


@pytest.mark.parametrize(
    ("route", "metric", "matches"),
    [
        pytest.param(Route(metric="kube_*"), "kube_pod", True, id="glob-star"),
        pytest.param(Route(metric="kube_*"), "xkube_pod", False, id="glob-anchored"),
        pytest.param(Route(metric="a?c"), "abc", True, id="glob-question"),
        pytest.param(Route(metric="a?c"), "abbc", False, id="glob-question-one-char"),
        pytest.param(Route(metric="a.b*"), "axbc", False, id="glob-dot-is-literal"),
        pytest.param(Route(metric_regex="orders_(open|late)"), "orders_open", True, id="regex"),
        pytest.param(
            Route(metric_regex="orders_(open|late)"), "orders_openx", False, id="regex-whole-name"
        ),
        pytest.param(Route(metric_regex="open"), "orders_open", False, id="regex-anchored-start"),
        pytest.param(Route(), "anything", True, id="no-metric-condition"),
    ],
)
def test_metric_conditions(route: Route, metric: str, matches: bool) -> None:
    router = Router([Host(backend=Listed("b"), routes=(route,))])
    assert (router.external(metric) is not None) is matches
    assert route.matches_metric(metric) is matches


def test_resource_and_api_conditions() -> None:
    pods_only = Host(backend=Listed("pods"), routes=(Route(api="custom", resource=PODS),))
    external_only = Host(backend=Listed("ext"), routes=(Route(api="external"),))
    router = Router([pods_only, external_only])
    assert name_of(router.custom(PODS, "m")) == "pods"
    assert router.custom(DEPLOYMENTS, "m") is None
    assert name_of(router.external("m")) == "ext"


def test_an_external_route_with_a_resource_is_refused() -> None:
    with pytest.raises(ValueError, match="external metrics have no resource"):
        Route(api="external", resource=PODS)


def test_metric_and_metric_regex_together_are_refused() -> None:
    with pytest.raises(ValueError, match="not both"):
        Route(metric="a", metric_regex="a")


def test_a_bad_regex_is_refused_with_its_error() -> None:
    with pytest.raises(ValueError, match=r"metricRegex '\(': missing \), unterminated subpattern"):
        Route(metric_regex="(")


def test_a_listed_route_matches_only_what_its_backend_lists_and_falls_through() -> None:
    plugin = Host(
        backend=Listed("plugin", [(PODS, "shared")]),
        routes=(Route(metric="special"), Route(listed=True)),
    )
    catch_all = Host(backend=Listed("fallback"), routes=(Route(),))
    router = Router([plugin, catch_all])
    assert name_of(router.custom(PODS, "special")) == "plugin"
    assert name_of(router.custom(PODS, "shared")) == "plugin"
    assert name_of(router.custom(PODS, "unlisted")) == "fallback"


def test_two_backends_listing_one_metric_is_a_start_up_conflict_naming_both() -> None:
    router = Router(
        [Host(backend=Listed("a", [(PODS, "rps")])), Host(backend=Listed("b", [(PODS, "rps")]))]
    )
    conflicts = router.start()
    assert [str(c) for c in conflicts] == [
        "backends 'a' and 'b' both list the custom metric pods/rps"
    ]


def test_a_route_that_decides_resolves_the_conflict() -> None:
    a = Host(
        backend=Listed("a", [(PODS, "rps"), (PODS, "only_a")]),
        routes=(Route(metric="rps"), Route(listed=True)),
    )
    b = Host(backend=Listed("b", [(PODS, "rps")]))
    router = Router([b, a])
    assert router.start() == []
    assert name_of(router.custom(PODS, "rps")) == "a"
    assert name_of(router.custom(PODS, "only_a")) == "a"


def test_a_conflict_with_a_dynamic_listing_warns_once_and_the_first_wins(
    caplog: pytest.LogCaptureFixture,
) -> None:
    static = Listed("static", external=["x"])
    dynamic = Listed("prom")
    router = Router([Host(backend=static), Host(backend=dynamic, dynamic=True)])
    assert router.start() == []
    caplog.set_level(logging.WARNING)
    dynamic.set((), ["x"])
    router.refresh(force=True)
    router.refresh(force=True)
    assert name_of(router.external("x")) == "static"
    warnings = [r.getMessage() for r in caplog.records if "both list" in r.getMessage()]
    assert warnings == [
        "backends 'static' and 'prom' both list the external metric x; 'static' answers it "
        "(add a route that decides)"
    ]


def test_a_static_conflict_after_start_up_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    a, b = Listed("a", external=["x"]), Listed("b")
    router = Router([Host(backend=a), Host(backend=b)])
    assert router.start() == []
    caplog.set_level(logging.WARNING)
    b.set((), ["x"])
    router.refresh(force=True)
    assert "backends 'a' and 'b' both list the external metric x" in caplog.text


def test_a_newly_listed_metric_is_routed_on_its_first_request() -> None:
    backend = Listed("a")
    router = Router([Host(backend=backend)])
    assert router.custom(PODS, "new") is None
    backend.set([(PODS, "new")])
    assert name_of(router.custom(PODS, "new")) == "a"


class InPlace(Listed):
    """A backend whose listings are one set object each, added to and removed from in place
    (nothing in the SDK asks for a new object when a listing changes)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.custom: set[MetricInfo] = set()
        self.external: set[str] = set()

    def list_metrics(self) -> Collection[MetricInfo]:
        return self.custom

    def list_external_metrics(self) -> Collection[str]:
        return self.external


def test_a_listing_changed_in_place_is_read_by_value() -> None:
    now = [100.0]
    backend = InPlace("a")
    router = Router([Host(backend=backend)], clock=lambda: now[0])
    assert router.custom(PODS, "new") is None
    backend.custom.add(MetricInfo(PODS, True, "new"))
    backend.external.add("depth")
    assert router.refresh(force=True) is True  # the periodic refresh sees it
    assert name_of(router.custom(PODS, "new")) == "a"
    assert name_of(router.external("depth")) == "a"
    assert [info.metric for info in router.custom_metrics()] == ["new"]
    assert router.external_metrics() == ["depth"]
    backend.custom.clear()
    backend.external.discard("depth")
    assert router.refresh(force=True) is True
    assert router.custom(PODS, "new") is None
    assert router.external("depth") is None
    assert router.custom_metrics() == []
    # On the request path (a metric nobody answers), at most every VOLATILE_RECHECK.
    backend.custom.add(MetricInfo(PODS, True, "later"))
    now[0] += VOLATILE_RECHECK / 2
    assert router.custom(PODS, "later") is None
    now[0] += VOLATILE_RECHECK
    assert name_of(router.custom(PODS, "later")) == "a"
    assert router.refresh(force=True) is False  # same value: nothing to re-claim


def test_a_listing_change_clears_memoised_decisions() -> None:
    a, b = Listed("a", external=["x"]), Listed("b")
    router = Router([Host(backend=a), Host(backend=b)])
    assert name_of(router.external("x")) == "a"
    a.set((), ())
    b.set((), ["x"])
    assert name_of(router.external("x")) == "a"  # memoised until the next refresh
    assert router.refresh() is True
    assert name_of(router.external("x")) == "b"


def test_a_volatile_listing_is_reread_on_misses_at_most_every_recheck_interval() -> None:
    now = [100.0]
    backend = Listed("a")
    backend.volatile = True
    router = Router([Host(backend=backend)], clock=lambda: now[0])
    backend.set([(PODS, "new")])
    now[0] += VOLATILE_RECHECK / 2
    assert router.custom(PODS, "new") is None
    now[0] += VOLATILE_RECHECK
    assert name_of(router.custom(PODS, "new")) == "a"


def test_discovery_merges_backends_once_each() -> None:
    a = Listed("a", [(PODS, "rps"), (PODS, "a_only")], ["depth", "x"])
    b = Listed("b", [(PODS, "rps"), (DEPLOYMENTS, "rps")], ["depth", "y"])
    router = Router([Host(backend=a), Host(backend=b, dynamic=True)])
    assert sorted((str(i.group_resource), i.metric) for i in router.custom_metrics()) == [
        ("deployments.apps", "rps"),
        ("pods", "a_only"),
        ("pods", "rps"),
    ]
    assert sorted(router.external_metrics()) == ["depth", "x", "y"]


def test_backend_names_must_be_unique() -> None:
    with pytest.raises(ValueError, match="backend names must be unique: a"):
        Router([Host(backend=Listed("a")), Host(backend=Listed("a"))])


def test_a_listing_that_raises_reads_as_empty_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(Listed):
        def list_metrics(self) -> Collection[MetricInfo]:
            raise RuntimeError("boom")

    router = Router([Host(backend=Broken("broken", external=["x"]))])
    assert router.external("x") is None
    router.refresh(force=True)
    assert caplog.text.count("backend 'broken': listing its metrics raised; read as empty") == 1


def test_glob_pattern_escapes_everything_but_star_and_question_mark() -> None:
    assert glob_pattern("a.b*c?") == r"a\.b.*c."


def test_a_thousand_routes_keep_first_match_order() -> None:
    hosts = [
        Host(backend=Listed(f"b{i}"), routes=tuple(Route(metric=f"m{i}_{j}*") for j in range(50)))
        for i in range(20)
    ]
    router = Router(hosts)
    assert name_of(router.external("m7_3x")) == "b7"
    assert name_of(router.external("m19_49")) == "b19"
    assert router.external("zzz") is None


_METRICS = ("a", "b", "c", "d")
_RESOURCES = (PODS, DEPLOYMENTS)
_Change = tuple[int, str, int, bool]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),  # which backend
            st.sampled_from(["add", "remove", "replace", "external"]),
            st.integers(0, len(_METRICS) * len(_RESOURCES) - 1),  # which metric
            st.booleans(),  # ask before the refresh too
        ),
        max_size=25,
    )
)
def test_memoised_decisions_equal_a_fresh_router_s_through_listing_changes(
    changes: list[_Change],
) -> None:
    """The decision memo, the listing snapshots, the claims and discovery against a router
    built afresh on the same backends after every change (adds and removals in place, new
    listing objects, external names), with routes on one backend."""
    backends = [InPlace("a"), InPlace("b"), InPlace("routed")]
    hosts = [
        Host(backend=backends[0]),
        Host(backend=backends[1], dynamic=True),
        Host(backend=backends[2], routes=(Route(metric="c"), Route(listed=True))),
    ]
    router = Router(hosts)
    every = [(resource, metric) for resource in _RESOURCES for metric in _METRICS]

    def answers(of: Router) -> tuple[object, ...]:
        return (
            tuple(name_of(of.custom(resource, metric)) for resource, metric in every),
            tuple(name_of(of.external(metric)) for metric in _METRICS),
            sorted((str(i.group_resource), i.metric) for i in of.custom_metrics()),
            sorted(of.external_metrics()),
            tuple(tuple(of.resources_listing(metric)) for metric in _METRICS),
        )

    answers(router)  # memoise everything once
    for which, change, index, ask_before in changes:
        backend = backends[which]
        resource, metric = every[index]
        info = MetricInfo(resource, True, metric)
        if change == "add":
            backend.custom.add(info)
        elif change == "remove":
            backend.custom.discard(info)
        elif change == "replace":  # a new object of another value
            backend.custom = {*backend.custom, info} - {MetricInfo(resource, True, "a")}
        else:
            backend.external ^= {metric}
        if ask_before:
            answers(router)
        router.refresh(force=True)
        assert answers(router) == answers(Router(hosts))
