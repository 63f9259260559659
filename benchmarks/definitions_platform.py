"""The platform winning MetricDefinitions' names: what following the platform's listings costs
the definitions' catalog (`Catalog.follow_platform`, run by the backend's tick) and the router.

    python benchmarks/definitions_platform.py                    # 10,000 in 3,000 namespaces
    python benchmarks/definitions_platform.py --definitions 1000 --namespaces 300 --shadowed 100

In process: N schedule definitions of External metrics (each its own name) listed into the
catalog, the real router (`query.routing.Router`) over the catalog's listing (the yielding
backend) and a platform backend whose listing is a frozenset, the router handed to the catalog
through `query.precedence.RouterPrecedence` as `plugins.live` hands it. Prints the CPU time of
the list with and without the router (every definition asks it once), of a tick's
`follow_platform` when nothing moved, and of the router's refresh plus `follow_platform` when
the platform starts listing `--shadowed` of the names and when it stops.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Collection
from typing import Any, cast

from custom_metrics_server.backends.definitions.catalog import Catalog
from custom_metrics_server.backends.definitions.policy import Limits, Platform
from custom_metrics_server.backends.definitions.schedule import make_schedule
from custom_metrics_server.backends.definitions.source import SourceTools
from custom_metrics_server.domain import MetricInfo
from custom_metrics_server.query.precedence import RouterPrecedence
from custom_metrics_server.query.routes import Host
from custom_metrics_server.query.routing import Router
from custom_metrics_server.sdk.backend import MetricsBackend


class Listing:
    """A backend as the router reads it: its listings only (nothing is fetched here)."""

    def __init__(self, name: str, external: Collection[str] = frozenset()) -> None:
        self.name = name
        self.external: Collection[str] = frozenset(external)
        self.catalog: Catalog | None = None

    def list_metrics(self) -> Collection[MetricInfo]:
        return self.catalog.listing()[0] if self.catalog is not None else frozenset()

    def list_external_metrics(self) -> Collection[str]:
        return self.catalog.listing()[1] if self.catalog is not None else self.external


def definition(index: int, namespaces: int) -> dict[str, Any]:
    return {
        "apiVersion": "metrics.custom-metrics-server.io/v1alpha1",
        "kind": "MetricDefinition",
        "metadata": {
            "name": f"d{index}",
            "namespace": f"ns{index % namespaces}",
            "uid": f"uid-{index}",
            "generation": 1,
            "resourceVersion": str(index + 1),
            "creationTimestamp": "2026-12-01T10:00:00Z",
        },
        "spec": {
            "metricName": f"m{index}",
            "servedAs": {"type": "External"},
            "source": {"type": "Schedule", "schedule": {"windows": [], "defaultValue": 1}},
        },
    }


def catalog(definitions: int, namespaces: int, router: bool) -> tuple[Catalog, float, Any]:
    """A full catalog, the CPU seconds of its list, and the (router, platform, precedence)."""
    made = Catalog(
        Platform(limits=Limits(definitions=definitions)),
        {"Schedule": make_schedule},
        SourceTools(client=None, external_value=lambda namespace, metric, now: None),
    )
    teams = Listing("metric-definitions")
    teams.catalog = made
    platform = Listing("prometheus")
    hosts = [
        Host(backend=cast("MetricsBackend", teams), yields=True, dynamic=True),
        Host(backend=cast("MetricsBackend", platform), dynamic=True),
    ]
    routed = Router(hosts)
    if router:
        made.precedence = RouterPrecedence(routed)
    objects = [definition(index, namespaces) for index in range(definitions)]
    cpu = time.process_time()
    made.list_started()
    for obj in objects:
        made.listed(obj)
    made.list_finished()
    spent = time.process_time() - cpu
    routed.refresh(force=True)
    made.follow_platform()
    return made, spent, (routed, platform)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--definitions", type=int, default=10_000)
    parser.add_argument("--namespaces", type=int, default=3_000)
    parser.add_argument("--shadowed", type=int, default=1_000)
    args = parser.parse_args()
    n = args.definitions
    _, without, _ = catalog(n, args.namespaces, router=False)
    made, with_router, (router, platform) = catalog(n, args.namespaces, router=True)
    print(f"{n} definitions in {args.namespaces} namespaces")
    print(f"list without the router: {without * 1e3:.0f} ms CPU ({without / n * 1e6:.1f} us each)")
    print(
        f"list with the router:    {with_router * 1e3:.0f} ms CPU ({with_router / n * 1e6:.1f} us each)"
    )
    rounds = 10_000
    cpu = time.process_time()
    for _ in range(rounds):
        made.follow_platform()
    idle = (time.process_time() - cpu) / rounds
    print(f"follow_platform, nothing moved: {idle * 1e9:.0f} ns CPU a tick")
    for shadowed in (1, args.shadowed):
        names = frozenset(f"m{index}" for index in range(shadowed))
        for what, listed in ((f"lists {shadowed}", names), (f"drops {shadowed}", frozenset())):
            platform.external = listed
            cpu = time.process_time()
            router.refresh(force=True)
            made.follow_platform()
            router.refresh(force=True)  # the catalog's own listing changed: read by the router
            made.follow_platform()  # the generation did not move: O(1)
            spent = time.process_time() - cpu
            serving = len(made.serving)
            print(
                f"platform {what} of the names: {spent * 1e3:.1f} ms CPU "
                f"(refresh + follow_platform, twice); {serving} serving"
            )
            assert serving == n - len(listed)


if __name__ == "__main__":
    main()
