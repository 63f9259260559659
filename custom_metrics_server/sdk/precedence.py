"""What the router tells a backend that yields (`query.routes.Host.yields`: the
`metric-definitions` backend) about the metrics it would serve: which other backend the router
gives each one to, and whether by a route or by that backend's listing.

The router (`query/`) and the backends (`backends/`) are independent tiers; both see this
module. `plugins.live` hands the router in force to each yielding backend that implements
`Yielding` (at start and after every reload); the backend asks `Precedence.winner` for its
metrics when `Precedence.generation` changed since it last asked, so the answer follows the
other backends' listings (Prometheus discovering series, a plugin's listing changing) without
anything on the request path.

Not part of the public plugin contract (`sdk.__all__`): only built-in types yield.

PURE: typing and a value type only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from custom_metrics_server.domain import GroupResource

__all__ = ["Precedence", "Winner", "Yielding"]


@dataclass(frozen=True, slots=True)
class Winner:
    """The backend the router gives a metric to instead of the yielding one."""

    #: its name in the backends file
    backend: str
    #: the route that decides, as `where: conditions` (`backends[1].routes[0]: api=external
    #: metric=x*`); None when the backend's listing claims the metric
    route: str | None = None

    def __str__(self) -> str:
        how = f"its route {self.route}" if self.route is not None else "it lists the metric"
        return f"backend {self.backend} ({how})"


class Precedence(Protocol):
    """Who wins a metric over the yielding backends (the router in force implements it)."""

    @property
    def platform_generation(self) -> int:
        """Changes whenever an answer of `winner` may have changed (a listing of a backend
        that does not yield changed); equal values mean equal answers."""
        ...

    def winner(self, resource: GroupResource | None, metric: str) -> Winner | None:
        """The backend that does not yield and answers `metric` (of `resource`; None: the
        external metric), or None when only a yielding backend would. No I/O: one route match
        and one dictionary lookup."""
        ...


@runtime_checkable
class Yielding(Protocol):
    """A backend that wants to know what wins over it (see the module)."""

    def yield_to(self, precedence: Precedence) -> None:
        """The router now in force; called on the event loop, before it routes anything."""
        ...
