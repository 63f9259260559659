"""The conformance kit's check that a changed listing is served: after the author's
`change_listing()` (which adds or removes something in the backend's source), what the server
routes and lists in discovery must change too, within `listing_within` seconds.

The server reads a backend's listing through its adapter and its router (`query.routing`),
which remember what they read; this check reads it the same way, so whatever keeps the server
from seeing a change (a listing changed in place where the server compares by identity, a
listing copied once at start-up and never refreshed) fails here, with which of the two it is.

Owns this one check; `kit` runs it after the others. Cost: one refresh of the router per poll
(every 50 ms) until the change shows or the time is up.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable

from custom_metrics_server.domain import MetricInfo
from custom_metrics_server.plugins.adapter import PluginBackend
from custom_metrics_server.query.routing import Host, Router
from custom_metrics_server.testing.kit_report import KitReport

__all__ = ["check_listing_change"]

NAME = "a changed listing is served"


def _served(router: Router) -> tuple[frozenset[MetricInfo], frozenset[str]]:
    router.refresh(force=True)
    return frozenset(router.custom_metrics()), frozenset(router.external_metrics())


def _listed(backend: object) -> tuple[frozenset[object], frozenset[object]]:
    """What the plugin itself lists now (by value), to tell which failure it is."""
    found: list[frozenset[object]] = []
    for method in ("list_metrics", "list_external_metrics"):
        listing = getattr(backend, method, None)
        try:
            found.append(frozenset(listing()) if callable(listing) else frozenset())
        except Exception:  # the listings check reports a broken listing
            found.append(frozenset())
    return found[0], found[1]


async def check_listing_change(
    report: KitReport,
    hosted: PluginBackend,
    backend: object,
    change: Callable[[], object],
    within: float,
) -> None:
    """Run the check of the module on the started backend `hosted` (wrapping `backend`)."""
    with report.check(NAME) as check:
        router = Router([Host(backend=hosted, gates_readiness=False)])
        before = _served(router)
        listed_before = _listed(backend)
        outcome = change()
        if inspect.isawaitable(outcome):
            await outcome
        deadline = time.monotonic() + within
        while _served(router) == before:
            if time.monotonic() > deadline:
                if _listed(backend) != listed_before:
                    check.fail(
                        "the backend's listing changed, but the server still serves the old "
                        "one: this server compares a listing by identity, so a collection "
                        "changed in place is not re-read; return a new collection when it changes"
                    )
                else:
                    check.fail(
                        f"the listing did not change within {within:g}s after change_listing() "
                        "(list what the source holds now, refreshed in the background)"
                    )
                return
            await asyncio.sleep(0.05)
