"""Writes each definition's `.status` (`status.desired`) through the status subresource, and an
Event (`events.k8s.io/v1`) on each `Ready` transition.

**One writer.** With leader election on (`leader` given), only the holder of the Lease writes
(`kube.lease`, the Lease the Kubernetes backend's `/metrics/resources` uses); a standby's
`run` does nothing, and on taking the Lease it starts from the statuses the watch delivered,
so it writes only what differs. Without leader election every replica writes (one replica).

**Pacing.** Each round (every second) decides per definition, from what its object's status
is (the watch's copy, or the answer to the last write):

* its significant part (`status.significant`: observedGeneration, the conditions' status and
  reason, the route) differs: **urgent**, written in this round;
* anything else differs (value, its time, an error, a message) and the writer last wrote it
  at least `MIN_INTERVAL` (60 s) ago (a status first seen as it should be, after a takeover or
  a restart, counts as written then): **routine**;
* otherwise nothing.

Writes go through a token bucket of `rate` writes a second (`RATE`, 20; burst `BURST`, 20)
and at most `concurrency` (`CONCURRENCY`, 4) in flight; urgent ones first, then routine ones
oldest first. **Bound**: whatever the number of definitions, at most `RATE` status writes a
second (1,200 a minute) plus one Event per `Ready` transition; with 10,000 serving
definitions each one's value is refreshed every 10,000 / 20 = 500 s instead of every minute,
and a condition change waits only for the urgent ones before it.

**Conflicts.** A write carries the resourceVersion last seen; a 409 re-reads the object
(same uid, else it was replaced: left to the watch) and writes again, at most `ATTEMPTS`
times in a round; a 404 means deleted: forgotten. Other failures are logged once per
definition and retried in a later round.

Cost of a round: O(definitions) to decide (tuple comparisons of each state with its observed
status: 33-39 ms CPU at 10,000, in slices of `SLICE` between yields to the event loop,
docs/performance.md), plus the writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from custom_metrics_server.backends.definitions.catalog import Catalog
from custom_metrics_server.backends.definitions.state import State
from custom_metrics_server.backends.definitions.status import (
    GROUP_VERSION,
    desired,
    pending,
    ready_event,
    routine_of,
    significant,
    significant_of,
)
from custom_metrics_server.kube.client import KubeApiError, KubeClient
from custom_metrics_server.kube.lease import micro_time

__all__ = ["ATTEMPTS", "BURST", "CONCURRENCY", "MIN_INTERVAL", "RATE", "StatusWriter"]

logger = logging.getLogger(__name__)

#: Seconds between two routine writes of one definition.
MIN_INTERVAL: Final = 60.0
#: Status writes a second, all definitions together, and the bucket's depth.
RATE: Final = 20.0
BURST: Final = 20.0
#: Writes in flight at once.
CONCURRENCY: Final = 4
#: Writes of one definition in a round (the first and the retries after 409s).
ATTEMPTS: Final = 3
#: `reportingController` of the Events (a qualified name, as upstream's `kubernetes.io/...`).
CONTROLLER: Final = "metrics.custom-metrics-server.io/status-writer"
ROUND: Final = 1.0
#: Definitions decided between two yields to the event loop.
SLICE: Final = 1_000


@dataclass(slots=True)
class _Written:
    uid: str
    at: float
    #: `status.routine_of` the state when written
    routine: tuple[object, ...]


class StatusWriter:
    """See the module."""

    def __init__(
        self,
        client: KubeClient,
        catalog: Catalog,
        *,
        identity: str,
        leader: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.time,
        rate: float = RATE,
        burst: float = BURST,
        concurrency: int = CONCURRENCY,
        min_interval: float = MIN_INTERVAL,
    ) -> None:
        self.client = client
        self.catalog = catalog
        self.identity = identity
        self._leader = leader
        self._clock = clock
        self.rate = rate
        self.burst = burst
        self.min_interval = min_interval
        self._tokens = burst
        self._filled = clock()
        self._limit = asyncio.Semaphore(concurrency)
        self._written: dict[tuple[str, str], _Written] = {}
        #: per definition: its observed status (by identity) and that status's significant part
        self._seen: dict[tuple[str, str], tuple[Mapping[str, Any], tuple[object, ...]]] = {}
        self._failing: set[tuple[str, str]] = set()
        #: counts, for tests and the benchmark
        self.writes = 0
        self.conflicts = 0
        self.events = 0

    @property
    def leading(self) -> bool:
        """Whether this replica writes now."""
        return self._leader is None or self._leader()

    # -- deciding --

    def _refill(self, now: float) -> None:
        self._tokens = min(self.burst, self._tokens + (now - self._filled) * self.rate)
        self._filled = now

    async def due(self, now: float) -> list[State]:
        """The definitions to write in this round, urgent first, within the bucket's tokens
        (taken). O(definitions), a few tuple comparisons each: the status is built only for
        the chosen; the event loop is yielded to every `SLICE` definitions (~4 ms)."""
        urgent: list[State] = []
        routine: list[tuple[float, State]] = []
        seen = self._seen
        for index, (key, state) in enumerate(list(self.catalog.states.items())):
            if index % SLICE == SLICE - 1:
                await asyncio.sleep(0)
            if pending(state, now):
                continue
            have = state.observed_status
            known = seen.get(key)
            if known is None or known[0] is not have:
                known = seen[key] = (have, significant(have))
            if significant_of(state) != known[1]:
                urgent.append(state)
                continue
            written = self._written.get(key)
            if written is None or written.uid != state.definition.uid:
                # First seen as it should be (a new leader, a restart): counted as written
                # now, so a takeover does not rewrite every definition at once.
                self._written[key] = _Written(state.definition.uid, now, routine_of(state))
                continue
            if now - written.at >= self.min_interval and routine_of(state) != written.routine:
                routine.append((written.at, state))
        if len(seen) > len(self.catalog.states):  # definitions deleted: forget them
            for gone in [key for key in seen if key not in self.catalog.states]:
                del seen[gone]
                self._written.pop(gone, None)
        routine.sort(key=lambda item: item[0])
        self._refill(now)
        chosen = (urgent + [state for _, state in routine])[: int(self._tokens)]
        self._tokens -= len(chosen)
        return chosen

    # -- writing --

    async def run(self) -> None:
        """A round every second while leading; never raises but CancelledError."""
        while True:
            if self.leading:
                try:
                    await self.round()
                except Exception:  # a bug: logged, and the next round tries again
                    logger.exception("metric definitions: the status round failed")
            await asyncio.sleep(ROUND)

    async def round(self) -> int:
        """Write what is due now; returns how many were written."""
        chosen = await self.due(self._clock())
        if not chosen:
            return 0
        done = await asyncio.gather(*(self._write(state) for state in chosen))
        return sum(done)

    async def _write(self, state: State) -> bool:
        definition = state.definition
        key = definition.key
        path = (
            f"/apis/{GROUP_VERSION}/namespaces/{definition.namespace}/metricdefinitions/"
            f"{definition.name}/status"
        )
        async with self._limit:
            for _ in range(ATTEMPTS):
                now = self._clock()
                before = state.observed_status
                status = desired(state, state.observed_status, now)
                body = {
                    "apiVersion": GROUP_VERSION,
                    "kind": "MetricDefinition",
                    "metadata": {
                        "name": definition.name,
                        "namespace": definition.namespace,
                        "uid": definition.uid,
                        "resourceVersion": state.resource_version,
                    },
                    "status": status,
                }
                try:
                    answer = await self.client.put_json(path, body)
                except KubeApiError as err:
                    if err.code == 409:
                        self.conflicts += 1
                        if not await self._reread(state, path):
                            return False
                        continue
                    if err.code == 404:
                        self._written.pop(key, None)
                        self._seen.pop(key, None)
                        return False  # deleted: the watch's event takes it out
                    self._log_failure(key, str(err))
                    return False
                self.writes += 1
                self._failing.discard(key)
                self._written[key] = _Written(definition.uid, now, routine_of(state))
                _take(state, answer)
                logger.debug("metric definition %s/%s: status written", *key)
                await self._event(state, before, status, now)
                return True
        return False

    async def _reread(self, state: State, path: str) -> bool:
        """After a 409: the object's current resourceVersion and status, if it is still the
        same object."""
        try:
            current = await self.client.get_json(path)
        except KubeApiError as err:
            if err.code != 404:
                self._log_failure(state.definition.key, f"re-reading after a conflict: {err}")
            return False
        if (current.get("metadata") or {}).get("uid") != state.definition.uid:
            return False  # replaced by a new object of that name: its own state will follow
        _take(state, current)
        return True

    def _log_failure(self, key: tuple[str, str], message: str) -> None:
        if key not in self._failing:
            self._failing.add(key)
            logger.warning("metric definition %s/%s: writing its status failed: %s", *key, message)

    async def _event(
        self, state: State, before: Mapping[str, Any], after: Mapping[str, Any], now: float
    ) -> None:
        found = ready_event(state, before, after)
        if found is None:
            return
        kind, reason, note = found
        definition = state.definition
        event = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {
                # client-go's events recorder names them so: the object's name, the time
                "name": f"{definition.name}.{int(now * 1e9):x}",
                "namespace": definition.namespace,
            },
            "eventTime": micro_time(now),
            "reportingController": CONTROLLER,
            "reportingInstance": self.identity or CONTROLLER,
            "action": "WriteStatus",
            "reason": reason,
            "note": note,
            "type": kind,
            "regarding": {
                "apiVersion": GROUP_VERSION,
                "kind": "MetricDefinition",
                "namespace": definition.namespace,
                "name": definition.name,
                "uid": definition.uid,
            },
        }
        try:
            await self.client.post_json(
                f"/apis/events.k8s.io/v1/namespaces/{definition.namespace}/events", event
            )
        except KubeApiError as err:  # an Event is best effort, as client-go's recorder's
            logger.info("metric definition %s/%s: event not recorded: %s", *definition.key, err)
            return
        self.events += 1
        logger.info("metric definition %s/%s: %s %s: %s", *definition.key, kind, reason, note)


def _take(state: State, obj: Mapping[str, Any]) -> None:
    """What the API server says the object is now (a write's answer, a re-read)."""
    with contextlib.suppress(AttributeError, TypeError):
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            state.resource_version = str(version)
        status = obj.get("status")
        state.observed_status = status if isinstance(status, Mapping) else {}
