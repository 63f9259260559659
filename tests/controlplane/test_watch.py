"""The Reflector (list + watch) against the real kube-apiserver and etcd: pages with
limit/continue, resourceVersion order, the watch cache's bookmarks, 410 Expired after an API
server restart, and recovery from the restart itself. Each test watches ConfigMaps of a
namespace of its own, so the rest of the session's traffic only moves resourceVersions.

The fake-based twins in tests/kube/test_watcher.py keep the faults a real server does not
stage on demand: torn streams, an expired continue token between two given pages, ERROR events
with other codes, randomized faults, a server that loses its state.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kube.config import load_connection
from custom_metrics_server.kube.watcher import Reflector
from tests.controlplane.cluster import ControlPlane
from tests.kube.test_watcher import DictSink, running

pytestmark = pytest.mark.integration

Key = tuple[str, str]
#: Only this test's ConfigMaps: kube-controller-manager, when another test started it, adds
#: kube-root-ca.crt to every namespace, and the namespace has openshift-service-ca.crt.
SELECTOR = "test=watch"


@pytest.fixture
async def client(control_plane: ControlPlane) -> AsyncIterator[KubeClient]:
    """The client a reflector reads with (`KubeClient`: list pages and watch streams over the
    lean pool, what the Kubernetes backend uses), as admin."""
    kube = KubeClient(load_connection(str(control_plane.admin_kubeconfig)))
    yield kube
    await kube.aclose()


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    name = control_plane.create_namespace("wip-real-watch")
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false")


def configmaps(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/configmaps"


def server_state(plane: ControlPlane, namespace: str) -> dict[Key, int]:
    """What a fresh list of this test's ConfigMaps says: key -> resourceVersion."""
    items = plane.get_json(f"{configmaps(namespace)}?labelSelector={SELECTOR}")["items"]
    return {
        (i["metadata"]["namespace"], i["metadata"]["name"]): int(i["metadata"]["resourceVersion"])
        for i in items
    }


def create(plane: ControlPlane, namespace: str, *names: str) -> None:
    plane.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": n, "namespace": namespace, "labels": {"test": "watch"}},
            }
            for n in names
        ]
    )


async def eventually(check: Callable[[], bool], what: str, within: float = 60.0) -> None:
    """A failure limit for a broken cluster, not a speed check."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: {what}")
        await asyncio.sleep(0.05)


def reflector_for(client: Any, sink: DictSink, namespace: str, **options: Any) -> Reflector:
    settings: dict[str, Any] = {
        "path": configmaps(namespace),
        "sink": sink,
        "name": "configmaps",
        "backoff_initial": 0.05,
        "backoff_max": 0.5,
        "label_selector": SELECTOR,
    }
    settings.update(options)
    return Reflector(client, **settings)


async def test_pages_then_watch_see_every_change_in_order(
    control_plane: ControlPlane, client: Any, namespace: str
) -> None:
    plane = control_plane
    create(plane, namespace, *(f"c{i}" for i in range(7)))
    sink = DictSink()
    reflector = reflector_for(client, sink, namespace, page_size=2)
    async with running(reflector):
        await eventually(lambda: reflector.synced, "the first list")
        assert sink.state() == server_state(plane, namespace)
        # 7 objects in pages of 2, in key order.
        assert reflector.stats.pages == 4
        listed = [key[1] for call, key in sink.calls if call == "listed" and key]
        assert listed == sorted(listed)
        await asyncio.to_thread(create, plane, namespace, "added")
        await asyncio.to_thread(
            plane.kubectl, "-n", namespace, "label", "configmap", "c1", "app=web"
        )
        await asyncio.to_thread(plane.kubectl, "-n", namespace, "delete", "configmap", "c2")
        await eventually(
            lambda: sink.state() == server_state(plane, namespace), "the sink to match"
        )
    assert sink.objects[(namespace, "c1")]["metadata"]["labels"] == {"app": "web", "test": "watch"}
    assert (namespace, "c2") not in sink.objects
    assert sink.violations == []
    assert (reflector.stats.lists, reflector.stats.events) == (1, 3)
    # The last change was a delete: its version is past every object still there.
    assert int(reflector.resource_version) > max(server_state(plane, namespace).values())


async def test_bookmarks_carry_the_version_past_other_namespaces_writes(
    control_plane: ControlPlane, client: Any, namespace: str
) -> None:
    """kube-apiserver's watch cache sends a BOOKMARK two seconds before a watch's timeout when
    its version moved: here, by a write to another namespace this watch does not see."""
    plane = control_plane
    sink = DictSink()
    # random() = 0: the watch timeout is exactly 4 s, so the bookmark comes about 2 s in.
    reflector = reflector_for(client, sink, namespace, watch_timeout=4, random=lambda: 0.0)
    other = plane.create_namespace("wip-real-watch-other")
    async with running(reflector):
        await eventually(lambda: reflector.synced, "the first list")
        listed_at = int(reflector.resource_version)
        await asyncio.to_thread(create, plane, other, "elsewhere")
        written = int(
            plane.get_json(f"{configmaps(other)}/elsewhere")["metadata"]["resourceVersion"]
        )
        assert written > listed_at
        await eventually(
            lambda: reflector.stats.bookmarks >= 1 and int(reflector.resource_version) >= written,
            "a bookmark at or past the other namespace's write",
        )
    assert reflector.stats.events == 0  # the bookmark never reached the sink
    assert sink.violations == []
    plane.kubectl("delete", "namespace", other, "--wait=false")


async def test_restart_past_the_watch_version_is_410_and_relists(
    control_plane: ControlPlane, namespace: str
) -> None:
    """After a restart, kube-apiserver's new watch cache starts at etcd's current revision;
    a watch from an older version (the reflector's, with writes elsewhere after it) is an
    ERROR event with 410 Expired, answered by a relist that converges on the server's state.
    Once (not per client: a restart costs seconds)."""
    plane = control_plane
    create(plane, namespace, "a", "b")
    sink = DictSink()
    client = KubeClient(load_connection(str(plane.admin_kubeconfig)))
    reflector = reflector_for(client, sink, namespace)
    other = plane.create_namespace("wip-real-watch-other")
    async with running(reflector):
        await eventually(lambda: reflector.synced, "the first list")
        await asyncio.to_thread(create, plane, other, "moves-the-revision")
        await asyncio.to_thread(plane.restart_apiserver)
        await eventually(lambda: reflector.stats.relists >= 1, "a relist after 410")
        await asyncio.to_thread(plane.kubectl, "-n", namespace, "delete", "configmap", "a")
        await asyncio.to_thread(create, plane, namespace, "c")
        await eventually(
            lambda: sink.state() == server_state(plane, namespace), "the sink to match"
        )
    await client.aclose()
    assert sink.violations == []
    plane.kubectl("delete", "namespace", other, "--wait=false")
