"""The Reflector against the fake API server (real sockets, real client) and scripted streams.

Real twins against kube-apiserver and etcd (pages, watch, bookmarks, 410 after a restart):
tests/controlplane/test_watch.py. The faults staged here on demand stay here: torn streams,
expired continue tokens between given pages, ERROR events, a server that loses its state."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest

from custom_metrics_server.kube.client import GoneError, KubeApiError, KubeClient
from custom_metrics_server.kube.watcher import FEED_CHUNK, Reflector
from tests.fakes.kube_apiserver import FakeKubeApiServer, node, pod, status

Key = tuple[str, str]
PODS = "/api/v1/pods"


def key_of(obj: Mapping[str, Any]) -> Key:
    metadata = obj["metadata"]
    return metadata.get("namespace", ""), metadata["name"]


def rv_of(obj: Mapping[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


class DictSink:
    """A strict store: records protocol violations (duplicates, misses, replays) as it goes."""

    def __init__(self, *, on_listed: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.violations: list[str] = []
        self.calls: list[tuple[str, Key | None]] = []
        self.lists_started = 0
        self.lists_finished = 0
        self._seen: set[Key] | None = None
        self._on_listed = on_listed

    def list_started(self) -> None:
        self.lists_started += 1
        self._seen = set()
        self.calls.append(("list_started", None))

    def listed(self, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        if self._seen is None:
            self.violations.append(f"listed {key} outside a list")
            return
        if key in self._seen:
            self.violations.append(f"listed {key} twice in one list")
        previous = self.objects.get(key)
        if previous is not None and rv_of(previous) > rv_of(obj):
            self.violations.append(f"list went back in time for {key}")
        self._seen.add(key)
        self.objects[key] = obj
        self.calls.append(("listed", key))
        if self._on_listed is not None:
            self._on_listed(obj)

    def list_finished(self) -> None:
        assert self._seen is not None
        for key in set(self.objects) - self._seen:
            del self.objects[key]
        self._seen = None
        self.lists_finished += 1
        self.calls.append(("list_finished", None))

    def event(self, type: str, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        previous = self.objects.get(key)
        if type == "ADDED" and previous is not None:
            self.violations.append(f"duplicate ADDED for {key}")
        if type in ("MODIFIED", "DELETED") and previous is None:
            self.violations.append(f"{type} for unknown {key} (a missed ADDED)")
        if previous is not None and rv_of(previous) >= rv_of(obj):
            self.violations.append(f"replayed {type} for {key} at {rv_of(obj)}")
        if type == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        self.calls.append((type, key))

    def state(self) -> dict[Key, int]:
        return {key: rv_of(obj) for key, obj in self.objects.items()}


def server_state(api: FakeKubeApiServer, resource: str = "pods") -> dict[Key, int]:
    return {key: rv_of(obj) for key, obj in api.objects(resource).items()}


async def eventually(
    check: Callable[[], bool], *, within: float = 5.0, explain: Callable[[], str] | None = None
) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            detail = explain() if explain is not None else ""
            raise AssertionError(f"not reached within {within}s {detail}")
        await asyncio.sleep(0.005)


def explain_difference(sink: DictSink, api: FakeKubeApiServer, reflector: Reflector) -> str:
    mine, theirs = sink.state(), server_state(api)
    differing = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    return (
        f"sink vs server: {[(k, mine.get(k), theirs.get(k)) for k in differing]}; "
        f"reflector at {reflector.resource_version} {reflector.stats}, "
        f"last error {reflector.last_error!r}; server at {api.resource_version}, "
        f"compacted {api.compacted_resource_version}, {api.active_watches()} watches"
    )


@contextlib.asynccontextmanager
async def running(reflector: Reflector) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(reflector.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
def api() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as server:
        yield server


@pytest.fixture
async def client(api: FakeKubeApiServer) -> AsyncIterator[KubeClient]:
    """The client a reflector reads with (`KubeClient`, what the Kubernetes backend uses)."""
    kube = KubeClient(api.connection())
    yield kube
    await kube.aclose()


@pytest.fixture
async def kube(api: FakeKubeApiServer) -> AsyncIterator[KubeClient]:
    client = KubeClient(api.connection())
    yield client
    await client.aclose()


def reflector_for(client: Any, sink: Any, **options: Any) -> Reflector:
    settings: dict[str, Any] = {
        "path": PODS,
        "sink": sink,
        "name": "pods",
        "backoff_initial": 0.01,
        "backoff_max": 0.05,
    }
    settings.update(options)
    return Reflector(client, **settings)


def add_pods(api: FakeKubeApiServer, count: int, *, namespace: str = "default") -> None:
    api.apply_many("pods", [pod(namespace, f"p{i:03d}") for i in range(count)])


# ---------------------------------------------------------------------- list and watch


async def test_list_then_watch_applies_adds_updates_and_deletes(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    add_pods(api, 3)
    sink = DictSink()
    reflector = reflector_for(client, sink)
    async with running(reflector):
        await eventually(lambda: reflector.synced)
        assert server_state(api) == sink.state()
        await api.wait_for_watches(1)
        api.add("pods", pod("kube-system", "dns"))
        changed = pod("default", "p001", labels={"app": "web"})
        api.update("pods", changed)
        api.delete("pods", "p002", namespace="default")
        await eventually(lambda: sink.state() == server_state(api))
    assert sink.objects[("default", "p001")]["metadata"]["labels"] == {"app": "web"}
    assert ("kube-system", "dns") in sink.objects
    assert ("default", "p002") not in sink.objects
    assert sink.violations == []
    assert (reflector.stats.lists, reflector.stats.events) == (1, 3)
    assert str(api.resource_version) == reflector.resource_version


async def test_paginated_list_delivers_every_object_once_in_key_order(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    add_pods(api, 23, namespace="b")
    add_pods(api, 2, namespace="a")
    sink = DictSink()
    reflector = reflector_for(client, sink, page_size=4)
    async with running(reflector):
        await eventually(lambda: reflector.synced)
    listed = [key for call, key in sink.calls if call == "listed"]
    assert sorted(server_state(api)) == listed
    assert 7 == api.count("list", PODS) == reflector.stats.pages
    assert all(r.params.get("limit") == "4" for r in api.requests if r.kind == "list")
    assert sink.violations == []


async def test_list_and_watch_use_one_snapshot_while_objects_change(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    """Objects changed between pages show up once, through the watch, never twice."""
    add_pods(api, 12)
    churn = iter(range(100))

    def change_during_list(obj: dict[str, Any]) -> None:
        i = next(churn)
        if i == 1:
            api.delete("pods", "p010", namespace="default")
            api.add("pods", pod("default", "p005x"))
            api.update("pods", pod("default", "p011", phase="Succeeded"))

    sink = DictSink(on_listed=change_during_list)
    reflector = reflector_for(client, sink, page_size=3)
    async with running(reflector):
        await eventually(lambda: sink.state() == server_state(api))
    assert sink.violations == []
    assert reflector.stats.lists == 1
    assert ("default", "p010") not in sink.objects


async def test_expired_continue_token_falls_back_to_one_full_list(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    add_pods(api, 20)
    expired = False

    def expire_after_first_page(obj: dict[str, Any]) -> None:
        nonlocal expired
        if not expired:
            expired = True
            api.delete("pods", "p000", namespace="default")  # listed on page 1, then deleted
            api.expire_continue_tokens()

    sink = DictSink(on_listed=expire_after_first_page)
    reflector = reflector_for(client, sink, page_size=5)
    async with running(reflector):
        await eventually(lambda: reflector.synced)
        assert sink.state() == server_state(api)
    lists = [r.params for r in api.requests if r.kind == "list"]
    assert [(p.get("limit"), "continue" in p) for p in lists] == [
        ("5", False),
        ("5", True),
        (None, False),
    ]
    assert ("default", "p000") not in sink.objects
    assert (sink.lists_started, sink.lists_finished, reflector.stats.lists) == (2, 1, 1)
    assert sink.violations == []


async def test_list_and_watch_send_the_selectors(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    api.add("pods", pod("default", "web", labels={"app": "web"}, node_name="n1"))
    api.add("pods", pod("default", "db", labels={"app": "db"}, node_name="n1"))
    sink = DictSink()
    reflector = reflector_for(
        client, sink, label_selector="app=web", field_selector="spec.nodeName=n1"
    )
    async with running(reflector):
        await eventually(lambda: reflector.synced)
        assert {("default", "web")} == set(sink.objects)
        await api.wait_for_watches(1)
        api.update("pods", pod("default", "web", labels={"app": "other"}, node_name="n1"))
        await eventually(lambda: not sink.objects)
    assert all(
        r.params.get("labelSelector") == "app=web"
        and r.params.get("fieldSelector") == "spec.nodeName=n1"
        for r in api.requests
        if r.kind in ("list", "watch")
    )
    assert sink.calls[-1] == ("DELETED", ("default", "web"))


# ---------------------------------------------------------------------- watch endings


async def test_clean_watch_end_rewatches_from_the_last_resource_version(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    api.max_watch_seconds = 0.2
    add_pods(api, 2)
    sink = DictSink()
    reflector = reflector_for(client, sink)
    async with running(reflector):
        for i in range(3):
            await eventually(lambda: api.count("watch") >= 1 + len(sink.objects) - 2)
            api.add("pods", pod("default", f"new-{i}"))
        await eventually(lambda: api.count("watch") >= 4)
        await eventually(lambda: sink.state() == server_state(api))
    watch_versions = [int(r.params["resourceVersion"]) for r in api.requests if r.kind == "watch"]
    assert watch_versions == sorted(watch_versions)
    assert all(r.params["allowWatchBookmarks"] == "true" for r in api.requests if r.kind == "watch")
    assert 1 == api.count("list") == reflector.stats.lists
    assert reflector.stats.errors == 0
    assert sink.violations == []


@pytest.mark.parametrize(
    ("bookmarks", "lists"),
    [
        pytest.param(True, 1, id="bookmark-before-timeout-moves-the-version-no-relist"),
        pytest.param(False, 2, id="without-bookmarks-the-old-version-is-gone-relist"),
    ],
)
async def test_bookmarks_keep_a_quiet_watch_resumable_after_compaction(
    api: FakeKubeApiServer, client: KubeClient, bookmarks: bool, lists: int
) -> None:
    api.bookmark_before_timeout = bookmarks
    add_pods(api, 2)
    sink = DictSink()
    reflector = reflector_for(client, sink)
    async with running(reflector):
        await eventually(lambda: reflector.synced)
        await api.wait_for_watches(1)
        pods_version = reflector.resource_version
        api.apply_many("nodes", [node(f"n{i}") for i in range(5)])  # other kinds move the RV
        api.compact()
        api.end_watches()  # as timeoutSeconds does
        await eventually(
            lambda: (
                reflector.stats.lists == lists
                and api.count("watch") == lists + 1
                and api.active_watches() == 1
            )
        )
    assert lists == api.count("list")
    if bookmarks:
        assert reflector.stats.bookmarks == 1
        assert int(reflector.resource_version) == api.resource_version > int(pods_version)
    assert sink.state() == server_state(api)


async def test_periodic_bookmarks_are_not_passed_to_the_sink(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    api.bookmark_interval = 0.05
    add_pods(api, 1)
    sink = DictSink()
    reflector = reflector_for(client, sink)
    async with running(reflector):
        await eventually(lambda: reflector.stats.bookmarks >= 3)
    assert (sink.calls) == [
        ("list_started", None),
        ("listed", ("default", "p000")),
        ("list_finished", None),
    ]


async def test_dropped_watch_resumes_from_the_last_version_without_relisting(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    add_pods(api, 3)
    sink = DictSink()
    reflector = reflector_for(client, sink)
    async with running(reflector):
        await eventually(lambda: reflector.synced)
        await api.wait_for_watches(1)
        api.add("pods", pod("default", "before-drop"))
        await eventually(lambda: ("default", "before-drop") in sink.objects)
        assert api.drop_watches() == 1
        api.add("pods", pod("default", "after-drop"))
        api.delete("pods", "p000", namespace="default")
        await eventually(lambda: sink.state() == server_state(api))
    assert api.count("list") == 1
    assert reflector.stats.errors >= 1
    assert sink.violations == []


@pytest.mark.parametrize("gone_as", ["event", "http"])
async def test_expired_version_relists_and_removes_what_was_deleted_meanwhile(
    api: FakeKubeApiServer, client: KubeClient, gone_as: Any
) -> None:
    api.watch_gone_as = gone_as
    add_pods(api, 5)
    sink = DictSink()
    reflector = reflector_for(client, sink)
    async with running(reflector):
        await eventually(lambda: reflector.synced)
        await api.wait_for_watches(1)
        api.stop()
        api.delete("pods", "p001", namespace="default")
        api.add("pods", pod("default", "while-down"))
        api.compact()
        api.start()
        await eventually(lambda: reflector.stats.relists == 1 and reflector.stats.lists == 2)
        await eventually(lambda: sink.state() == server_state(api))
    assert ("default", "p001") not in sink.objects
    assert sink.lists_finished == 2
    assert sink.violations == []


@pytest.mark.parametrize(
    "as_event",
    [pytest.param(True, id="error-event-in-stream"), pytest.param(False, id="http-410-status")],
)
async def test_gone_relists_at_once_without_backoff(
    api: FakeKubeApiServer, client: KubeClient, as_event: bool
) -> None:
    sleeps: list[float] = []

    async def sleep(delay: float) -> None:
        sleeps.append(delay)
        await asyncio.sleep(0)

    add_pods(api, 2)
    api.fail_next(kind="watch", code=410, reason="Expired", message="too old", as_event=as_event)
    sink = DictSink()
    reflector = reflector_for(client, sink, sleep=sleep)
    async with running(reflector):
        await eventually(lambda: reflector.stats.lists == 2 and api.active_watches() == 1)
    assert (reflector.stats.relists, reflector.stats.errors, sleeps) == (1, 0, [])


async def test_error_event_with_another_code_backs_off_and_rewatches_without_relisting(
    api: FakeKubeApiServer, client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    add_pods(api, 2)
    api.fail_next(kind="watch", code=500, reason="InternalError", message="boom", as_event=True)
    sink = DictSink()
    reflector = reflector_for(client, sink)
    with caplog.at_level(logging.WARNING, logger="custom_metrics_server.kube.watcher"):
        async with running(reflector):
            await eventually(lambda: api.count("watch") == 2 and api.active_watches() == 1)
    assert (reflector.stats.lists, reflector.stats.errors, reflector.stats.relists) == (1, 1, 0)
    [record] = caplog.records
    assert "boom" in record.getMessage()
    assert "retrying in" in record.getMessage()


# ---------------------------------------------------------------------- server restarts


async def test_server_restart_with_state_kept_resumes_the_watch(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    add_pods(api, 4)
    sink = DictSink()
    reflector = reflector_for(client, sink)
    async with running(reflector):
        await eventually(lambda: reflector.synced)
        await api.wait_for_watches(1)
        api.stop()
        api.add("pods", pod("default", "created-while-down"))
        api.delete("pods", "p003", namespace="default")
        await asyncio.sleep(0.05)
        api.start()
        await eventually(lambda: sink.state() == server_state(api))
    assert reflector.stats.lists == 1
    assert sink.violations == []


async def test_server_restart_that_lost_its_state_relists_to_an_empty_store(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    add_pods(api, 4)
    sink = DictSink()
    reflector = reflector_for(client, sink)
    async with running(reflector):
        await eventually(lambda: reflector.synced)
        await api.wait_for_watches(1)
        api.restart(keep_state=False)
        api.add("pods", pod("default", "fresh"))
        await eventually(lambda: sink.state() == server_state(api))
    assert {("default", "fresh")} == set(sink.objects)
    assert (reflector.stats.lists, reflector.stats.relists) == (2, 1)


# ---------------------------------------------------------------------- backoff and readiness


async def _collect_backoff(
    api: FakeKubeApiServer, client: KubeClient, rand: Callable[[], float], count: int
) -> list[float]:
    api.stop()  # connection refused from now on
    delays: list[float] = []

    async def sleep(delay: float) -> None:
        delays.append(delay)
        await asyncio.sleep(0)

    reflector = Reflector(client, path=PODS, sink=DictSink(), name="pods", sleep=sleep, random=rand)
    async with running(reflector):
        await eventually(lambda: len(delays) >= count)
    return delays[:count]


async def test_backoff_doubles_up_to_the_cap(api: FakeKubeApiServer, client: KubeClient) -> None:
    delays = await _collect_backoff(api, client, lambda: 1.0, 9)
    assert pytest.approx(delays) == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0]


async def test_backoff_has_full_jitter(api: FakeKubeApiServer, client: KubeClient) -> None:
    rng = random.Random(42)
    delays = await _collect_backoff(api, client, rng.random, 8)
    ceilings = [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]
    expected = random.Random(42)
    assert [c * expected.random() for c in ceilings] == pytest.approx(delays)
    assert len(set(delays)) == len(delays)
    assert all(0 <= d <= c for d, c in zip(delays, ceilings, strict=True))


async def test_backoff_starts_over_after_progress(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    delays: list[float] = []

    async def sleep(delay: float) -> None:
        delays.append(delay)
        await asyncio.sleep(0.01)

    api.fail_next(kind="list", count=3)
    api.fail_next(kind="watch", count=2)
    reflector = reflector_for(
        client, DictSink(), sleep=sleep, random=lambda: 1.0, backoff_initial=1.0, backoff_max=100.0
    )
    async with running(reflector):
        await eventually(lambda: len(delays) == 5 and api.active_watches() == 1)
    assert delays == [1.0, 2.0, 4.0, 1.0, 2.0]


async def test_repeated_failures_do_not_flood_the_log(
    api: FakeKubeApiServer, client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="custom_metrics_server.kube.watcher"):
        delays = await _collect_backoff(api, client, lambda: 0.0, 25)
    assert len(delays) == 25
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    numbers = [int(str(r.args[-1])) for r in warnings if isinstance(r.args, tuple)]
    assert numbers[:3] == [1, 10, 20]  # the first failure, then one line per ten repeats
    assert all(n % 10 == 0 for n in numbers[1:])


async def test_readiness_waits_for_the_first_list_and_reports_the_last_error(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    gate = asyncio.Event()

    async def sleep(delay: float) -> None:
        await gate.wait()

    add_pods(api, 1)
    api.fail_next(kind="list", code=503, reason="ServiceUnavailable", message="etcd is sad")
    reflector = reflector_for(client, DictSink(), sleep=sleep)
    before = reflector.readiness()
    assert (before.ready, before.reason) == (False, "waiting for the first list of /api/v1/pods")
    async with running(reflector):
        await eventually(lambda: reflector.stats.errors == 1)
        failing = reflector.readiness()
        assert not failing.ready
        assert "503 ServiceUnavailable: etcd is sad" in failing.reason
        gate.set()
        await eventually(lambda: reflector.readiness().ready)
        api.stop()
        await eventually(lambda: reflector.stats.errors >= 2)
        assert reflector.readiness().ready  # synced once: stays ready while reconnecting
    assert reflector.last_error is not None


# ---------------------------------------------------------------------- sink failures


async def test_sink_exceptions_are_counted_logged_and_skipped(
    api: FakeKubeApiServer, client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    class Fragile(DictSink):
        def event(self, type: str, obj: dict[str, Any]) -> None:
            if obj["metadata"]["name"].startswith("bad"):
                raise ValueError("cannot store this one")
            super().event(type, obj)

    sink = Fragile()
    reflector = reflector_for(client, sink)
    with caplog.at_level(logging.ERROR, logger="custom_metrics_server.kube.watcher"):
        async with running(reflector):
            await api.wait_for_watches(1)
            api.add("pods", pod("default", "bad-1"))
            api.add("pods", pod("default", "bad-2"))
            api.add("pods", pod("default", "good"))
            await eventually(lambda: ("default", "good") in sink.objects)
    assert (
        reflector.stats.sink_errors,
        reflector.stats.events,
        reflector.stats.errors,
    ) == (2, 3, 0)
    assert len(caplog.records) == 1  # rate-limited


# ---------------------------------------------------------------------- randomized


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_no_duplicates_or_missed_objects_under_random_changes_and_faults(
    api: FakeKubeApiServer, client: KubeClient, seed: int
) -> None:
    """Random adds, updates and deletes interleaved with drops, clean ends, bookmarks,
    compactions (410s), expired continue tokens and restarts: the sink ends equal to the
    server and never sees a duplicate ADDED, an event for an unknown object or a replay."""
    rng = random.Random(seed)
    api.max_watch_seconds = 0.3
    api.bookmark_interval = 0.1
    names = [f"p{i:02d}" for i in range(40)]
    add_pods(api, 10)
    sink = DictSink()
    reflector = reflector_for(client, sink, page_size=7, random=rng.random)
    deadline = time.monotonic() + 3.0
    async with running(reflector):
        await eventually(lambda: reflector.synced)
        while time.monotonic() < deadline:
            roll = rng.random()
            name = rng.choice(names)
            existing = api.get("pods", name, namespace="default")
            if roll < 0.75:
                if existing is None:
                    api.add("pods", pod("default", name))
                elif rng.random() < 0.3:
                    api.delete("pods", name, namespace="default")
                else:
                    labels = {"n": str(rng.randrange(1000))}
                    api.update("pods", pod("default", name, labels=labels))
            elif roll < 0.80:
                api.drop_watches()
            elif roll < 0.84:
                api.end_watches()
            elif roll < 0.87:
                api.send_bookmarks()
            elif roll < 0.90:
                api.apply("nodes", node(f"n{rng.randrange(5)}"))
                api.compact()
            elif roll < 0.92:
                api.expire_continue_tokens()
            elif roll < 0.93:
                api.restart(keep_state=rng.random() < 0.8)
            await asyncio.sleep(rng.random() * 0.01)
        await eventually(
            lambda: sink.state() == server_state(api),
            explain=lambda: explain_difference(sink, api, reflector),
        )
    assert sink.violations == []
    stats = reflector.stats
    assert stats.lists >= 1
    assert stats.events > 0


# ---------------------------------------------------------------------- scripted streams


class ScriptedClient:
    """A `ListWatchClient` playing fixed list pages and watch streams, then blocking."""

    def __init__(
        self,
        pages: Sequence[dict[str, Any] | Exception],
        watches: Sequence[Sequence[dict[str, Any]] | Exception],
    ) -> None:
        self.pages = list(pages)
        self.watches = list(watches)
        self.list_params: list[Mapping[str, str]] = []
        self.watch_params: list[Mapping[str, str]] = []
        self.exhausted = asyncio.Event()

    async def get_json(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        self.list_params.append(dict(params or {}))
        if not self.pages:
            self.exhausted.set()
            await asyncio.Event().wait()
        page = self.pages.pop(0)
        if isinstance(page, Exception):
            raise page
        return page

    async def watch(
        self, path: str, params: Mapping[str, str], *, read_timeout: float
    ) -> AsyncIterator[dict[str, Any]]:
        self.watch_params.append(dict(params))
        if not self.watches:
            self.exhausted.set()
            await asyncio.Event().wait()
        script = self.watches.pop(0)
        if isinstance(script, Exception):
            raise script
        for event in script:
            yield event


def a_list(rv: int, *names: str, token: str = "") -> dict[str, Any]:
    metadata: dict[str, Any] = {"resourceVersion": str(rv)}
    if token:
        metadata["continue"] = token
    return {"metadata": metadata, "items": [a_pod(n, rv) for n in names]}


def a_pod(name: str, rv: int) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": str(rv)}}


def ev(kind: str, name: str, rv: int) -> dict[str, Any]:
    return {"type": kind, "object": a_pod(name, rv)}


BOOKMARK_ONLY_MOVES_THE_VERSION = [
    {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "50"}}}
]
UNKNOWN_EVENT_TYPES_ARE_IGNORED = [
    {"type": "SOMETHING_NEW", "object": a_pod("x", 60)},
    ev("ADDED", "b", 61),
]
ERROR_410_IN_STREAM = [
    ev("ADDED", "b", 11),
    {"type": "ERROR", "object": status(410, "Expired", "too old resource version: 10 (11)")},
]
ERROR_TOO_LARGE_VERSION = [
    {
        "type": "ERROR",
        "object": status(504, "Timeout", "Too large resource version: 99, current: 20"),
    }
]
ERROR_500_IN_STREAM = [
    {"type": "ERROR", "object": status(500, "InternalError", "etcd leader lost")}
]
MALFORMED_EVENT = [{"type": "ADDED"}]


async def play(client: ScriptedClient, sink: DictSink) -> Reflector:
    async def no_sleep(delay: float) -> None:
        await asyncio.sleep(0)

    reflector = reflector_for(client, sink, sleep=no_sleep, clock=iter(range(0, 10**6, 5)).__next__)
    async with running(reflector):
        await asyncio.wait_for(client.exhausted.wait(), 5)
    return reflector


@pytest.mark.parametrize(
    ("script", "expected_names", "stats"),
    [
        pytest.param(
            [BOOKMARK_ONLY_MOVES_THE_VERSION], {"a"}, {"bookmarks": 1, "events": 0}, id="bookmark"
        ),
        pytest.param(
            [UNKNOWN_EVENT_TYPES_ARE_IGNORED], {"a", "b"}, {"events": 1}, id="unknown-type"
        ),
        pytest.param(
            [ERROR_410_IN_STREAM], {"a", "b"}, {"relists": 1, "lists": 2, "errors": 0}, id="410"
        ),
        pytest.param(
            [ERROR_TOO_LARGE_VERSION], {"a", "b"}, {"relists": 1, "lists": 2}, id="too-large"
        ),
        pytest.param(
            [ERROR_500_IN_STREAM], {"a"}, {"errors": 1, "lists": 1, "relists": 0}, id="500"
        ),
        pytest.param([MALFORMED_EVENT], {"a"}, {"errors": 1, "lists": 1}, id="malformed"),
    ],
)
async def test_stream_table(
    script: list[list[dict[str, Any]]], expected_names: set[str], stats: dict[str, int]
) -> None:
    client = ScriptedClient([a_list(10, "a"), a_list(20, "a", "b")], script)
    sink = DictSink()
    reflector = await play(client, sink)
    assert expected_names == {name for _, name in sink.objects}
    assert stats == {k: getattr(reflector.stats, k) for k in stats}
    assert sink.violations == []


async def test_bookmark_version_is_where_the_next_watch_starts() -> None:
    client = ScriptedClient([a_list(10, "a")], [BOOKMARK_ONLY_MOVES_THE_VERSION, []])
    await play(client, DictSink())
    assert [p["resourceVersion"] for p in client.watch_params] == ["10", "50", "50"]
    assert {"watch", "resourceVersion", "allowWatchBookmarks", "timeoutSeconds"} == set(
        client.watch_params[0]
    )


async def test_watch_timeout_is_jittered_between_one_and_two_times_the_setting() -> None:
    values = iter([0.0, 0.999, 0.5])
    client = ScriptedClient([a_list(10, "a")], [[ev("ADDED", "b", 11)], [ev("ADDED", "c", 12)]])
    reflector = Reflector(
        client,
        path=PODS,
        sink=DictSink(),
        name="pods",
        watch_timeout=300.0,
        random=lambda: next(values),
    )
    async with running(reflector):
        await asyncio.wait_for(client.exhausted.wait(), 5)
    assert [p["timeoutSeconds"] for p in client.watch_params] == ["300", "599", "450"]


async def test_a_very_short_empty_watch_is_an_error() -> None:
    delays: list[float] = []

    async def sleep(delay: float) -> None:
        delays.append(delay)

    client = ScriptedClient([a_list(10, "a")], [[], []])
    reflector = reflector_for(client, DictSink(), sleep=sleep, random=lambda: 1.0)
    async with running(reflector):
        await asyncio.wait_for(client.exhausted.wait(), 5)
    assert (reflector.stats.errors, delays) == (2, [0.01, 0.02])
    assert "very short watch" in (reflector.last_error or "")


async def test_two_gone_answers_in_a_row_back_off_before_the_second_relist() -> None:
    delays: list[float] = []

    async def sleep(delay: float) -> None:
        delays.append(delay)

    gone = GoneError(410, "Expired", "too old")
    client = ScriptedClient([a_list(10, "a"), a_list(11, "a"), a_list(12, "a")], [gone, gone, []])
    reflector = reflector_for(
        client, DictSink(), sleep=sleep, random=lambda: 1.0, clock=iter(range(0, 10**6, 5)).__next__
    )
    async with running(reflector):
        await asyncio.wait_for(client.exhausted.wait(), 5)
    assert (reflector.stats.lists, reflector.stats.relists, delays) == (3, 2, [0.01])


async def test_a_failed_list_is_retried_from_the_start_with_a_new_list_started() -> None:
    cut = KubeApiError(0, "", "connection reset")
    pages: list[dict[str, Any] | Exception] = [
        a_list(10, "a", "b", token="t1"),
        cut,
        a_list(12, "b", "c", token="t2"),
        a_list(12, "d"),
    ]
    client = ScriptedClient(pages, [])
    sink = DictSink()
    reflector = await play(client, sink)
    assert {"b", "c", "d"} == {name for _, name in sink.objects}
    assert (sink.lists_started, sink.lists_finished) == (2, 1)
    assert [p.get("continue", "") for p in client.list_params[:4]] == ["", "t1", "", "t2"]
    assert reflector.resource_version == "12"


# ---------------------------------------------------------------------- the fake's own wire details
# Other suites (the Kubernetes backend's) rely on these behaviours of tests/fakes/kube_apiserver.


async def test_fake_serves_node_proxy_bodies_and_upstream_errors(
    api: FakeKubeApiServer, kube: KubeClient
) -> None:
    client = kube
    body = "# TYPE node_cpu_usage_seconds_total counter\nnode_cpu_usage_seconds_total 12.5 1700000000000\n"
    api.set_node_proxy("n1", body)
    assert await client.get_bytes("/api/v1/nodes/n1/proxy/metrics/resource") == body.encode()
    with pytest.raises(KubeApiError) as missing:
        await client.get_bytes("/api/v1/nodes/n2/proxy/metrics/resource")
    assert (missing.value.code, missing.value.reason) == (404, "NotFound")
    api.add("nodes", node("n2"))
    with pytest.raises(KubeApiError) as unreachable:
        await client.get_bytes("/api/v1/nodes/n2/proxy/metrics/resource")
    assert unreachable.value.code == 503
    api.set_node_proxy("n1", body, delay=1.0)
    with pytest.raises(KubeApiError) as slow:
        await client.get_bytes("/api/v1/nodes/n1/proxy/metrics/resource", deadline=0.1)
    assert slow.value.code == 0
    assert api.count("proxy") == 4


async def test_fake_lists_with_selectors_and_gets_single_objects(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    api.add("pods", pod("a", "web", labels={"app": "web"}, node_name="n1"))
    api.add("pods", pod("b", "web", labels={"app": "web"}, node_name="n2", phase="Succeeded"))
    api.add("pods", pod("a", "db", labels={"app": "db"}, node_name="n1"))
    listed = await client.get_json(
        PODS, {"labelSelector": "app=web", "fieldSelector": "spec.nodeName=n1"}
    )
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in listed["items"]] == [
        ("a", "web")
    ]
    in_b = await client.get_json(
        "/api/v1/namespaces/b/pods", {"fieldSelector": "status.phase!=Running"}
    )
    assert [i["metadata"]["name"] for i in in_b["items"]] == ["web"]
    assert listed["kind"] == "PodList"
    one = await client.get_json("/api/v1/namespaces/a/pods/db")
    assert one["metadata"]["labels"] == {"app": "db"}
    assert one["metadata"]["resourceVersion"] == str(api.resource_version)
    with pytest.raises(KubeApiError, match='pods "nope" not found'):
        await client.get_json("/api/v1/namespaces/a/pods/nope")
    with pytest.raises(KubeApiError) as bad:
        await client.get_json(PODS, {"labelSelector": "app in (("})
    assert bad.value.code == 400


async def test_fake_watch_from_no_version_starts_with_every_object_as_added(
    api: FakeKubeApiServer, client: KubeClient
) -> None:
    add_pods(api, 3)
    api.max_watch_seconds = 0.2
    seen = [
        (e["type"], e["object"]["metadata"].get("name"))
        async for e in client.watch(PODS, {"watch": "1"}, read_timeout=5)
    ]
    assert seen == [("ADDED", "p000"), ("ADDED", "p001"), ("ADDED", "p002")]


async def test_the_next_page_is_requested_while_this_one_is_fed_to_the_sink() -> None:
    """The API server prepares page 2 while page 1 is decoded and applied: its request is out
    before page 1's last object reaches the sink (and the list still arrives whole, once)."""
    first = [f"a{i:03d}" for i in range(3 * FEED_CHUNK)]
    client = ScriptedClient([a_list(10, *first, token="next"), a_list(10, "b")], [[]])
    requests_seen: list[int] = []
    sink = DictSink(on_listed=lambda obj: requests_seen.append(len(client.list_params)))
    reflector = await play(client, sink)
    assert requests_seen[0] == 1  # page 2 is not asked for before page 1 has arrived
    assert requests_seen[len(first) - 1] == 2  # ...but before page 1 is all in the sink
    assert client.list_params[1]["continue"] == "next"
    assert set(sink.objects) == {("ns", name) for name in [*first, "b"]}
    assert sink.violations == []
    assert reflector.stats.pages == 2


async def test_cancelled_mid_list_leaves_no_page_request_behind() -> None:
    first = [f"a{i:03d}" for i in range(2 * FEED_CHUNK)]
    client = ScriptedClient([a_list(10, *first, token="next")], [])  # page 2 never comes
    sink = DictSink()
    reflector = reflector_for(client, sink)
    before = set(asyncio.all_tasks())
    async with running(reflector):
        await asyncio.wait_for(client.exhausted.wait(), 5)
    await asyncio.sleep(0)
    assert set(asyncio.all_tasks()) - before == set()
    assert sink.lists_finished == 0
