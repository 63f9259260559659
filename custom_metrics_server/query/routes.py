"""The routes of the backends file and how one is matched: a route's conditions (API, resource,
metric name, glob or regex, `listed`), the backend a route belongs to (`Host`), and the index of
the routes that can apply to one (API, resource) for a first-match lookup.

A route matches on its API (both when unset), its resource (`pods`, `deployments.apps`; every
resource when unset) and its metric: `metric` is an exact name or a glob (`*` any run of
characters, `?` one), and `metricRegex` a Python regular expression matched against the whole
name; neither: every metric. A route with `listed: true` matches only metrics its backend lists
(the router checks that; docs/backends.md, "Routing").

Owns matching only: it must not read listings, decide between backends or memoise decisions
(`query.routing` does). Cost: `RouteIndex.matching` is O(distinct literal-prefix lengths +
patterns sharing the metric's prefixes); it runs once per first decision, never on a memoised
request.

PURE: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from custom_metrics_server.domain import FailurePolicy, GroupResource
from custom_metrics_server.query.regex_prefix import literal_prefix
from custom_metrics_server.sdk.backend import MetricsBackend

__all__ = [
    "API",
    "CUSTOM",
    "EXTERNAL",
    "Host",
    "Route",
    "RouteIndex",
    "glob_pattern",
    "literal_prefix",
]

API = Literal["custom", "external"]
CUSTOM: Final = "custom"
EXTERNAL: Final = "external"

_GLOB_CHARS: Final = frozenset("*?")


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
    deadline (None: the server's), whether its listing is discovered at run time, whether it
    yields (claims only the metrics no other backend lists, never in a conflict, so routes and
    other listings win over it: application teams' metric definitions), and whether its
    readiness gates the server's `/readyz` (else a not-ready backend only fails its own
    metrics, with 503, and `/readyz?verbose` notes it)."""

    backend: MetricsBackend
    routes: tuple[Route, ...] | None = None
    timeout: float | None = None
    dynamic: bool = False
    yields: bool = False
    gates_readiness: bool = True

    @property
    def name(self) -> str:
        """The backend's name."""
        return self.backend.name


class RouteIndex:
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
