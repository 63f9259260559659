"""Which backend answers a metric: the routes of the backends file, the backends' listings, and
one memoised decision per (API, resource, metric).

The rules (docs/backends.md, "Routing"), for a metric of one API (`custom` or `external`), one
resource (custom only) and one name:

1. **Routes, in order.** The routes of every backend, backends in file order and each backend's
   routes in its own order; the first route that matches decides. A route matches on its API
   (both when unset), its resource (`pods`, `deployments.apps`; every resource when unset) and
   its metric: `metric` is an exact name or a glob (`*` any run of characters, `?` one), and
   `metricRegex` a Python regular expression matched against the whole name; neither: every
   metric. A route with `listed: true` matches only metrics its backend lists.
2. **Listings.** Otherwise, the backends *without* routes that list the metric claim it. One:
   it answers. Two or more: a conflict. Between backends whose listings are known at start-up it
   is a start-up error naming both (`conflicts()`); one involving a listing discovered at run
   time (Prometheus series) goes to the first in file order, with one warning naming both.
3. Otherwise nobody answers: the query layer's not-found policy applies.

A backend with routes answers exactly what its routes match, listed or not (a route is a claim:
a pass-through or a database can answer names it does not enumerate); a backend without routes
answers what it lists.

Cost: a decision is memoised per (resource, metric) per API in a bounded dict, so a request
costs one dictionary lookup (well under 1 us; benchmarks/routing.py). A first decision costs
one exact-name lookup, one match of the compiled alternation of the globs and regexes that can
apply to the resource (one per API and resource, compiled once), and a lookup in the listing
claims. Listings are read by `refresh()`: O(backends) identity checks, plus O(metrics) for a
backend whose listing object changed; a change clears the memo. The server refreshes every
second, on discovery, and when a metric has no backend (at once for backends whose listing is a
stable object, at most every `VOLATILE_RECHECK` seconds for one that builds a new object per
call).

PURE: no I/O (logging only).
"""

from __future__ import annotations

import importlib
import logging
import re
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from custom_metrics_server.domain import FailurePolicy, GroupResource, MetricInfo
from custom_metrics_server.sdk.backend import MetricsBackend

__all__ = [
    "API",
    "CUSTOM",
    "EXTERNAL",
    "Conflict",
    "Decision",
    "Host",
    "Route",
    "Router",
    "glob_pattern",
    "literal_prefix",
]

logger = logging.getLogger(__name__)

API = Literal["custom", "external"]
CUSTOM: Final = "custom"
EXTERNAL: Final = "external"

#: Memoised decisions per API; beyond it the memo starts over (keys are request-chosen).
MEMO_LIMIT: Final = 65_536
#: A backend whose listing is a new object on every call is re-read at most this often on the
#: request path (the periodic refresh always reads it).
VOLATILE_RECHECK: Final = 0.05
_GLOB_CHARS: Final = frozenset("*?")
_NOTHING: Final[tuple[()]] = ()
#: The standard library's regex parser (private, stable since 3.11), to read literal prefixes.
_SRE_PARSER: Final[Any] = importlib.import_module("re._parser")


def glob_pattern(glob: str) -> str:
    """The regular expression of a metric glob: `*` any run of characters, `?` one character,
    everything else literal."""
    return "".join(
        ".*" if char == "*" else "." if char == "?" else re.escape(char) for char in glob
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Route:
    """One route of a backend (see the module for the matching rules)."""

    api: API | None = None
    resource: GroupResource | None = None
    metric: str | None = None
    metric_regex: str | None = None
    listed: bool = False
    #: what the metrics this route decides answer when absent or failing (None: the backend's
    #: own, else today's behaviour)
    policy: FailurePolicy | None = None
    #: where the route is written (`backends[1].routes[0]`), for explanations
    where: str = field(default="", compare=False)
    _match: Callable[[str], Any] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.metric is not None and self.metric_regex is not None:
            raise ValueError("a route has metric or metricRegex, not both")
        if self.resource is not None and self.api == EXTERNAL:
            raise ValueError("external metrics have no resource: drop resource or use api: custom")
        pattern = self.pattern()
        if pattern is not None:
            try:
                compiled = re.compile(pattern)
            except re.error as err:
                raise ValueError(f"metricRegex {self.metric_regex!r}: {err}") from None
            object.__setattr__(self, "_match", compiled.fullmatch)

    @property
    def exact(self) -> str | None:
        """The one metric name this route matches, if it names one."""
        metric = self.metric
        if metric is None or _GLOB_CHARS.intersection(metric):
            return None
        return metric

    def pattern(self) -> str | None:
        """The regular expression of the metric condition (a glob's or the regex), if any."""
        if self.metric_regex is not None:
            return self.metric_regex
        if self.metric is not None and self.exact is None:
            return glob_pattern(self.metric)
        return None

    def applies(self, api: API, resource: GroupResource | None) -> bool:
        """Whether the route's API and resource conditions hold."""
        if self.api is not None and self.api != api:
            return False
        return self.resource is None or self.resource == resource

    def matches_metric(self, metric: str) -> bool:
        """Whether the route's metric condition holds."""
        if self.metric is None and self.metric_regex is None:
            return True
        exact = self.exact
        if exact is not None:
            return metric == exact
        assert self._match is not None
        return self._match(metric) is not None

    def __str__(self) -> str:
        parts = [
            f"api={self.api}" if self.api else "",
            f"resource={self.resource}" if self.resource else "",
        ]
        if self.metric is not None:
            parts.append(f"metric={self.metric}")
        if self.metric_regex is not None:
            parts.append(f"metricRegex={self.metric_regex}")
        if self.listed:
            parts.append("listed")
        return " ".join(part for part in parts if part) or "everything"


@dataclass(frozen=True, slots=True, kw_only=True)
class Host:
    """A backend as the router sees it: its routes (None: it claims what it lists), its
    deadline (None: the server's), whether its listing is discovered at run time, and whether
    its readiness gates the server's `/readyz` (else a not-ready backend only fails its own
    metrics, with 503, and `/readyz?verbose` notes it)."""

    backend: MetricsBackend
    routes: tuple[Route, ...] | None = None
    timeout: float | None = None
    dynamic: bool = False
    gates_readiness: bool = True

    @property
    def name(self) -> str:
        """The backend's name."""
        return self.backend.name


class Decision:
    """The router's decision for one (API, resource, metric): the backend (`host`), the route
    that decided (None: its listing claimed the metric), whether the backend lists the metric
    (the self-metrics then name it, else `other`), and the failure policy in force. Memoised
    with the decision; `stats` is the query layer's, filled on first use."""

    __slots__ = ("host", "index", "listed", "policy", "route", "stats")

    def __init__(
        self,
        host: Host,
        index: int,
        route: Route | None,
        *,
        listed: bool,
        policy: FailurePolicy | None,
    ) -> None:
        self.host = host
        self.index = index
        self.route = route
        self.listed = listed
        self.policy = policy
        #: the query layer's `MetricStats` of this decision (None until first used)
        self.stats: Any = None

    def describe(self) -> str:
        """How the backend was chosen: `route backends[1].routes[0] (metric=http_*)` or
        `its listing`."""
        route = self.route
        if route is None:
            return f"backend {self.host.name!r} lists it (no route decides)"
        where = route.where or f"a route of {self.host.name!r}"
        return f"{where} ({route}) sends it to backend {self.host.name!r}"


@dataclass(frozen=True, slots=True)
class Conflict:
    """Backends without routes listing one metric that no route decides."""

    api: API
    metric: str
    resource: GroupResource | None
    hosts: tuple[Host, ...]

    @property
    def static(self) -> bool:
        """Whether every listing involved was known at start-up (then it is an error)."""
        return not any(host.dynamic for host in self.hosts)

    def __str__(self) -> str:
        what = f"{self.resource}/{self.metric}" if self.resource is not None else self.metric
        names = " and ".join(repr(host.name) for host in self.hosts)
        return f"backends {names} both list the {self.api} metric {what}"


def literal_prefix(pattern: str) -> str:
    """The characters every match of `pattern` starts with ("" when unknown: a leading
    alternation, class or group, case-insensitive matching, or a pattern the parser refuses)."""
    try:
        parsed = _SRE_PARSER.parse(pattern)
    except Exception:  # any doubt means no prefix, which is always correct
        return ""
    if parsed.state.flags & re.IGNORECASE:
        return ""
    prefix = []
    for op, argument in parsed.data:
        if op is not _SRE_PARSER.LITERAL:
            break
        prefix.append(chr(argument))
    return "".join(prefix)


class _Candidates:
    """The routes that can apply to one (API, resource), indexed for a first-match lookup:
    exact names in a dict, patterns by their literal prefix (so a lookup tests only the
    patterns whose prefix the metric starts with, plus those without one), routes without a
    metric condition in a list."""

    __slots__ = ("any_metric", "exact", "generic", "lengths", "prefixed", "routes")

    def __init__(self, routes: list[tuple[int, Route]]) -> None:
        self.routes = routes  # (host index, route), in routing order
        self.exact: dict[str, list[int]] = {}
        self.any_metric: list[int] = []
        self.prefixed: dict[str, list[tuple[int, Callable[[str], object]]]] = {}
        self.generic: list[tuple[int, Callable[[str], object]]] = []
        for position, (_, route) in enumerate(routes):
            exact = route.exact
            pattern = route.pattern()
            if exact is not None:
                self.exact.setdefault(exact, []).append(position)
            elif pattern is not None:
                entry = (position, route.matches_metric)
                prefix = literal_prefix(pattern)
                if prefix:
                    self.prefixed.setdefault(prefix, []).append(entry)
                else:
                    self.generic.append(entry)
            else:
                self.any_metric.append(position)
        self.lengths = sorted({len(prefix) for prefix in self.prefixed})

    def matching(self, metric: str) -> list[int]:
        """Positions of every route whose metric condition holds, in routing order.
        O(distinct prefix lengths + patterns sharing the metric's prefixes)."""
        found = list(self.exact.get(metric, ()))
        found += self.any_metric
        prefixed = self.prefixed
        for length in self.lengths:
            if length > len(metric):
                break
            for position, matches in prefixed.get(metric[:length], ()):
                if matches(metric):
                    found.append(position)
        for position, matches in self.generic:
            if matches(metric):
                found.append(position)
        found.sort()
        return found


class _Listing:
    """What one backend lists, as last read, and how its listing objects behave."""

    __slots__ = ("checked", "custom", "external", "raw_custom", "raw_external", "volatile")

    def __init__(self) -> None:
        self.raw_custom: object = None
        self.raw_external: object = None
        self.custom: dict[tuple[GroupResource, str], MetricInfo] = {}
        self.external: frozenset[str] = frozenset()
        self.volatile = False
        self.checked = -1.0


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
        self._candidates: dict[tuple[API, GroupResource | None], _Candidates] = {}
        self._listings = [_Listing() for _ in self.hosts]
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

    def decide_custom(self, resource: GroupResource, metric: str) -> Decision | None:
        """The decision for `metric` of `resource` (see `Decision`), or None when no backend
        answers it. O(1) once decided."""
        key = (resource, metric)
        decision = self._memo_custom.get(key)
        if decision is not None:
            return decision
        decision = self._decide(CUSTOM, resource, metric)
        if decision is None and self.refresh():
            decision = self._decide(CUSTOM, resource, metric)
        if decision is not None:
            memo = self._memo_custom
            if len(memo) >= MEMO_LIMIT:
                memo.clear()
            memo[key] = decision
        return decision

    def decide_external(self, metric: str) -> Decision | None:
        """The decision for the external `metric`, or None. O(1) once decided."""
        decision = self._memo_external.get(metric)
        if decision is not None:
            return decision
        decision = self._decide(EXTERNAL, None, metric)
        if decision is None and self.refresh():
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
            policy = _backend_policy(host, api, resource, metric)
        return Decision(
            host,
            index,
            route,
            listed=self._lists(index, api, resource, metric),
            policy=None if policy is None or policy.inert else policy,
        )

    def _candidates_of(self, api: API, resource: GroupResource | None) -> _Candidates:
        key = (api, resource)
        found = self._candidates.get(key)
        if found is None:
            if len(self._candidates) >= 4096:  # resources are request-chosen
                self._candidates.clear()
            found = self._candidates[key] = _Candidates(
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
        Without `force`, a volatile listing (a new object per call) is re-read at most every
        `VOLATILE_RECHECK` seconds. O(backends) when nothing changed."""
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
            if custom is listing.raw_custom and external is listing.raw_external:
                continue
            if listing.volatile and not force and now - listing.checked < VOLATILE_RECHECK:
                continue
            listing.checked = now
            try:  # a listing that is a new object on every call cannot be compared by identity
                listing.volatile = (
                    backend.list_metrics() is not custom
                    or backend.list_external_metrics() is not external
                )
                if custom is not listing.raw_custom:
                    infos = {(info.group_resource, info.metric): info for info in custom}
                if external is not listing.raw_external:
                    names = frozenset(external)
            except Exception:
                custom, external = self._failed(index, host)
                infos, names = {}, frozenset()
            if custom is not listing.raw_custom:
                listing.raw_custom = custom
                changed = changed or infos.keys() != listing.custom.keys()
                listing.custom = infos
            if external is not listing.raw_external:
                listing.raw_external = external
                changed = changed or names != listing.external
                listing.external = names
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
        custom: dict[tuple[GroupResource, str], int] = {}
        external: dict[str, int] = {}
        conflicts: dict[tuple[API, GroupResource | None, str], list[int]] = {}
        for index, host in enumerate(self.hosts):
            if host.routes is not None:
                continue
            listing = self._listings[index]
            for key in listing.custom:
                first = custom.setdefault(key, index)
                if first != index:
                    conflicts.setdefault((CUSTOM, key[0], key[1]), [first]).append(index)
            for name in listing.external:
                first = external.setdefault(name, index)
                if first != index:
                    conflicts.setdefault((EXTERNAL, None, name), [first]).append(index)
        self._claims_custom = custom
        self._claims_external = external
        self._memo_custom = {}
        self._memo_external = {}
        self._listed_resources = None
        self._hints = {}
        self._discovery = None
        found = []
        for (api, resource, metric), indexes in conflicts.items():
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


def _backend_policy(
    host: Host, api: API, resource: GroupResource | None, metric: str
) -> FailurePolicy | None:
    """The failure policy a backend configures for a metric itself (the Prometheus rules'
    `absent`/`failure`/`maxAge`), through its optional `failure_policy(api, resource, metric)`."""
    ask = getattr(host.backend, "failure_policy", None)
    if not callable(ask):
        return None
    try:
        found = ask(api, resource, metric)
    except Exception:  # a backend's bug must not break routing
        logger.exception("backend %r: failure_policy raised; no policy", host.name)
        return None
    return found if isinstance(found, FailurePolicy) else None


def hosts_of(backends: Iterable[MetricsBackend | Host]) -> list[Host]:
    """Hosts for backends given bare (no routes, the server's deadline) or already hosted."""
    return [item if isinstance(item, Host) else Host(backend=item) for item in backends]
