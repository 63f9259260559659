"""`WatchGroup`: one list+watch per collection of one namespace, shared by every consumer that
subscribes to it, counted by reference (client-go's shared informers).

Consumers (the MetricDefinitions' sources) each have a `WatchSink` of their own, which keeps
what that consumer needs (a scrape target per chosen pod, a pod's controller, a Service by
name). Without the group every consumer runs its own `Reflector`; with it, every consumer of
`(namespace, collection)` shares one: the first `subscribe` starts it, the last `release` stops
it `grace` seconds later (a consumer replaced by its successor, as a definition edit does,
re-subscribes within that time and nothing is relisted). The reflector's sink is the entry's
store (`KeyedSink`, the objects by (namespace, name), `metadata.managedFields` dropped, the
field no consumer reads and the largest of most objects), which fans every call out to the
subscribed sinks in the order the reflector made them:

* a subscriber that joins a listed entry is replayed the store at once (`list_started`, every
  object `listed`, `list_finished`), then gets the watch's events;
* one that joins before the first list completes, or during a relist (410 Gone and the rest are
  the `Reflector`'s business), waits: it is replayed the store when that list finishes, so it
  never sees half a list;
* a released subscriber gets nothing more, even mid-list.

The group confines by construction: a subscription is to `Collection.path(namespace)`, a
namespaced path built from a DNS-1123 label (anything else is refused), so a consumer of
namespace `a` never receives an object of `b`; the label selection is the consumer's own
(its sink matches labels on the client, e.g. `PodTargets` with `machinery.labels`), which is
what lets one watch serve every selector of the namespace.

`Subscriptions` is one consumer's set of them: planned when it is made, taken in `__aenter__`,
released in `__aexit__`, with `wait_synced` and `readiness` as a `Reflector` has; the sources
use it, so the lifecycle is written once.

Costs: an event O(subscribers) sink calls (each sink its own cost: `PodTargets` O(scrape
configs + labels)); a subscription O(objects of the entry) for the replay (synchronous: the
namespace's objects, not the cluster's); memory one copy of each object of every subscribed
collection, in place of one compact record per consumer. One watch, and one connection to
kube-apiserver (HTTP/1.1: a watch holds its connection), per (namespace, collection) with at
least one subscriber or in its grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Self, cast

from custom_metrics_server.domain import ObjectKey, Readiness
from custom_metrics_server.kube.keyed_sink import KeyedSink
from custom_metrics_server.kube.watcher import ListWatchClient, Reflector, WatchSink

__all__ = ["GRACE", "Collection", "Subscription", "Subscriptions", "WatchGroup"]

logger = logging.getLogger(__name__)

#: Seconds a watch without subscribers keeps running (a replaced consumer's successor reuses it).
GRACE: Final = 60.0
#: A subscriber's sink failure is logged at most once per this many seconds per entry.
_SINK_ERROR_LOG_INTERVAL: Final = 10.0
_NAMESPACE: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@dataclass(frozen=True, slots=True)
class Collection:
    """A namespaced collection: its API prefix (`/api/v1`, `/apis/apps/v1`), its resource, and
    the field selector every consumer of it shares (`status.phase=Running`)."""

    prefix: str
    resource: str
    field_selector: str = ""

    def path(self, namespace: str) -> str:
        """The collection in `namespace` only; ValueError for anything but a namespace name."""
        if len(namespace) > 63 or not _NAMESPACE.fullmatch(namespace):
            raise ValueError(f"{namespace!r} is not a namespace name")
        return f"{self.prefix}/namespaces/{namespace}/{self.resource}"


def _object_key(obj: Mapping[str, Any]) -> ObjectKey | None:
    metadata = obj.get("metadata") or {}
    name = metadata.get("name")
    return (str(metadata.get("namespace", "")), name) if isinstance(name, str) else None


class Subscription:
    """One consumer's sink on one shared watch; `release()` ends it (idempotent)."""

    def __init__(self, entry: _Entry, sink: WatchSink, name: str) -> None:
        self.name = name
        self.path = entry.reflector.path
        self.field_selector = entry.field_selector
        self.sink = sink
        self.pending = True  # replayed when the entry's list in progress finishes
        self._entry: _Entry | None = entry
        self._synced = asyncio.Event()

    @property
    def synced(self) -> bool:
        """Whether a full list has reached the sink."""
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        """Return once a full list has reached the sink."""
        await self._synced.wait()

    def readiness(self) -> Readiness:
        """Ready once listed; else what the shared watch waits for."""
        if self.synced:
            return Readiness(ready=True)
        if self._entry is None:
            return Readiness(ready=False, reason=f"{self.name}: released")
        return self._entry.reflector.readiness()

    def release(self) -> None:
        """Stop receiving; the watch stops a grace period after its last subscriber left."""
        entry, self._entry = self._entry, None
        if entry is not None:
            entry.group._release(entry, self)

    def _replay(self, objects: Iterable[dict[str, Any]]) -> None:
        entry = self._entry
        if entry is None:
            return
        sink = self.sink
        entry.call(self, sink.list_started)
        for obj in objects:
            entry.call(self, sink.listed, obj)
        entry.call(self, sink.list_finished)
        self.pending = False
        self._synced.set()


class _Entry(KeyedSink[ObjectKey]):
    """One shared watch: its reflector's store, fanned out to its subscribers."""

    def __init__(self, group: WatchGroup, path: str, field_selector: str, name: str) -> None:
        super().__init__()
        self.group = group
        self.field_selector = field_selector
        self.objects: dict[ObjectKey, dict[str, Any]] = {}
        self.subscribers: list[Subscription] = []
        self.listing = False
        self.reflector = Reflector(
            group.client,
            path=path,
            sink=self,
            name=name,
            field_selector=field_selector,
            **group.reflector_options,
        )
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.Task[None] | None = None
        self.sink_errors = 0
        self._error_logged_at = float("-inf")

    def call(self, subscription: Subscription, method: Callable[..., None], *args: Any) -> None:
        """One subscriber's sink call; its failure is counted and logged, never another's."""
        try:
            method(*args)
        except Exception:
            self.sink_errors += 1
            now = time.monotonic()
            if now - self._error_logged_at >= _SINK_ERROR_LOG_INTERVAL:
                self._error_logged_at = now
                logger.exception(
                    "%s: the sink of %s failed (%d sink errors so far)",
                    self.reflector.name,
                    subscription.name,
                    self.sink_errors,
                )

    def _live(self) -> list[Subscription]:
        return [sub for sub in self.subscribers if not sub.pending]

    # -- the reflector's sink: the store, then the subscribers --

    def list_started(self) -> None:
        super().list_started()
        self.listing = True
        for sub in self._live():
            self.call(sub, sub.sink.list_started)

    def listed(self, obj: dict[str, Any]) -> None:
        (obj.get("metadata") or {}).pop("managedFields", None)
        super().listed(obj)
        for sub in self._live():
            self.call(sub, sub.sink.listed, obj)

    def list_finished(self) -> None:
        super().list_finished()
        self.listing = False
        for sub in list(self.subscribers):
            if sub.pending:
                sub._replay(self.objects.values())
            else:
                self.call(sub, sub.sink.list_finished)

    def event(self, type: str, obj: dict[str, Any]) -> None:
        (obj.get("metadata") or {}).pop("managedFields", None)
        super().event(type, obj)
        for sub in self._live():
            self.call(sub, sub.sink.event, type, obj)

    # -- KeyedSink --

    def apply(self, obj: Mapping[str, Any]) -> ObjectKey | None:
        key = _object_key(obj)
        if key is not None:
            self.objects[key] = cast("dict[str, Any]", obj)  # the reflector's own dict
        return key

    def remove(self, key: ObjectKey) -> None:
        self.objects.pop(key, None)

    def keys(self) -> Iterable[ObjectKey]:
        return self.objects.keys()

    def key_of(self, obj: Mapping[str, Any]) -> ObjectKey | None:
        return _object_key(obj)


class WatchGroup:
    """The shared watches of one client (see the module). `aclose()` stops them all."""

    def __init__(
        self,
        client: ListWatchClient,
        *,
        grace: float = GRACE,
        name: str = "shared",
        owns_client: bool = False,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        **reflector_options: Any,
    ) -> None:
        self.client = client
        self._owns_client = owns_client
        self.grace = grace
        self.name = name
        self.reflector_options = reflector_options
        self._sleep = sleep
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._timers: set[asyncio.Task[None]] = set()
        self._closed = False

    def subscribe(
        self, collection: Collection, namespace: str, sink: WatchSink, *, name: str
    ) -> Subscription:
        """`sink` fed from the shared watch of `collection` in `namespace` (started if none
        runs). O(objects of it) when it is listed already (the replay), else O(1)."""
        if self._closed:
            raise RuntimeError(f"{self.name}: the watch group is closed")
        path = collection.path(namespace)
        key = (path, collection.field_selector)
        entry = self._entries.get(key)
        if entry is None:
            entry = _Entry(self, path, collection.field_selector, f"{self.name}:{path}")
            self._entries[key] = entry
            entry.task = asyncio.create_task(entry.reflector.run(), name=f"watch-{path}")
            logger.debug("%s: watching %s", self.name, path)
        if entry.timer is not None:  # a successor within the grace period: keep the watch
            entry.timer.cancel()
            entry.timer = None
        subscription = Subscription(entry, sink, name)
        entry.subscribers.append(subscription)
        if entry.reflector.synced and not entry.listing:
            subscription._replay(entry.objects.values())
        return subscription

    def _release(self, entry: _Entry, subscription: Subscription) -> None:
        with contextlib.suppress(ValueError):
            entry.subscribers.remove(subscription)
        if entry.subscribers or self._closed or entry.timer is not None:
            return
        key = (entry.reflector.path, entry.field_selector)
        if self._entries.get(key) is not entry:
            return
        timer = asyncio.create_task(self._expire(key, entry), name=f"unwatch-{key[0]}")
        entry.timer = timer
        self._timers.add(timer)
        timer.add_done_callback(self._timers.discard)

    async def _expire(self, key: tuple[str, str], entry: _Entry) -> None:
        await self._sleep(self.grace)
        if entry.subscribers or self._entries.get(key) is not entry:
            return
        entry.timer = None
        del self._entries[key]
        logger.debug("%s: %s has had no subscriber for %ss: stopped", self.name, key[0], self.grace)
        await _stop(entry)

    # -- what runs --

    def watches(self) -> int:
        """Shared watches running now (subscribed, or in their grace period)."""
        return len(self._entries)

    def paths(self) -> list[tuple[str, int]]:
        """(path, subscribers) of every shared watch running, sorted."""
        return sorted((path, len(e.subscribers)) for (path, _), e in self._entries.items())

    def objects(self) -> int:
        """Objects held over every shared watch (one copy each)."""
        return sum(len(entry.objects) for entry in self._entries.values())

    async def aclose(self) -> None:
        """Stop every watch and timer now (subscriptions end with them); close the client if
        the group owns it."""
        self._closed = True
        entries, self._entries = list(self._entries.values()), {}
        timers = list(self._timers)
        for timer in timers:
            timer.cancel()
        for timer in timers:
            with contextlib.suppress(asyncio.CancelledError):
                await timer
        for entry in entries:
            await _stop(entry)
        close = getattr(self.client, "aclose", None)
        if self._owns_client and close is not None:
            await close()


async def _stop(entry: _Entry) -> None:
    task, entry.task = entry.task, None
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


#: (collection, sink, name) of a subscription to take
_Planned = tuple[Collection, WatchSink, str]


class Subscriptions:
    """One consumer's subscriptions: planned by `add`, taken on entry, released on exit."""

    def __init__(self, group: WatchGroup, namespace: str) -> None:
        self.group = group
        self.namespace = namespace
        self._planned: list[_Planned] = []
        self._taken: list[Subscription] = []

    def add(self, collection: Collection, sink: WatchSink, *, name: str) -> None:
        """Plan a subscription to `collection` of the namespace (checked now: `path`)."""
        collection.path(self.namespace)
        self._planned.append((collection, sink, name))

    @property
    def paths(self) -> list[tuple[str, str]]:
        """(path, field selector) of each planned subscription, in order."""
        return [(c.path(self.namespace), c.field_selector) for c, _, _ in self._planned]

    async def __aenter__(self) -> Self:
        for collection, sink, name in self._planned:
            self._taken.append(self.group.subscribe(collection, self.namespace, sink, name=name))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        taken, self._taken = self._taken, []
        for subscription in taken:
            subscription.release()

    def _pairs(self) -> list[tuple[_Planned, Subscription | None]]:
        taken = self._taken
        return [(p, taken[i] if i < len(taken) else None) for i, p in enumerate(self._planned)]

    @property
    def synced(self) -> bool:
        """Every subscription listed (False before entry)."""
        return all(taken is not None and taken.synced for _, taken in self._pairs())

    async def wait_synced(self, within: float | None = None) -> str | None:
        """Wait for every subscription's list, at most `within` seconds in all; the name of
        the first one not listed then (None: all are)."""
        if not self.synced and self._taken:
            waits = asyncio.gather(*(s.wait_synced() for s in self._taken))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waits, within)
        for planned, taken in self._pairs():
            if taken is None or not taken.synced:
                return planned[2]
        return None

    def readiness(self) -> Readiness:
        """Ready once every subscription listed; else the first one's reason."""
        for planned, taken in self._pairs():
            if taken is None:
                return Readiness(ready=False, reason=f"{planned[2]}: not started")
            if not taken.synced:
                return taken.readiness()
        return Readiness(ready=True)
