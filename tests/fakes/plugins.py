"""Test-only plugins for the plugin machinery's tests: each factory makes a backend that
behaves (or misbehaves) one way. Loaded by their `tests.fakes.plugins:<factory>` type, in
process or by a real server with this repository on PYTHONPATH."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field

from custom_metrics_server import sdk

PODS = sdk.GroupResource("", "pods")


class Instant:
    """Answers at once: `<prefix>_total` (external, one series per queue) and `<prefix>_pod`
    (custom, pods: 1 for every pod named `web-*`)."""

    def __init__(self, prefix: str = "instant") -> None:
        self.prefix = prefix

    def list_external_metrics(self) -> list[str]:
        return [f"{self.prefix}_total"]

    async def fetch_external(self, request: sdk.ExternalBackendRequest) -> list[sdk.ExternalSample]:
        if request.metric != f"{self.prefix}_total":
            return []
        series = [sdk.external_sample(request, 7, labels={"queue": queue}) for queue in ("a", "b")]
        return [s for s in series if request.metric_selector.matches(s.labels)]

    def list_metrics(self) -> list[sdk.MetricInfo]:
        return [sdk.MetricInfo(PODS, True, f"{self.prefix}_pod")]

    async def fetch(self, request: sdk.BackendRequest) -> list[sdk.Sample]:
        if request.metric.metric != f"{self.prefix}_pod":
            return []
        return [sdk.sample(request, key, 1) for key in request.objects if key[1].startswith("web-")]


def instant(settings: Mapping[str, Any]) -> Instant:
    """An `Instant` named by `settings.prefix`."""
    return Instant(str(settings.get("prefix", "instant")))


class Hanging:
    """`hang_sync` (external, a plain function) blocks its thread; `hang_async` (custom, pods)
    awaits forever. Both are listed."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def list_external_metrics(self) -> list[str]:
        return ["hang_sync"]

    def fetch_external(self, request: sdk.ExternalBackendRequest) -> list[sdk.ExternalSample]:
        self.release.wait(120)
        return []

    def list_metrics(self) -> list[sdk.MetricInfo]:
        return [sdk.MetricInfo(PODS, True, "hang_async")]

    async def fetch(self, request: sdk.BackendRequest) -> list[sdk.Sample]:
        await asyncio.Event().wait()
        return []

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release.set()


def hanging(settings: Mapping[str, Any]) -> Hanging:
    """A `Hanging` backend."""
    return Hanging()


class BrokenListing(Instant):
    """Its custom listing raises; its external metrics still work."""

    def list_metrics(self) -> list[sdk.MetricInfo]:
        raise RuntimeError("catalog unavailable")


def broken_listing(settings: Mapping[str, Any]) -> BrokenListing:
    """A `BrokenListing` backend (prefix `broken`)."""
    return BrokenListing("broken")


class WrongTypes(Instant):
    """Answers dicts instead of samples."""

    async def fetch_external(self, request: sdk.ExternalBackendRequest) -> Any:
        return [{"metric": request.metric, "value": 1}]


def wrong_types(settings: Mapping[str, Any]) -> WrongTypes:
    """A `WrongTypes` backend (prefix `wrong`)."""
    return WrongTypes("wrong")


class Huge(Instant):
    """Answers an endless generator of series."""

    def fetch_external(self, request: sdk.ExternalBackendRequest) -> Iterator[sdk.ExternalSample]:  # type: ignore[override]
        for index in itertools.count():
            yield sdk.external_sample(request, index, labels={"n": str(index)})


def huge(settings: Mapping[str, Any]) -> Huge:
    """A `Huge` backend (prefix `huge`)."""
    return Huge("huge")


class Buggy(Instant):
    """Raises a plain exception (a bug) from its external fetch."""

    async def fetch_external(self, request: sdk.ExternalBackendRequest) -> list[sdk.ExternalSample]:
        raise KeyError("secret internal detail")


def buggy(settings: Mapping[str, Any]) -> Buggy:
    """A `Buggy` backend (prefix `buggy`)."""
    return Buggy("buggy")


class Refusing(Instant):
    """Raises the SDK's errors: 400 for queue=bad, 503 otherwise."""

    async def fetch_external(self, request: sdk.ExternalBackendRequest) -> list[sdk.ExternalSample]:
        if request.metric_selector.requires_exact("queue") == "bad":
            raise sdk.BadRequest("queue=bad cannot be served")
        raise sdk.BackendUnavailable("the database is down")


def refusing(settings: Mapping[str, Any]) -> Refusing:
    """A `Refusing` backend (prefix `refusing`)."""
    return Refusing("refusing")


class FailingStart(Instant):
    """Its start raises."""

    async def __aenter__(self) -> Self:
        raise ConnectionRefusedError("db:5432 refused the connection")

    async def __aexit__(self, *exc: object) -> None:
        return None


def failing_start(settings: Mapping[str, Any]) -> FailingStart:
    """A `FailingStart` backend."""
    return FailingStart("failing")


class Settings(BaseModel):
    """`with_settings`'s settings."""

    dsn: str
    pool: int = 1


@sdk.factory(settings=Settings)
def with_settings(settings: Settings, *, context: sdk.BackendContext) -> Instant:
    """An `Instant` whose prefix is its backend's name (checks the context)."""
    return Instant(context.name.replace("-", "_"))


class Queue(BaseModel):
    """One queue of `with_nested_settings`."""

    name: str
    weight: int = 1


class NestedSettings(BaseModel):
    """`with_nested_settings`'s settings: a list of nested models and an aliased field."""

    queues: list[Queue]
    max_rows: int = Field(default=100, alias="maxRows")


@sdk.factory(settings=NestedSettings)
def with_nested_settings(settings: NestedSettings) -> Instant:
    """An `Instant` whose prefix is its `maxRows` (checks the alias reached the model)."""
    return Instant(str(settings.max_rows))


class LenientSettings(Settings):
    """Settings whose model opts out of the loader's unknown-key check."""

    model_config = ConfigDict(extra="ignore")


@sdk.factory(settings=LenientSettings)
def with_lenient_settings(settings: LenientSettings) -> Instant:
    """An `Instant`, whatever else its settings say."""
    return Instant()


@sdk.factory(requires="1.99")
def from_the_future(settings: Mapping[str, Any]) -> Instant:
    """A plugin written for a newer contract."""
    return Instant()


class ReplicableInstant(Instant):
    """An `Instant` that declares one instance per worker process safe (`sdk.Replicable`)."""

    replicable = True


@sdk.factory(requires="1.1")
def replicable_instant(settings: Mapping[str, Any]) -> Instant:
    """A `ReplicableInstant` (`instant` itself declares nothing: not replicable)."""
    return ReplicableInstant(str(settings.get("prefix", "instant")))


class TruthyReplicable(Instant):
    """`replicable` is a method, not `True`: not a declaration."""

    def replicable(self) -> bool:
        return True


def truthy_replicable(settings: Mapping[str, Any]) -> Instant:
    """A `TruthyReplicable`."""
    return TruthyReplicable()


def not_a_backend(settings: Mapping[str, Any]) -> object:
    """Makes an object with no source."""
    return object()


class Switchable:
    """A backend whose state a test sets by writing a file (settings `state`: its path):
    `up` answers `switch_pod` (custom, pods: 5 for pods named `web-*`) and `switch_total`
    (external: one series, 9); `down` raises `BackendUnavailable`; `stale` answers values an
    hour old; `bug` raises a `KeyError` whose text is a secret. Used for the failure policies
    and the explanations' outcomes."""

    def __init__(self, state: str) -> None:
        self.state = state

    def _mode(self) -> str:
        try:
            with open(self.state) as file:
                return file.read().strip() or "up"
        except OSError:
            return "up"

    def list_external_metrics(self) -> list[str]:
        return ["switch_total"]

    def list_metrics(self) -> list[sdk.MetricInfo]:
        return [sdk.MetricInfo(PODS, True, "switch_pod")]

    def _stamp(self) -> float:
        import time  # noqa: PLC0415 - a test double, kept apart

        return time.time() - (3600 if self._mode() == "stale" else 0)

    def _raise(self) -> None:
        mode = self._mode()
        if mode == "down":
            raise sdk.BackendUnavailable("switched off")
        if mode == "bug":
            raise KeyError("password=hunter2")

    async def fetch(self, request: sdk.BackendRequest) -> list[sdk.Sample]:
        self._raise()
        if request.metric.metric != "switch_pod":
            return []
        stamp = self._stamp()
        return [
            sdk.sample(request, key, 5, timestamp=stamp)
            for key in request.objects
            if key[1].startswith("web-")
        ]

    async def fetch_external(self, request: sdk.ExternalBackendRequest) -> list[sdk.ExternalSample]:
        self._raise()
        if request.metric != "switch_total":
            return []
        return [sdk.external_sample(request, 9, timestamp=self._stamp())]


def switchable(settings: Mapping[str, Any]) -> Switchable:
    return Switchable(str(settings["state"]))


class Growing:
    """Lists `grow_pod` (custom, pods) in one set object, and adds `grown_pod` to that same
    set, in place, on its first fetch: the SDK asks for no new object when a listing changes,
    so only a server that compares listings by value ever serves `grown_pod`. Every pod of a
    listed metric answers 1."""

    def __init__(self) -> None:
        self.listed = {sdk.MetricInfo(PODS, True, "grow_pod")}

    def list_metrics(self) -> set[sdk.MetricInfo]:
        return self.listed

    async def fetch(self, request: sdk.BackendRequest) -> list[sdk.Sample]:
        self.listed.add(sdk.MetricInfo(PODS, True, "grown_pod"))
        return [sdk.sample(request, key, 1) for key in request.objects]


def growing(settings: Mapping[str, Any]) -> Growing:
    """A `Growing` backend."""
    return Growing()


class ListedFromFile:
    """Lists the external metric names written in a file (settings `file`: its path, one name a
    line), read at every listing: a platform backend whose listing changes at run time, as a
    Prometheus discovering series does. Answers 1 for each listed name."""

    def __init__(self, path: str) -> None:
        self.path = path

    def list_external_metrics(self) -> frozenset[str]:
        try:
            with open(self.path) as file:
                text = file.read()
        except OSError:
            return frozenset()
        return frozenset(line.strip() for line in text.splitlines() if line.strip())

    async def fetch_external(self, request: sdk.ExternalBackendRequest) -> list[sdk.ExternalSample]:
        if request.metric not in self.list_external_metrics():
            return []
        return [sdk.external_sample(request, 1)]


def listed_from_file(settings: Mapping[str, Any]) -> ListedFromFile:
    """A `ListedFromFile` backend."""
    return ListedFromFile(str(settings["file"]))
