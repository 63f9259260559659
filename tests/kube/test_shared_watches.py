"""The shared watch group (kube/shared_watches.py) against the fake API server (real sockets,
real client, real `Reflector`): one watch per (namespace, collection) however many subscribe,
started on the first subscription and stopped a grace period after the last release, a late
subscriber replayed the store, a relist after 410 passed on to every subscriber, a release
during the list honoured, and no subscriber of namespace `a` ever handed an object of `b`.
The real kube-apiserver twin (5 definitions, one watch): tests/controlplane/
test_metric_definitions_watches.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kube.shared_watches import Collection, Subscriptions, WatchGroup
from tests.fakes.kube_apiserver import FakeKubeApiServer, pod
from tests.kube.test_watcher import DictSink, eventually

PODS = Collection("/api/v1", "pods", "status.phase=Running")
REPLICASETS = Collection("/apis/apps/v1", "replicasets")


class Grace:
    """The group's sleep for its grace period, released by the test (backoffs sleep for real)."""

    def __init__(self) -> None:
        self.waiting: list[asyncio.Future[None]] = []

    async def __call__(self, seconds: float) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(done)
        await done

    def expire(self) -> None:
        waiting, self.waiting = self.waiting, []
        for done in waiting:
            if not done.done():
                done.set_result(None)


@pytest.fixture
def api() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as server:
        yield server


@pytest.fixture
async def client(api: FakeKubeApiServer) -> AsyncIterator[KubeClient]:
    kube = KubeClient(api.connection())
    yield kube
    await kube.aclose()


@pytest.fixture
def grace() -> Grace:
    return Grace()


@pytest.fixture
async def group(client: KubeClient, grace: Grace) -> AsyncIterator[WatchGroup]:
    made = WatchGroup(client, sleep=grace, backoff_initial=0.01, backoff_max=0.05)
    yield made
    await made.aclose()


def watches_of(api: FakeKubeApiServer, path: str) -> int:
    return api.count("watch", path)


async def test_subscribers_of_one_collection_share_one_list_and_watch(
    api: FakeKubeApiServer, group: WatchGroup
) -> None:
    api.apply_many("pods", [pod("a", f"p{i}") for i in range(3)])
    sinks = [DictSink() for _ in range(5)]
    subscriptions = [group.subscribe(PODS, "a", sink, name=f"s{i}") for i, sink in enumerate(sinks)]
    for subscription in subscriptions:
        await asyncio.wait_for(subscription.wait_synced(), 5)
    await api.wait_for_watches(1, resource="pods")
    api.add("pods", pod("a", "p3"))
    await eventually(lambda: all(len(sink.objects) == 4 for sink in sinks))
    assert api.count("list", "/api/v1/namespaces/a/pods") == 1
    assert watches_of(api, "/api/v1/namespaces/a/pods") == 1
    assert (group.watches(), group.paths()) == (1, [("/api/v1/namespaces/a/pods", 5)])
    assert all(sink.violations == [] for sink in sinks)


async def test_a_late_subscriber_is_replayed_the_store_without_a_relist(
    api: FakeKubeApiServer, group: WatchGroup
) -> None:
    kept = pod("a", "p1")
    kept["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Apply"}]
    api.apply_many("pods", [pod("a", "p0"), kept])
    first = DictSink()
    await asyncio.wait_for(group.subscribe(PODS, "a", first, name="first").wait_synced(), 5)
    await api.wait_for_watches(1, resource="pods")
    api.delete("pods", "p0", namespace="a")
    await eventually(lambda: set(first.objects) == {("a", "p1")})
    late = DictSink()
    subscription = group.subscribe(PODS, "a", late, name="late")
    assert subscription.synced  # replayed at once, from memory
    assert late.calls == [("list_started", None), ("listed", ("a", "p1")), ("list_finished", None)]
    api.add("pods", pod("a", "p2"))
    await eventually(lambda: set(late.objects) == {("a", "p1"), ("a", "p2")})
    assert api.count("list", "/api/v1/namespaces/a/pods") == 1
    assert "managedFields" not in late.objects[("a", "p1")]["metadata"]


async def test_the_watch_stops_a_grace_period_after_the_last_release_only(
    api: FakeKubeApiServer, group: WatchGroup, grace: Grace
) -> None:
    path = "/api/v1/namespaces/a/pods"
    one = group.subscribe(PODS, "a", DictSink(), name="one")
    two = group.subscribe(PODS, "a", DictSink(), name="two")
    await asyncio.wait_for(one.wait_synced(), 5)
    await api.wait_for_watches(1, resource="pods")
    one.release()
    one.release()  # idempotent
    await asyncio.sleep(0)
    assert grace.waiting == []  # a subscriber is left: no timer
    two.release()
    await eventually(lambda: len(grace.waiting) == 1)
    # A successor within the grace period (a definition edit) keeps the watch: no relist.
    successor_sink = DictSink()
    successor = group.subscribe(PODS, "a", successor_sink, name="successor")
    assert successor.synced
    grace.expire()
    await asyncio.sleep(0.05)
    assert api.active_watches("pods") == 1
    assert api.count("list", path) == 1
    assert group.watches() == 1
    # The last release, then the grace period's end: the watch stops.
    successor.release()
    await eventually(lambda: len(grace.waiting) == 1)
    assert api.active_watches("pods") == 1  # still running during the grace period
    grace.expire()
    await eventually(lambda: api.active_watches("pods") == 0 and group.watches() == 0)
    # A new subscriber starts a new list+watch.
    again = group.subscribe(PODS, "a", DictSink(), name="again")
    await asyncio.wait_for(again.wait_synced(), 5)
    assert api.count("list", path) == 2


async def test_a_relist_after_410_reaches_every_subscriber(
    api: FakeKubeApiServer, group: WatchGroup
) -> None:
    api.apply_many("pods", [pod("a", "p0"), pod("a", "p1")])
    sinks = [DictSink(), DictSink()]
    for index, sink in enumerate(sinks):
        await asyncio.wait_for(group.subscribe(PODS, "a", sink, name=f"s{index}").wait_synced(), 5)
    await api.wait_for_watches(1, resource="pods")
    api.fail_next(kind="watch", code=410, reason="Expired", message="too old", as_event=True)
    api.drop_watches("pods")
    api.delete("pods", "p0", namespace="a")  # lost with the watch: the relist must drop it
    api.add("pods", pod("a", "p2"))
    want = {("a", "p1"), ("a", "p2")}
    await eventually(lambda: all(set(sink.objects) == want for sink in sinks))
    assert api.count("list", "/api/v1/namespaces/a/pods") == 2
    assert all(sink.lists_finished == 2 and sink.violations == [] for sink in sinks)


async def test_a_subscriber_joining_during_a_list_waits_for_its_end(
    api: FakeKubeApiServer, group: WatchGroup
) -> None:
    api.apply_many("pods", [pod("a", f"p{i}") for i in range(3)])
    api.delay_next(kind="list", path="/api/v1/namespaces/a/pods", seconds=0.3)
    early, late = DictSink(), DictSink()
    first = group.subscribe(PODS, "a", early, name="early")
    await asyncio.sleep(0.05)  # the list is on its way
    second = group.subscribe(PODS, "a", late, name="late")
    assert not first.synced
    assert not second.synced
    assert first.readiness().reason.startswith("waiting for the first list")
    await asyncio.wait_for(second.wait_synced(), 5)
    for sink in (early, late):
        assert sink.lists_started == 1
        assert sink.lists_finished == 1
        assert len(sink.objects) == 3
    assert api.count("list", "/api/v1/namespaces/a/pods") == 1


async def test_a_release_during_the_list_gets_nothing_and_stops_the_watch(
    api: FakeKubeApiServer, group: WatchGroup, grace: Grace
) -> None:
    api.apply_many("pods", [pod("a", f"p{i}") for i in range(3)])
    api.delay_next(kind="list", path="/api/v1/namespaces/a/pods", seconds=0.3)
    gone, stays = DictSink(), DictSink()
    released = group.subscribe(PODS, "a", gone, name="gone")
    other = group.subscribe(REPLICASETS, "a", stays, name="stays")
    await asyncio.sleep(0.05)
    released.release()
    assert released.readiness().reason == "gone: released"
    await eventually(lambda: len(grace.waiting) == 1)
    await asyncio.wait_for(other.wait_synced(), 5)
    await eventually(lambda: api.count("list", "/api/v1/namespaces/a/pods") == 1)
    await asyncio.sleep(0.05)
    assert gone.calls == []
    grace.expire()
    await eventually(lambda: group.paths() == [("/apis/apps/v1/namespaces/a/replicasets", 1)])


async def test_subscribers_of_two_namespaces_never_see_each_others_objects(
    api: FakeKubeApiServer, group: WatchGroup
) -> None:
    api.apply_many("pods", [pod("a", "web-a"), pod("b", "web-b")])
    in_a, in_b = DictSink(), DictSink()
    for namespace, sink in (("a", in_a), ("b", in_b)):
        await asyncio.wait_for(
            group.subscribe(PODS, namespace, sink, name=namespace).wait_synced(), 5
        )
    await api.wait_for_watches(2, resource="pods")
    api.add("pods", pod("b", "web-b2"))
    api.add("pods", pod("a", "web-a2"))
    await eventually(lambda: len(in_a.objects) == 2 and len(in_b.objects) == 2)
    assert {key[0] for key in in_a.objects} == {"a"}
    assert {key[0] for key in in_b.objects} == {"b"}
    assert group.paths() == [("/api/v1/namespaces/a/pods", 1), ("/api/v1/namespaces/b/pods", 1)]


@pytest.mark.parametrize(
    "namespace", ["", "a/../b", "A", "a b", "x" * 64, "..", "a?labelSelector=x"]
)
def test_a_namespace_that_is_not_a_name_is_refused(group: WatchGroup, namespace: str) -> None:
    with pytest.raises(ValueError, match="is not a namespace name"):
        group.subscribe(PODS, namespace, DictSink(), name="bad")
    with pytest.raises(ValueError, match="is not a namespace name"):
        Subscriptions(group, namespace).add(PODS, DictSink(), name="bad")


async def test_one_subscribers_failing_sink_does_not_starve_another(
    api: FakeKubeApiServer, group: WatchGroup
) -> None:
    class Failing(DictSink):
        def event(self, type: str, obj: dict[str, object]) -> None:
            raise RuntimeError("a bug in one consumer")

    api.apply_many("pods", [pod("a", "p0")])
    healthy = DictSink()
    for name, sink in (("failing", Failing()), ("healthy", healthy)):
        await asyncio.wait_for(group.subscribe(PODS, "a", sink, name=name).wait_synced(), 5)
    await api.wait_for_watches(1, resource="pods")
    api.add("pods", pod("a", "p1"))
    await eventually(lambda: len(healthy.objects) == 2)


async def test_subscriptions_are_taken_on_entry_and_released_on_exit(
    api: FakeKubeApiServer, group: WatchGroup, grace: Grace
) -> None:
    api.apply_many("pods", [pod("a", "p0")])
    owners, replicasets = DictSink(), DictSink()
    subscriptions = Subscriptions(group, "a")
    subscriptions.add(PODS, owners, name="pods")
    subscriptions.add(REPLICASETS, replicasets, name="replicasets")
    assert subscriptions.paths == [
        ("/api/v1/namespaces/a/pods", "status.phase=Running"),
        ("/apis/apps/v1/namespaces/a/replicasets", ""),
    ]
    assert not subscriptions.readiness().ready
    assert await subscriptions.wait_synced(0.01) == "pods"  # not entered: nothing runs
    assert group.watches() == 0
    async with subscriptions:
        assert await subscriptions.wait_synced(5) is None
        assert subscriptions.synced
        assert subscriptions.readiness().ready
        assert set(owners.objects) == {("a", "p0")}
        assert group.watches() == 2
    await eventually(lambda: len(grace.waiting) == 2)
    grace.expire()
    await eventually(lambda: group.watches() == 0 and api.active_watches() == 0)


async def test_aclose_stops_every_watch_and_refuses_new_subscribers(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    group = WatchGroup(client)
    subscription = group.subscribe(PODS, "a", DictSink(), name="one")
    await asyncio.wait_for(subscription.wait_synced(), 5)
    subscription.release()  # in its grace period
    group.subscribe(REPLICASETS, "a", DictSink(), name="two")
    await group.aclose()
    assert group.watches() == 0
    await eventually(lambda: api.active_watches() == 0)
    with pytest.raises(RuntimeError, match="closed"):
        group.subscribe(PODS, "a", DictSink(), name="three")
