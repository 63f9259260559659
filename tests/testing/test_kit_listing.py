"""The kit's listing-change check, and the test helper that builds a factory's context."""

from __future__ import annotations

from pathlib import Path

import pytest

from custom_metrics_server import sdk
from custom_metrics_server.plugins.adapter import PluginBackend
from custom_metrics_server.query.routing import Host, Router
from custom_metrics_server.testing.context import backend_context, cluster_view
from custom_metrics_server.testing.kit import check_backend

DEPLOYMENTS = sdk.GroupResource("apps", "deployments")


class Queues:
    """External metrics `<queue>_depth`, one per queue; `grow()` adds a queue."""

    def __init__(self) -> None:
        self.names: tuple[str, ...] | list[str] = ("emails_depth",)

    def list_external_metrics(self) -> tuple[str, ...] | list[str]:
        return self.names

    def fetch_external(self, request: sdk.ExternalBackendRequest) -> list[sdk.ExternalSample]:
        return []

    def grow(self) -> None:
        self.names = (*self.names, "reports_depth")


class InPlace(Queues):
    """Lists one list object, and grows it in place."""

    def __init__(self) -> None:
        self.names = ["emails_depth"]

    def grow(self) -> None:
        assert isinstance(self.names, list)
        self.names.append("reports_depth")


class Snapshot(Queues):
    """Copies its listing once; `grow()` changes the source but never the listing."""

    def __init__(self) -> None:
        super().__init__()
        self.listed = tuple(self.names)

    def list_external_metrics(self) -> tuple[str, ...]:
        return self.listed


def _listing_check(report: object) -> sdk.Readiness:
    (check,) = [c for c in report.checks if c.name == "a changed listing is served"]  # type: ignore[attr-defined]
    return sdk.Readiness(check.ok, "; ".join(check.problems))


async def test_a_listing_that_changes_to_a_new_collection_is_served() -> None:
    plugin = Queues()
    report = await check_backend(plugin, change_listing=plugin.grow)
    assert _listing_check(report).ready


async def test_an_async_change_is_awaited() -> None:
    plugin = Queues()

    async def grow() -> None:
        plugin.grow()

    report = await check_backend(plugin, change_listing=grow)
    assert _listing_check(report).ready


async def test_a_listing_that_never_changes_fails_naming_the_time() -> None:
    plugin = Snapshot()
    report = await check_backend(
        plugin, change_listing=plugin.grow, listing_within=0.2, strict=False
    )
    state = _listing_check(report)
    assert not state.ready
    assert "did not change within 0.2s after change_listing()" in state.reason


async def _server_sees_an_in_place_change() -> bool:
    plugin = InPlace()
    hosted = PluginBackend(plugin, name="inplace")
    async with hosted:
        router = Router([Host(backend=hosted, gates_readiness=False)])
        router.refresh(force=True)
        plugin.grow()
        router.refresh(force=True)
        return "reports_depth" in router.external_metrics()


async def test_a_listing_changed_in_place_fails_exactly_when_the_server_would_not_serve_it() -> (
    None
):
    plugin = InPlace()
    report = await check_backend(
        plugin, change_listing=plugin.grow, listing_within=0.2, strict=False
    )
    state = _listing_check(report)
    served = await _server_sees_an_in_place_change()
    assert state.ready is served
    if not served:
        assert "changed in place" in state.reason


def test_a_context_for_a_factory_holds_the_test_objects(tmp_path: Path) -> None:
    context = backend_context(
        "jobs",
        objects=[
            {"resource": "deployments.apps", "namespace": "shop", "name": "web"},
            {"resource": "nodes", "name": "node-1", "labels": {"zone": "a"}},
        ],
        base_dir=tmp_path,
        timeout=2.5,
    )
    assert (context.name, context.timeout, context.base_dir) == ("jobs", 2.5, tmp_path)
    assert context.logger.name == "custom_metrics_server.backends.jobs"
    assert list(context.cluster.list_objects(DEPLOYMENTS, "shop", sdk.EVERYTHING)) == [
        ("shop", "web")
    ]
    nodes = context.cluster.list_objects(
        sdk.GroupResource("", "nodes"), None, sdk.parse_selector("zone=a")
    )
    assert list(nodes) == [("", "node-1")]
    mapping = context.cluster.mapping("deployments.apps")
    assert mapping is not None
    assert mapping.kind == "Deployment"


def test_a_context_takes_a_cluster_view_of_its_own() -> None:
    view = cluster_view([{"resource": "pods", "namespace": "default", "name": "web-0"}])
    assert backend_context(cluster=view).cluster is view


@pytest.mark.parametrize(
    ("item", "message"),
    [
        pytest.param(
            {"resource": "pods", "name": "web-0"}, "pods is namespaced", id="no-namespace"
        ),
        pytest.param({"resource": "widgets", "name": "w"}, "unknown resource", id="unknown"),
        pytest.param({"resource": "pods"}, "'name'", id="no-name"),
    ],
)
def test_a_bad_object_is_refused_naming_its_index(item: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=rf"objects\[1\]: .*{message}"):
        cluster_view([{"resource": "nodes", "name": "n"}, item])
