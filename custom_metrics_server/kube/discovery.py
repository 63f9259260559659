"""REST mapping from live API discovery: which `{resource}` strings the cluster serves.

This module owns reading the cluster's discovery documents (`/api/v1`, `/apis` and every
group's preferred version `/apis/{group}/{version}`) into `ResourceMapping`s, and the
`DiscoveryRestMapper` that answers lookups from the last discovery and refreshes on a miss, so
a CRD created after start-up resolves without a restart. Lookup semantics (plural or singular,
group prefixes, ambiguity) are `restmapper.RestMapper`'s; this module only feeds it, and serves
no HTTP.

As client-go's partial discovery does, a group version that fails to list (an aggregated API
that is down answers 503) is skipped with a warning; on a refresh, the mappings that group had
before are kept until it answers again. Only each group's preferred version is read: a
resource served solely by a non-preferred version of its group is not mapped. The metrics
APIs' own groups (`METRICS_GROUPS`: metrics.k8s.io, custom.metrics.k8s.io,
external.metrics.k8s.io) are not read at all: their resources are readings, never objects a
metric describes, and this server serves (some of) them itself, so at start-up the aggregator
answers 503 for them until the server is Available: asking only produced three warnings.

Costs: a discovery is 2 + groups requests (at most `DISCOVERY_CONCURRENCY` at a time);
`mapping()` is a dictionary lookup; `resolve()` on a miss waits for at most one refresh, shared
by every concurrent miss and started at most once per `min_refresh_interval`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from custom_metrics_server.cluster.restmapper import BUILTIN_MAPPINGS, RestMapper
from custom_metrics_server.domain import GroupResource, Readiness, ResourceMapping

logger = logging.getLogger(__name__)

#: Group version documents fetched at the same time.
DISCOVERY_CONCURRENCY: Final = 8


class JsonClient(Protocol):
    """What discovery needs of `KubeClient`."""

    async def get_json(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        """GET a JSON document."""
        ...


@dataclass(frozen=True)
class DiscoveryResult:
    """One discovery: the mappings found and the group versions that could not be read."""

    mappings: tuple[ResourceMapping, ...]
    failed: Mapping[str, str]  #: group version -> error text


def resources_of(document: Any, *, group: str, version: str) -> list[ResourceMapping]:
    """The mappings of an `APIResourceList` document; subresources (`pods/status`) skipped.

    `singularName` falls back to the lower-cased kind when empty, as upstream's mapper does.
    Malformed entries are skipped.
    """
    found: list[ResourceMapping] = []
    resources = document.get("resources") if isinstance(document, dict) else None
    for entry in resources if isinstance(resources, list) else ():
        if not isinstance(entry, dict):
            continue
        name, kind = entry.get("name"), entry.get("kind")
        if not isinstance(name, str) or not name or "/" in name or not isinstance(kind, str):
            continue
        singular = entry.get("singularName")
        found.append(
            ResourceMapping(
                group_resource=GroupResource(group, name),
                version=version,
                kind=kind,
                namespaced=bool(entry.get("namespaced", False)),
                singular=singular if isinstance(singular, str) and singular else kind.lower(),
            )
        )
    return found


def _preferred_versions(document: Any) -> list[tuple[str, str]]:
    """(group, preferred version) of every group of an `APIGroupList`, in server order."""
    pairs: list[tuple[str, str]] = []
    groups = document.get("groups") if isinstance(document, dict) else None
    for entry in groups if isinstance(groups, list) else ():
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        preferred = entry.get("preferredVersion") or {}
        version = preferred.get("version") if isinstance(preferred, dict) else None
        if not version:
            versions = entry.get("versions") or []
            version = versions[0].get("version") if versions else None
        if isinstance(version, str) and version:
            pairs.append((entry["name"], version))
    return pairs


#: API groups discovery leaves out (see the module).
METRICS_GROUPS: Final = frozenset(
    {"metrics.k8s.io", "custom.metrics.k8s.io", "external.metrics.k8s.io"}
)


async def discover_groups(
    client: JsonClient, *, skip: frozenset[str] = METRICS_GROUPS
) -> DiscoveryResult:
    """Read every served resource but those of the groups in `skip`; raises if `/api/v1` or
    `/apis` cannot be read."""
    core = resources_of(await client.get_json("/api/v1"), group="", version="v1")
    groups = [
        (group, version)
        for group, version in _preferred_versions(await client.get_json("/apis"))
        if group not in skip
    ]
    gate = asyncio.Semaphore(DISCOVERY_CONCURRENCY)

    async def one(group: str, version: str) -> list[ResourceMapping] | str:
        async with gate:
            try:
                document = await client.get_json(f"/apis/{group}/{version}")
            except Exception as err:  # any failure skips the group, as partial discovery does
                return str(err) or type(err).__name__
        return resources_of(document, group=group, version=version)

    answers = await asyncio.gather(*(one(group, version) for group, version in groups))
    mappings = list(core)
    failed: dict[str, str] = {}
    for (group, version), answer in zip(groups, answers, strict=True):
        if isinstance(answer, str):
            failed[f"{group}/{version}"] = answer
        else:
            mappings.extend(answer)
    return DiscoveryResult(tuple(mappings), failed)


@dataclass
class DiscoveryStats:
    """Counters of a `DiscoveryRestMapper`, for self-metrics."""

    refreshes: int = 0  #: discoveries attempted
    failures: int = 0  #: discoveries that failed entirely
    miss_refreshes: int = 0  #: lookups that waited for a refresh


class DiscoveryRestMapper:
    """`{resource}` lookups from live discovery; see the module docstring.

    Until the first discovery succeeds, lookups answer from `seed` (the built-in table by
    default). `run()` keeps the mapping fresh; `resolve()` also refreshes on a miss.
    """

    def __init__(
        self,
        client: JsonClient,
        *,
        interval: float = 600.0,
        min_refresh_interval: float = 5.0,
        seed: Iterable[ResourceMapping] = BUILTIN_MAPPINGS,
        retry_initial: float = 1.0,
        retry_max: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._client = client
        self._interval = interval
        self._min_refresh_interval = min_refresh_interval
        self._retry_initial = retry_initial
        self._retry_max = retry_max
        self._clock = clock
        self._sleep = sleep
        self._mapper = RestMapper(seed)
        self._discovered = False
        self._inflight: asyncio.Future[bool] | None = None
        self._last_attempt: float | None = None
        self._last_error: str | None = None
        self._failing_groups: dict[str, str] = {}
        self.stats = DiscoveryStats()

    @property
    def mapper(self) -> RestMapper:
        """The current mapper (replaced, never mutated, by a refresh)."""
        return self._mapper

    @property
    def discovered(self) -> bool:
        """Whether a discovery has succeeded."""
        return self._discovered

    def mapping(self, resource: str) -> ResourceMapping | None:
        """The mapping of a `{resource}` string from the last discovery; O(1), no I/O."""
        return self._mapper.mapping(resource)

    async def resolve(self, resource: str) -> ResourceMapping | None:
        """`mapping()`, refreshing discovery once on a miss (unless one was started less
        than `min_refresh_interval` ago and is over); concurrent misses share one refresh."""
        found = self._mapper.mapping(resource)
        if found is not None:
            return found
        in_flight = self._in_flight()
        if (
            in_flight is None
            and self._last_attempt is not None
            and self._clock() - self._last_attempt < self._min_refresh_interval
        ):
            return None
        self.stats.miss_refreshes += 1
        missed_at = self._clock()
        joined_started = self._last_attempt if in_flight is not None else None
        await self.refresh()
        found = self._mapper.mapping(resource)
        if found is None and joined_started is not None and joined_started < missed_at:
            # The discovery we joined began before this miss: it may predate the resource
            # (a CRD created a moment ago). One fresh discovery settles it.
            await self.refresh()
            found = self._mapper.mapping(resource)
        return found

    async def refresh(self) -> bool:
        """Discover now, or join the discovery in flight; True if it succeeded. Never raises
        (except `CancelledError` for the caller; the shared discovery goes on)."""
        inflight = self._in_flight()
        if inflight is None:
            self._last_attempt = self._clock()
            inflight = asyncio.ensure_future(self._discover())
            self._inflight = inflight
            inflight.add_done_callback(self._clear_inflight)
        return await asyncio.shield(inflight)

    def _in_flight(self) -> asyncio.Future[bool] | None:
        """The discovery still running, if any. A finished one is not: its done callback
        (`_clear_inflight`) runs a loop turn later, and awaiting a finished future does not
        yield, so a miss in between would join a discovery older than itself, twice."""
        inflight = self._inflight
        return None if inflight is None or inflight.done() else inflight

    def _clear_inflight(self, done: asyncio.Future[bool]) -> None:
        if self._inflight is done:
            self._inflight = None

    async def run(self) -> None:
        """Refresh every `interval` s forever (failed attempts retry sooner, backing off from
        `retry_initial` to `retry_max`); returns only by cancellation."""
        retry = self._retry_initial
        while True:
            if await self.refresh():
                retry = self._retry_initial
                await self._sleep(self._interval)
            else:
                await self._sleep(min(self._interval, retry))
                retry = min(retry * 2, self._retry_max)

    def readiness(self) -> Readiness:
        """Ready after the first successful discovery."""
        if self._discovered:
            return Readiness(ready=True)
        reason = "discovery: waiting for the first API discovery"
        if self._last_error:
            reason += f" (last error: {self._last_error})"
        return Readiness(ready=False, reason=reason)

    async def _discover(self) -> bool:
        self.stats.refreshes += 1
        try:
            result = await discover_groups(self._client)
        except Exception as err:  # a failed discovery keeps the previous mapping
            self.stats.failures += 1
            self._last_error = str(err) or type(err).__name__
            logger.warning("discovery failed: %s; keeping the previous mapping", self._last_error)
            return False
        mappings = list(result.mappings)
        if result.failed:
            failed_groups = {gv.partition("/")[0] for gv in result.failed}
            mappings.extend(
                m
                for m in self._mapper.mappings
                if self._discovered and m.group_resource.group in failed_groups
            )
        self._log_failing_groups(result.failed)
        self._mapper = RestMapper(mappings)
        self._discovered = True
        self._last_error = None
        return True

    def _log_failing_groups(self, failed: Mapping[str, str]) -> None:
        """Warn once per group and error text, not on every refresh."""
        for group_version, error in failed.items():
            if self._failing_groups.get(group_version) != error:
                logger.warning("discovery: skipping %s: %s", group_version, error)
        for group_version in self._failing_groups.keys() - failed.keys():
            logger.info("discovery: %s answers again", group_version)
        self._failing_groups = dict(failed)
