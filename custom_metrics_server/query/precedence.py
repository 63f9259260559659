"""The router's answer to a backend that yields (`sdk.precedence`): which backend that does not
yield it gives a metric to, by a route or by a listing claim.

Owns only that reading of the router's decisions; routing itself is `query.routing`'s. Cost:
`winner` is one router decision over the listings as last read (memoised there; a first one is
one route match and one claim lookup; never a refresh of the listings); a yielding backend
asks once per metric when `platform_generation` changed (a listing of a backend that does not
yield changed), and per definition event in that definition's namespace; never per request.

PURE: no I/O.
"""

from __future__ import annotations

from custom_metrics_server.domain import GroupResource
from custom_metrics_server.query.routing import Router
from custom_metrics_server.sdk.precedence import Winner

__all__ = ["RouterPrecedence"]


class RouterPrecedence:
    """`sdk.precedence.Precedence` over one router (see the module)."""

    __slots__ = ("router",)

    def __init__(self, router: Router) -> None:
        self.router = router

    @property
    def platform_generation(self) -> int:
        """The router's count of listing changes of the backends that do not yield."""
        return self.router.platform_generation

    def winner(self, resource: GroupResource | None, metric: str) -> Winner | None:
        """The backend that does not yield and answers `metric` (of `resource`; None: the
        external metric), or None (nobody, or a yielding backend, answers it)."""
        router = self.router
        # Never a refresh on a miss: the listings as last read are the answer, and a refresh
        # per question would cost O(listed metrics) each while definitions are being listed.
        if resource is None:
            decision = router.decide_external(metric, refresh=False)
        else:
            decision = router.decide_custom(resource, metric, refresh=False)
        if decision is None or decision.host.yields:
            return None
        route = decision.route
        if route is None:
            return Winner(decision.host.name)
        return Winner(decision.host.name, f"{route.where}: {route}" if route.where else str(route))
