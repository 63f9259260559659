"""The pass-through backend: the metrics it is routed, forwarded to another metrics server (any
custom-metrics-apiserver adapter: prometheus-adapter, KEDA's metrics server, the Datadog
cluster agent, or another instance of this server) and its answers turned into our samples.

**Discovery.** In the background (`__aenter__` starts it): `/apis`, `/apis/custom.metrics.k8s.io`
and `/apis/external.metrics.k8s.io`, then the chosen versions' `APIResourceList`s, which are
the listing (`pods/http_requests` is the custom metric `http_requests` of `pods`). Custom
metrics use v1beta2 when the upstream serves it (a Go adapter's group document advertises
only v1beta1 though it serves both: v1beta2 is then probed), else v1beta1; external metrics
v1beta1. Refreshed every `discovery_interval`; sooner (at most every `MIN_REFRESH` seconds)
when a request names a metric the listing lacks, or the upstream answers a version's path
with "the server could not find the requested resource" (it stopped serving that version:
the request is retried once on the new choice). A failed refresh keeps the last listing and
is retried with backoff (0.5 s doubling to `MAX_RETRY`). Until the first discovery succeeds
the backend is not ready (its metrics answer 503 with the reason); after it, an unreachable
upstream fails each call (503 naming it) and a recovered one answers the next call.

**Forwarding** (`BackendRequest` objects are concrete: our server resolved `*` and the label
selector). Per namespace of the requested objects: one object is one GET of its URL; several
are either one GET of the upstream's `*` URL (every object of the resource in that
namespace; the answer is filtered to the requested names, since the upstream's label selector
is not ours) or one GET per object, at most `fan_out_concurrency` at a time, whichever costs
less by `prefers_wildcard` (the upstream's per-call cost against its per-item cost, from
`benchmarks/passthrough.py`, with the namespace's size from our cluster view).
`metricLabelSelector` and, for external metrics, `labelSelector` are passed through.

**Answers.** A 404 for a value is absence (no sample); a body that is not the list kind asked
for is 503; the other outcomes are `upstream.Upstream`'s table.

Cost per single-object request on a kept-alive connection: the path string, the upstream call
(`upstream.Upstream.get`), one item decoded.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Self
from urllib.parse import quote

from custom_metrics_server.backends.passthrough.decode import (
    CUSTOM_GROUP,
    EXTERNAL_GROUP,
    Decoded,
    custom_listing,
    external_listing,
    external_samples,
    group_versions,
    samples_for,
)
from custom_metrics_server.backends.passthrough.upstream import Upstream, UpstreamConfig
from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalSample,
    GroupResource,
    MetricInfo,
    ObjectKey,
    Readiness,
    Sample,
)
from custom_metrics_server.errors import BackendUnavailable, StatusError
from custom_metrics_server.machinery.labels import EVERYTHING

__all__ = ["PassthroughBackend", "PassthroughSettings", "prefers_wildcard"]

#: The soonest a miss may refresh discovery again (seconds).
MIN_REFRESH: Final = 5.0
#: The longest the start waits for the first discovery (seconds).
START_WAIT: Final = 3.0
#: The longest wait between retries of a failing discovery (seconds).
MAX_RETRY: Final = 10.0
#: "Skipped items" warnings at most this often (seconds).
WARN_INTERVAL: Final = 60.0
#: What an upstream answers for a path it does not route (Go's `NotFound` for a served prefix).
ROUTE_NOT_FOUND: Final = "the server could not find the requested resource"
CUSTOM_VERSIONS: Final = ("v1beta2", "v1beta1")
EXTERNAL_VERSIONS: Final = ("v1beta1",)
_NAMESPACES: Final = GroupResource("", "namespaces")
_PLAIN: Final = re.compile(r"[A-Za-z0-9._~:@-]+|\*")

#: The cost model of `prefers_wildcard`: an extra item of a `*` answer costs this fraction of
#: one more call (benchmarks/passthrough.py, "fan-out against `*`").
ITEM_COST: Final = 0.02


def prefers_wildcard(requested: int, in_namespace: int, *, item_cost: float = ITEM_COST) -> bool:
    """Whether one `*` call for the `in_namespace` objects of a namespace costs less than one
    call per each of the `requested` ones: `requested` calls against one call plus
    `in_namespace` items at `item_cost` of a call each."""
    if requested <= 1:
        return False
    return requested - 1 >= max(in_namespace, requested) * item_cost


@dataclass(frozen=True, slots=True, kw_only=True)
class PassthroughSettings:
    """How to reach the upstream and what to ask it (`plugins.builtin` validates the
    backends file's settings into this)."""

    upstream: UpstreamConfig
    #: A version to use without discovery ("none": do not forward that API), else None.
    custom_version: str | None = None
    external_version: str | None = None
    discovery_interval: float = 60.0
    fan_out_concurrency: int = 8


def _segment(text: str) -> str:
    """A path segment, percent-encoded when it needs it (`*`, the wildcard, as it is)."""
    return text if _PLAIN.fullmatch(text) else quote(text, safe="")


class _ListingView:
    """What the router reads: a stable object per listing (a new one only when it changed)."""

    def __init__(self) -> None:
        self.custom: frozenset[MetricInfo] = frozenset()
        self.custom_keys: frozenset[tuple[GroupResource, str]] = frozenset()
        self.external: frozenset[str] = frozenset()

    def update(self, custom: frozenset[MetricInfo], external: frozenset[str]) -> None:
        if custom != self.custom:
            self.custom = custom
            self.custom_keys = frozenset((info.group_resource, info.metric) for info in custom)
        if external != self.external:
            self.external = external


class PassthroughBackend:
    """See the module."""

    def __init__(
        self,
        settings: PassthroughSettings,
        *,
        name: str = "passthrough",
        cluster: Any = None,
        logger: logging.Logger | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.settings = settings
        self.cluster = cluster
        self.logger = logger or logging.getLogger(f"custom_metrics_server.backends.{name}")
        self.clock = clock
        self.upstream = Upstream(settings.upstream, logger=self.logger, clock=clock)
        self.where = self.upstream.where
        self.listing = _ListingView()
        forced = (settings.custom_version, settings.external_version)
        self.custom_version = _forced(settings.custom_version)
        self.external_version = _forced(settings.external_version)
        #: Versions are known: discovered once, or both given in the settings.
        self.known = None not in forced
        self.failure = ""
        self.attempts = 0
        self.last_attempt = -MIN_REFRESH
        self._lock = asyncio.Lock()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._warned: dict[str, float] = {}

    # -- the listing and readiness (from memory) ----------------------------------------------

    def list_metrics(self) -> Collection[MetricInfo]:
        """The upstream's custom metrics, as its last discovery listed them."""
        return self.listing.custom

    def list_external_metrics(self) -> Collection[str]:
        """The upstream's external metrics, as its last discovery listed them."""
        return self.listing.external

    def ready(self) -> Readiness:
        """Ready once the upstream's versions are known; a failing refresh since is a note."""
        if not self.known:
            why = self.failure or "in progress"
            return Readiness(False, f"discovery of {self.where} has not succeeded yet: {why}")
        if self.failure:
            return Readiness(True, f"serving the last listing: {self.failure}")
        return Readiness(True)

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        """Start discovering; wait for the first attempt at most `START_WAIT` seconds, so a
        reachable upstream is known before the server says it is ready (an unreachable one
        does not hold the start: the backend stays not ready and retries)."""
        self._wake = asyncio.Event()
        first = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(
            self._discovery_loop(first), name=f"passthrough-{self.name}-discovery"
        )
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(START_WAIT):
                await first.wait()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.upstream.aclose()

    # -- discovery ----------------------------------------------------------------------------

    async def _discovery_loop(self, first: asyncio.Event) -> None:
        assert self._wake is not None
        retry = 0.5
        while True:
            await self.refresh(min_age=0.0)
            first.set()
            if self.failure:
                wait = min(retry, MAX_RETRY, self.settings.discovery_interval)
                retry = min(retry * 2, MAX_RETRY)
            else:
                wait, retry = self.settings.discovery_interval, 0.5
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()

    def _poke(self) -> None:
        """A miss: refresh in the background, if the last attempt is old enough."""
        if self._wake is not None and self.clock() - self.last_attempt >= MIN_REFRESH:
            self._wake.set()

    async def refresh(self, *, min_age: float | None = None) -> None:
        """Discover now (one at a time; a caller that waited for another's discovery, or
        comes within `min_age` (default `MIN_REFRESH`) of the last attempt, takes its
        result)."""
        min_age = MIN_REFRESH if min_age is None else min_age
        seen = self.attempts
        async with self._lock:
            if self.attempts != seen or self.clock() - self.last_attempt < min_age:
                return
            self.last_attempt = self.clock()
            self.attempts += 1
            try:
                await self._discover()
            except StatusError as err:
                self._failed(err.message)
            except Exception as err:  # a bug or an unexpected document: keep serving
                self.logger.exception("%s: discovery failed", self.where)
                self._failed(f"{type(err).__name__}: {err}")
            else:
                if self.failure:
                    self.logger.info("%s: discovery succeeded again", self.where)
                self.failure = ""

    def _failed(self, reason: str) -> None:
        if reason != self.failure:
            self.logger.warning(
                "%s: discovery failed, keeping the last listing: %s", self.where, reason
            )
        self.failure = reason

    async def _discover(self) -> None:
        settings = self.settings
        status, apis = await self.upstream.get("/apis")
        index = apis if status == 200 else None
        custom_version, custom_doc = await self._choose(
            CUSTOM_GROUP, index, settings.custom_version, CUSTOM_VERSIONS
        )
        external_version, external_doc = await self._choose(
            EXTERNAL_GROUP, index, settings.external_version, EXTERNAL_VERSIONS
        )
        try:
            custom = custom_listing(custom_doc) if custom_doc is not None else frozenset()
            external = external_listing(external_doc) if external_doc is not None else frozenset()
        except ValueError as err:
            raise BackendUnavailable(
                f"{self.where}: a discovery document is malformed: {err}"
            ) from err
        if (custom_version, external_version) != (self.custom_version, self.external_version):
            self.logger.info(
                "%s: custom metrics %s, external metrics %s",
                self.where,
                f"{CUSTOM_GROUP}/{custom_version}" if custom_version else "not served",
                f"{EXTERNAL_GROUP}/{external_version}" if external_version else "not served",
            )
        self.custom_version, self.external_version = custom_version, external_version
        self.listing.update(custom, external)
        self.known = True

    async def _choose(
        self, group: str, index: Any, forced: str | None, known: tuple[str, ...]
    ) -> tuple[str | None, Any]:
        """(version, its APIResourceList) of `group`: the forced one, else the first of
        `known` the upstream serves; (None, None) when it serves none."""
        if forced == "none":
            return None, None
        candidates: tuple[str, ...]
        if forced is not None:
            candidates = (forced,)
        else:
            status, document = await self.upstream.get(f"/apis/{group}")
            found = group_versions(document, group) if status == 200 else None
            if found is None and index is not None:
                found = group_versions(index, group)
            if found is None or not set(known) & set(found[0]):
                return None, None
            # In our order of preference, advertised or not: a Go adapter's group document
            # advertises only v1beta1 of the custom group, and it serves v1beta2 too.
            candidates = known
        for version in candidates:
            status, document = await self.upstream.get(f"/apis/{group}/{version}")
            if status == 200:
                return version, document
        if forced is not None:
            return forced, None  # forced: use it even if its listing is not served
        return None, None

    # -- custom metrics -----------------------------------------------------------------------

    async def fetch(self, request: BackendRequest) -> Sequence[Sample]:
        """Samples of the requested objects the upstream has values for (see the module)."""
        version = self.custom_version
        if version is None:
            return ()
        info = request.metric
        if (info.group_resource, info.metric) not in self.listing.custom_keys:
            self._poke()
        found: dict[ObjectKey, Sample] = {}
        objects = request.objects
        if len(objects) == 1:
            key = objects[0]
            await self._fetch_one(_Call(request, version, key[0], {key[1]: key}, False, found))
            return list(found.values())
        by_namespace: dict[str, dict[str, ObjectKey]] = {}
        for key in objects:
            by_namespace.setdefault(key[0], {})[key[1]] = key
        limit = asyncio.Semaphore(self.settings.fan_out_concurrency)
        calls = []
        for namespace, wanted in by_namespace.items():
            if self._wildcard(info.group_resource, namespace, len(wanted)):
                calls.append(
                    self._bounded(limit, _Call(request, version, namespace, wanted, True, found))
                )
            else:
                calls += [
                    self._bounded(
                        limit, _Call(request, version, namespace, {name: key}, False, found)
                    )
                    for name, key in wanted.items()
                ]
        await _all(calls)
        return [found[key] for key in objects if key in found]

    def _wildcard(self, resource: GroupResource, namespace: str, requested: int) -> bool:
        in_namespace = requested
        cluster = self.cluster
        if cluster is not None and requested > 1:
            with contextlib.suppress(Exception):
                in_namespace = len(
                    cluster.list_objects(resource, namespace if namespace else None, EVERYTHING)
                )
        return prefers_wildcard(requested, in_namespace)

    async def _bounded(self, limit: asyncio.Semaphore, call: _Call) -> None:
        async with limit:
            await self._fetch_one(call)

    def _custom_path(self, request: BackendRequest, version: str, namespace: str, name: str) -> str:
        resource = request.metric.group_resource
        metric = _segment(request.metric.metric)
        prefix = f"/apis/{CUSTOM_GROUP}/{version}"
        if resource == _NAMESPACES:
            path = f"{prefix}/namespaces/{_segment(name)}/metrics/{metric}"
        elif namespace:
            path = f"{prefix}/namespaces/{_segment(namespace)}/{resource}/{_segment(name)}/{metric}"
        else:
            path = f"{prefix}/{resource}/{_segment(name)}/{metric}"
        selector = request.metric_selector
        if not selector.is_everything():
            path += "?metricLabelSelector=" + quote(str(selector), safe="")
        return path

    async def _fetch_one(self, call: _Call) -> None:
        request = call.request
        name = "*" if call.wildcard else next(iter(call.wanted))
        path = self._custom_path(request, call.version, call.namespace, name)
        status, document = await self.upstream.get(path)
        if status == 404:
            retry = self.custom_version
            if await self._version_gone(document, CUSTOM_GROUP, call.version) and retry is not None:
                await self._fetch_one(dataclasses.replace(call, version=retry))
            return
        try:
            decoded = samples_for(document, request, call.wanted, call.found)
        except ValueError as err:
            raise BackendUnavailable(f"{self.where} answered {path}: {err}") from err
        self._skipped(decoded, path)

    # -- external metrics ---------------------------------------------------------------------

    async def fetch_external(self, request: ExternalBackendRequest) -> Sequence[ExternalSample]:
        """The upstream's series of the external metric, selected by the upstream."""
        version = self.external_version
        if version is None:
            return ()
        if request.metric not in self.listing.external:
            self._poke()
        path = (
            f"/apis/{EXTERNAL_GROUP}/{version}/namespaces/{_segment(request.namespace)}/"
            f"{_segment(request.metric)}"
        )
        selector = request.metric_selector
        if not selector.is_everything():
            path += "?labelSelector=" + quote(str(selector), safe="")
        status, document = await self.upstream.get(path)
        if status == 404:
            if await self._version_gone(document, EXTERNAL_GROUP, version):
                return await self.fetch_external(request)
            return ()
        try:
            decoded = external_samples(document, request)
        except ValueError as err:
            raise BackendUnavailable(f"{self.where} answered {path}: {err}") from err
        self._skipped(decoded, path)
        samples: list[ExternalSample] = decoded.samples
        return samples

    # -- helpers ------------------------------------------------------------------------------

    async def _version_gone(self, document: Any, group: str, version: str) -> bool:
        """A 404 that says the path is not routed (not "no such metric"): rediscover (rate
        limited); True when the choice of `group`'s version changed."""
        message = document.get("message") if isinstance(document, dict) else None
        if message != ROUTE_NOT_FOUND:
            return False
        await self.refresh()
        current = self.custom_version if group == CUSTOM_GROUP else self.external_version
        return current is not None and current != version

    def _skipped(self, decoded: Decoded, path: str) -> None:
        if not decoded.skipped:
            return
        now = self.clock()
        if now - self._warned.get("skipped", -WARN_INTERVAL) < WARN_INTERVAL:
            return
        self._warned["skipped"] = now
        self.logger.warning(
            "%s answered %s with %d item(s) that could not be read (left out, absent): %s",
            self.where,
            path,
            decoded.skipped,
            decoded.problem,
        )


@dataclass(frozen=True, slots=True)
class _Call:
    """One upstream GET of a custom metric: one object, or `*` filtered to `wanted`."""

    request: BackendRequest
    version: str
    namespace: str
    wanted: Mapping[str, ObjectKey]  # object name -> our key
    wildcard: bool
    found: dict[ObjectKey, Sample]  # filled by the call


def _forced(version: str | None) -> str | None:
    return None if version in (None, "none") else version


async def _all(calls: list[Any]) -> None:
    """Await every call; the first failure cancels the others and is raised (as itself,
    not in an exception group: it is an SDK error the server maps)."""
    if len(calls) == 1:
        await calls[0]
        return
    try:
        async with asyncio.TaskGroup() as group:
            for call in calls:
                group.create_task(call)
    except BaseExceptionGroup as failures:
        first: BaseException = failures
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None
