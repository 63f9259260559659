"""What the backends list, as the router last read it, and the claims of the backends without
routes: a metric listed by one such backend is claimed by it; listed by two or more, it is
contested (a `Conflict` unless a route decides it).

A backend that `yields` (`Host.yields`: the metric definitions of application teams) claims
only what no other backend lists, after them, and is never part of a conflict.

Between backends whose listings are known at start-up a conflict is a start-up error naming both
(`Router.start()`); one involving a listing discovered at run time (Prometheus series) goes to
the first in file order, with one warning naming both (docs/backends.md, "Routing").

Owns the listing records and conflict detection; it must not read backends, match routes or
memoise decisions (`query.routing`). Cost: `claim` is O(listed metrics of all backends), run only
when a listing changed, never per request.

PURE: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from custom_metrics_server.domain import GroupResource, MetricInfo
from custom_metrics_server.query.routes import API, CUSTOM, EXTERNAL, Host

__all__ = ["Claims", "Conflict", "Listing", "claim"]

#: (API, resource, metric) -> the indexes of the backends listing it, in file order
Contested = dict[tuple[API, GroupResource | None, str], list[int]]


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


class Listing:
    """What one backend lists, as last read, and how its listing objects behave: the objects
    it returned (`raw_*`), their contents when read (`seen_*`, the value a later read is
    compared with), and whether they can change without a new object (`volatile`)."""

    __slots__ = (
        "checked",
        "custom",
        "external",
        "raw_custom",
        "raw_external",
        "seen_custom",
        "seen_external",
        "volatile",
    )

    def __init__(self) -> None:
        self.raw_custom: object = None
        self.raw_external: object = None
        self.seen_custom: frozenset[MetricInfo] | None = None
        self.seen_external: frozenset[str] | None = None
        self.custom: dict[tuple[GroupResource, str], MetricInfo] = {}
        self.external: frozenset[str] = frozenset()
        self.volatile = False
        self.checked = -1.0


@dataclass(frozen=True, slots=True)
class Claims:
    """The listing claims of the backends without routes: metric -> the first claimant's index,
    and the metrics two or more of them list (in file order)."""

    custom: dict[tuple[GroupResource, str], int]
    external: dict[str, int]
    contested: Contested


def claim(hosts: Sequence[Host], listings: Sequence[Listing]) -> Claims:
    """The claims of the backends without routes over their listings. O(listed metrics)."""
    custom: dict[tuple[GroupResource, str], int] = {}
    external: dict[str, int] = {}
    conflicts: Contested = {}
    yielding = []
    for index, host in enumerate(hosts):
        if host.yields:
            yielding.append(index)
            continue
        if host.routes is not None:
            continue
        listing = listings[index]
        for key in listing.custom:
            first = custom.setdefault(key, index)
            if first != index:
                conflicts.setdefault((CUSTOM, key[0], key[1]), [first]).append(index)
        for name in listing.external:
            first = external.setdefault(name, index)
            if first != index:
                conflicts.setdefault((EXTERNAL, None, name), [first]).append(index)
    # Backends that yield take what nobody else lists, never contesting it; routes are
    # matched before claims, so a platform route wins over them too.
    for index in yielding:
        listing = listings[index]
        for key in listing.custom:
            custom.setdefault(key, index)
        for name in listing.external:
            external.setdefault(name, index)
    return Claims(custom, external, conflicts)
