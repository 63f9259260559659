"""Which backend answers a metric: one memoised decision per (API, resource, metric), over the
routes of the backends file (`query.routes`) and the backends' listings (`query.claims`).

The rules (docs/backends.md, "Routing"), for a metric of one API (`custom` or `external`), one
resource (custom only) and one name:

1. **Routes, in order.** The routes of every backend, backends in file order and each backend's
   routes in its own order; the first route that matches decides (matching: `query.routes`).
2. **Listings.** Otherwise, the backends *without* routes that list the metric claim it. One:
   it answers. Two or more: a conflict (`query.claims`).
3. Otherwise nobody answers: the query layer's not-found policy applies.

A backend with routes answers exactly what its routes match, listed or not (a route is a claim:
a pass-through or a database can answer names it does not enumerate); a backend without routes
answers what it lists.

Owns reading the listings, the memo and the hints of the error path; it must not fetch or apply
policies (`query.engine`). Cost: a decision is memoised per (resource, metric) per API in a
bounded dict, so a request costs one dictionary lookup (docs/performance.md, "Routing decisions").
A first decision costs one exact-name lookup, one match of the indexed globs and regexes that can
apply to the resource (one index per API and resource, built once), and a lookup in the listing
claims. Listings are read by `refresh()` and compared by value: O(backends) identity checks
for listings that are the same immutable object as last read (a frozenset or tuple), plus
O(metrics) at C speed for any other (a set a backend changes in place, a new object per
call); a change clears the memo. The server refreshes every second, on discovery, and when a
metric has no backend (at once for backends whose listing is a stable immutable object, at
most every `VOLATILE_RECHECK` seconds for any other).

PURE: no I/O (logging only).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, Final

from custom_metrics_server.domain import GroupResource, MetricInfo
from custom_metrics_server.query.claims import Conflict, Listing, claim
from custom_metrics_server.query.decision import Decision, answering_backend, backend_policy
from custom_metrics_server.query.routes import API, CUSTOM, EXTERNAL, Host, Route, RouteIndex
from custom_metrics_server.sdk.backend import MetricsBackend

# Host, Route and Conflict are re-exported for the server and the plugins, which import them here.
__all__ = [
    "MEMO_LIMIT",
    "VOLATILE_RECHECK",
    "Conflict",
    "Host",
    "Route",
    "Router",
    "hosts_of",
]

logger = logging.getLogger(__name__)

#: Memoised decisions per API; beyond it the memo starts over (keys are request-chosen).
MEMO_LIMIT: Final = 65_536
#: A backend whose listing is not a stable immutable object (a new object on every call, or a
#: set it may change in place) is re-read at most this often on the request path (the periodic
#: refresh always reads it).
VOLATILE_RECHECK: Final = 0.05
_NOTHING: Final[tuple[()]] = ()
#: Exact types whose contents cannot change while the object stays the same: a listing
#: returned again as one of these is unchanged without looking inside it.
_IMMUTABLE: Final = (frozenset, tuple)


class Router:
    """Decides the backend of each metric (see the module). Not thread-safe: the event loop
    owns it. `refresh()` before the first decision (the constructor does)."""

    def __init__(self, hosts: Sequence[Host], *, clock: Callable[[], float] = time.monotonic):
        names = [host.name for host in hosts]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"backend names must be unique: {', '.join(duplicates)}")
        self.hosts = tuple(hosts)
        self._clock = clock
        self._routes: list[tuple[int, Route]] = [
            (index, route) for index, host in enumerate(self.hosts) for route in host.routes or ()
        ]
        self._candidates: dict[tuple[API, GroupResource | None], RouteIndex] = {}
        self._listings = [Listing() for _ in self.hosts]
        self._claims_custom: dict[tuple[GroupResource, str], int] = {}
        self._claims_external: dict[str, int] = {}
        self._conflicts: list[Conflict] = []
        self._warned: set[tuple[object, ...]] = set()
        self._broken: set[int] = set()
        self._quiet_static = True  # until `start()`: start-up conflicts are errors, not warnings
        self._memo_custom: dict[tuple[GroupResource, str], Decision] = {}
        self._memo_external: dict[str, Decision] = {}
        #: metric name -> the resources some backend lists it for (hints)
        self._listed_resources: dict[str, list[GroupResource]] | None = None
        #: hints computed on the error path, until the listings change (bounded)
        self._hints: dict[object, Any] = {}
        self._discovery: tuple[list[MetricInfo], list[str]] | None = None
        #: bumped when a listing of a backend that does not yield changed (`query.precedence`)
        self.platform_generation = 0
        self.refresh(force=True)

    # -- decisions (the request path) ----------------------------------------------------------

    def custom(self, resource: GroupResource, metric: str) -> Host | None:
        """The backend answering `metric` of `resource`, or None. O(1) once decided."""
        decision = self.decide_custom(resource, metric)
        return None if decision is None else decision.host

    def external(self, metric: str) -> Host | None:
        """The backend answering the external `metric`, or None. O(1) once decided."""
        decision = self.decide_external(metric)
        return None if decision is None else decision.host

    def decide_custom(
        self, resource: GroupResource, metric: str, *, refresh: bool = True
    ) -> Decision | None:
        """The decision for `metric` of `resource` (see `Decision`), or None when no backend
        answers it (with `refresh`, after reading the listings again). O(1) once decided."""
        key = (resource, metric)
        decision = self._memo_custom.get(key)
        if decision is not None:
            return decision
        decision = self._decide(CUSTOM, resource, metric)
        if decision is None and refresh and self.refresh():
            decision = self._decide(CUSTOM, resource, metric)
        if decision is not None:
            memo = self._memo_custom
            if len(memo) >= MEMO_LIMIT:
                memo.clear()
            memo[key] = decision
        return decision

    def decide_external(self, metric: str, *, refresh: bool = True) -> Decision | None:
        """The decision for the external `metric`, or None (as `decide_custom`)."""
        decision = self._memo_external.get(metric)
        if decision is not None:
            return decision
        decision = self._decide(EXTERNAL, None, metric)
        if decision is None and refresh and self.refresh():
            decision = self._decide(EXTERNAL, None, metric)
        if decision is not None:
            memo = self._memo_external
            if len(memo) >= MEMO_LIMIT:
                memo.clear()
            memo[metric] = decision
        return decision

    def _decide(self, api: API, resource: GroupResource | None, metric: str) -> Decision | None:
        route: Route | None = None
        routed = self._routed(api, resource, metric)
        if routed is not None:
            index, route = routed
        else:
            if api == CUSTOM:
                assert resource is not None
                claimed = self._claims_custom.get((resource, metric))
            else:
                claimed = self._claims_external.get(metric)
            if claimed is None:
                return None
            index = claimed
        host = self.hosts[index]
        policy = route.policy if route is not None else None
        if policy is None:
            policy = backend_policy(host, api, resource, metric)
        return Decision(
            host,
            index,
            route,
            listed=self._lists(index, api, resource, metric),
            policy=None if policy is None or policy.inert else policy,
            backend=answering_backend(host.backend, resource, metric),
        )

    def _candidates_of(self, api: API, resource: GroupResource | None) -> RouteIndex:
        key = (api, resource)
        found = self._candidates.get(key)
        if found is None:
            if len(self._candidates) >= 4096:  # resources are request-chosen
                self._candidates.clear()
            found = self._candidates[key] = RouteIndex(
                [(index, route) for index, route in self._routes if route.applies(api, resource)]
            )
        return found

    def _lists(self, index: int, api: API, resource: GroupResource | None, metric: str) -> bool:
        listing = self._listings[index]
        if api == EXTERNAL:
            return metric in listing.external
        assert resource is not None
        return (resource, metric) in listing.custom

    # -- listings ------------------------------------------------------------------------------

    def refresh(self, *, force: bool = False) -> bool:
        """Read every backend's listings; True when one changed (the memo is then cleared).

        Listings are compared by value: a listing returned again as the same `frozenset` or
        `tuple` (whose contents cannot change) is unchanged, O(1); any other (a set or list a
        backend may change in place, a view, a new object per call) is copied into a frozenset
        and compared with the last copy, O(metrics) at C speed (~20 ns a metric: ~18 us for a
        set of 1,000), and only a listing whose value changed is re-read into the claims. Such
        a *volatile* listing is re-read on every forced refresh (the periodic one, start-up,
        reload) and, without `force` (a metric nobody answers, discovery), at most every
        `VOLATILE_RECHECK` seconds. O(backends) when every listing is a stable immutable
        object."""
        now = self._clock()
        changed = False
        for index, host in enumerate(self.hosts):
            listing = self._listings[index]
            backend = host.backend
            try:
                custom = backend.list_metrics()
                external = backend.list_external_metrics()
            except Exception:
                custom, external = self._failed(index, host)
            else:
                self._broken.discard(index)
            if (
                custom is listing.raw_custom
                and external is listing.raw_external
                and not listing.volatile
            ):
                continue
            if listing.volatile and not force and now - listing.checked < VOLATILE_RECHECK:
                continue
            listing.checked = now
            infos: dict[tuple[GroupResource, str], MetricInfo] | None = None
            try:
                listing.volatile = not (
                    type(custom) in _IMMUTABLE
                    and type(external) in _IMMUTABLE
                    and backend.list_metrics() is custom
                    and backend.list_external_metrics() is external
                )
                # A frozenset is its own copy (CPython's frozenset() returns it): O(1) there.
                seen_custom = frozenset(custom)
                seen_external = frozenset(external)
                if seen_custom != listing.seen_custom:
                    infos = {(info.group_resource, info.metric): info for info in custom}
            except Exception:
                custom, external = self._failed(index, host)
                seen_custom, seen_external, infos = frozenset(), frozenset(), {}
            listing.raw_custom, listing.raw_external = custom, external
            listing.seen_custom, listing.seen_external = seen_custom, seen_external
            moved = False
            if infos is not None:
                moved = infos.keys() != listing.custom.keys()
                listing.custom = infos
            if seen_external != listing.external:
                moved = True
                listing.external = seen_external
            if moved and not host.yields:
                self.platform_generation += 1
            changed = changed or moved
        if changed:
            self._claim()
        return changed

    def _failed(self, index: int, host: Host) -> tuple[Collection[Any], Collection[Any]]:
        """A built-in backend whose listing raised (plugins are guarded by their adapter):
        read as empty, logged once until it lists again."""
        if index not in self._broken:
            self._broken.add(index)
            logger.exception("backend %r: listing its metrics raised; read as empty", host.name)
        return _NOTHING, _NOTHING

    def _claim(self) -> None:
        """Rebuild the listing claims of the backends without routes; record conflicts."""
        claims = claim(self.hosts, self._listings)
        self._claims_custom = claims.custom
        self._claims_external = claims.external
        self._memo_custom = {}
        self._memo_external = {}
        self._listed_resources = None
        self._hints = {}
        self._discovery = None
        found = []
        for (api, resource, metric), indexes in claims.contested.items():
            if self._routed(api, resource, metric) is not None:
                continue
            found.append(Conflict(api, metric, resource, tuple(self.hosts[i] for i in indexes)))
        self._conflicts = found
        self._warn()

    def _warn(self) -> None:
        for conflict in self._conflicts:
            if conflict.static and self._quiet_static:
                continue
            key = (conflict.api, conflict.resource, conflict.metric, conflict.hosts)
            if key not in self._warned:
                self._warned.add(key)
                logger.warning(
                    "%s; %r answers it (add a route that decides)", conflict, conflict.hosts[0].name
                )

    def start(self) -> list[Conflict]:
        """The start-up check: read the listings, return the conflicts between listings known
        at start-up (the server refuses to start on them); from now on every new conflict is
        a warning (once each)."""
        self.refresh(force=True)
        static = [conflict for conflict in self._conflicts if conflict.static]
        self._quiet_static = False
        return static

    def _routed(
        self, api: API, resource: GroupResource | None, metric: str
    ) -> tuple[int, Route] | None:
        """The index of the backend whose route decides, and that route, if one does."""
        candidates = self._candidates_of(api, resource)
        for position in candidates.matching(metric):
            index, route = candidates.routes[position]
            if not route.listed or self._lists(index, api, resource, metric):
                return index, route
        return None

    # -- hints (the error path and explanations only) -------------------------------------------

    def listed_names(self, api: API, resource: GroupResource | None = None) -> list[str]:
        """Every metric name some backend lists (for `resource`, when given), sorted."""
        names: set[str] = set()
        for listing in self._listings:
            if api == EXTERNAL:
                names.update(listing.external)
            else:
                names.update(
                    metric
                    for (listed_for, metric) in listing.custom
                    if resource is None or listed_for == resource
                )
        return sorted(names)

    def resources_listing(self, metric: str) -> list[GroupResource]:
        """The resources some backend lists the custom `metric` for. O(1) after the first
        call per listing change."""
        index = self._listed_resources
        if index is None:
            index = {}
            for listing in self._listings:
                for resource, name in listing.custom:
                    found = index.setdefault(name, [])
                    if resource not in found:
                        found.append(resource)
            self._listed_resources = index
        return sorted(index.get(metric, ()))

    def remembered(self, key: object, compute: Callable[[], Any]) -> Any:
        """`compute()`, memoised under `key` until the listings change (at most 1,024 keys:
        the keys are request-chosen)."""
        hints = self._hints
        if key in hints:
            return hints[key]
        if len(hints) >= 1024:
            hints.clear()
        found = hints[key] = compute()
        return found

    def lists(self, host: Host, api: API, resource: GroupResource | None, metric: str) -> bool:
        """Whether `host`'s backend lists the metric (as last read)."""
        for index, candidate in enumerate(self.hosts):
            if candidate is host:
                return self._lists(index, api, resource, metric)
        return False

    def conflicts(self) -> list[Conflict]:
        """The conflicts of the listings last read (see `Conflict.static`)."""
        return list(self._conflicts)

    # -- discovery -----------------------------------------------------------------------------

    def custom_metrics(self) -> list[MetricInfo]:
        """Every listed custom metric some backend answers, once each (first listing wins)."""
        return self._discovered()[0]

    def external_metrics(self) -> list[str]:
        """Every listed external metric some backend answers, once each."""
        return self._discovered()[1]

    def _discovered(self) -> tuple[list[MetricInfo], list[str]]:
        self.refresh()
        if self._discovery is None:
            custom: dict[tuple[GroupResource, str], MetricInfo] = {}
            external: dict[str, None] = {}
            for listing in self._listings:
                for key, info in listing.custom.items():
                    if key not in custom and self._decide(CUSTOM, key[0], key[1]) is not None:
                        custom[key] = info
                for name in sorted(listing.external):
                    if name not in external and self._decide(EXTERNAL, None, name) is not None:
                        external[name] = None
            self._discovery = (list(custom.values()), list(external))
        return self._discovery


def hosts_of(backends: Iterable[MetricsBackend | Host]) -> list[Host]:
    """Hosts for backends given bare (no routes, the server's deadline) or already hosted."""
    return [item if isinstance(item, Host) else Host(backend=item) for item in backends]
