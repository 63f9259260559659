"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

Only the holder serves the `/metrics/resources` series, so that several replicas behind one
Service never expose duplicates to Prometheus. The algorithm follows client-go: a candidate
takes the Lease when it does not exist, when it holds it already, or when the holder has not
renewed it within `lease_duration`; updates carry the Lease's `resourceVersion`, so two
candidates racing for it cannot both win (the loser gets 409 Conflict). The leader renews every
`retry_period` and steps down when it could not renew for `renew_deadline`. On exit it releases
the Lease (holder emptied, as `ReleaseOnCancel`), so a successor does not wait a full term.

The first round runs when the elector is entered, at start-up: a Lease the server may not
read or write (403), or a namespace that does not exist (404), fails start-up with one line
naming the call and the Role to bind (`kube.startup`), instead of a warning every two
seconds. Later failures are logged once per distinct error (and every tenth repeat).

The identity names the candidate, not the process: the workers of `serve --workers N
--workers-replicate-watches` in one pod each run an elector with the pod's identity (the host
name, the same in every worker), so the pod holds the Lease and every one of its workers
serves the series (a Prometheus scrape of the pod lands on any of them). Two such workers
writing at once: the one whose update or create loses (409) reads the Lease again and, finding
its own identity there, stays leader instead of stepping down for a round.

One election per Lease per process: `shared_elector` hands every backend that acts only on
the holder the same elector (the Kubernetes backend's `/metrics/resources`, the metric
definitions' status writer), entered once per user and released by the last.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Self

from custom_metrics_server.domain import Readiness
from custom_metrics_server.kube.client import KubeApiError, KubeClient
from custom_metrics_server.kube.config import Connection
from custom_metrics_server.kube.startup import startup_call
from custom_metrics_server.runtime.startup import StartupError
from custom_metrics_server.runtime.tasks import BackgroundTasks

logger = logging.getLogger(__name__)


def micro_time(timestamp: float) -> str:
    """metav1.MicroTime: RFC 3339 in UTC with microseconds."""
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str | None) -> float | None:
    """A MicroTime or Time string as a POSIX timestamp (None when absent or invalid)."""
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class LeaderElector:
    """Campaigns for one Lease and keeps it while it can. Entered by several users (see
    `shared_elector`), the first `async with` campaigns and the last one out releases."""

    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.time,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self._client = client
        self.namespace = namespace
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._clock = clock
        self._on_change = on_change
        self._leader = False
        self._last_renew = 0.0
        self._tasks = BackgroundTasks()
        self.last_error = ""
        self._errors_in_a_row = 0
        self._users = 0
        #: called when the last user left (`shared_elector` forgets it and closes its client)
        self._closed: Callable[[], Awaitable[None]] | None = None

    @property
    def is_leader(self) -> bool:
        """Whether this process holds the Lease now (and renewed it recently enough)."""
        return self._leader and self._clock() - self._last_renew < self.renew_deadline

    def readiness(self) -> Readiness:
        """Leader election never blocks readiness; the reason says who we are."""
        role = "leader" if self.is_leader else "standby"
        return Readiness(ready=True, reason=f"{role} for lease {self.name}")

    def _set_leader(self, leader: bool) -> None:
        if leader != self._leader:
            self._leader = leader
            logger.info(
                "%s lease %s as %s", "acquired" if leader else "lost", self.name, self.identity
            )
            if self._on_change is not None:
                self._on_change(leader)

    def _lease(self, now: float, previous: dict[str, Any] | None) -> dict[str, Any]:
        spec = dict((previous or {}).get("spec") or {})
        holder = spec.get("holderIdentity")
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder != self.identity:
            spec["acquireTime"] = micro_time(now)
            if previous is not None:  # client-go counts every change of hands, also after a release
                transitions += 1
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=round(self.lease_duration),
            renewTime=micro_time(now),
            leaseTransitions=transitions,
        )
        metadata = dict((previous or {}).get("metadata") or {"name": self.name})
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }

    async def try_acquire_or_renew(self) -> bool:
        """One round of client-go's tryAcquireOrRenew; True when we hold the Lease after it."""
        now = self._clock()
        try:
            current = await self._client.get_json(f"{self._path}/{self.name}")
        except KubeApiError as err:
            if err.code != 404:
                raise
            try:
                await self._client.post_json(self._path, self._lease(now, None))
            except KubeApiError as lost:
                return await self._after_conflict(lost, now)
            self._last_renew = now
            return True
        if self._held_by_another(current, now):
            return False
        try:
            await self._client.put_json(f"{self._path}/{self.name}", self._lease(now, current))
        except KubeApiError as err:
            return await self._after_conflict(err, now)
        self._last_renew = now
        return True

    def _held_by_another(self, lease: dict[str, Any], now: float) -> bool:
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        renewed = parse_time(spec.get("renewTime")) or 0.0
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        return bool(holder) and holder != self.identity and renewed + duration > now

    async def _after_conflict(self, err: KubeApiError, now: float) -> bool:
        """A write lost to another writer (409): if that writer had our identity (another
        worker of `serve --workers N` in this pod), the Lease is ours, renewed for us; else
        it is the other's. Any other error is raised. One GET."""
        if err.code != 409:
            raise err
        current = await self._client.get_json(f"{self._path}/{self.name}")
        spec = current.get("spec") or {}
        if spec.get("holderIdentity") != self.identity:
            raise err
        renewed = parse_time(spec.get("renewTime"))
        if renewed is None:
            raise err
        self._last_renew = min(renewed, now)
        return True

    async def run(self, *, first_delay: float = 0.0) -> None:
        """Campaign and renew forever; never raises but CancelledError."""
        await asyncio.sleep(first_delay)
        while True:
            held: bool | None
            try:
                held = await self.try_acquire_or_renew()
                self.last_error = ""
                self._errors_in_a_row = 0
            except KubeApiError as err:
                # 409: someone else updated the Lease first. Anything else: unknown, so a
                # leader keeps leading until its renew deadline passes.
                held = False if err.code == 409 else None
                if err.code != 409:
                    self._log_error(str(err))
            if held is None:
                held = self._leader and self._clock() - self._last_renew < self.renew_deadline
            self._set_leader(held)
            await asyncio.sleep(self.retry_period)

    def _log_error(self, text: str) -> None:
        """A warning per distinct failure and per tenth repeat; the rest at DEBUG (a renewal
        fails every `retry_period` while the API server is down)."""
        self._errors_in_a_row += 1
        repeated = text == self.last_error
        self.last_error = text
        if not repeated or self._errors_in_a_row % 10 == 0:
            logger.warning(
                "lease %s: %s (failure %d in a row)", self.name, text, self._errors_in_a_row
            )
        else:
            logger.debug("lease %s: %s", self.name, text)

    async def first_round(self) -> bool:
        """The start-up round; a Lease that cannot be read or written raises `StartupError`."""
        where = f"{self.namespace}/{self.name}"
        try:
            return await startup_call(
                self.try_acquire_or_renew,
                what=f"cannot take part in leader election on Lease {where} (--leader-elect)",
                connection=self._client.connection,
                fixes={
                    403: "the service account needs the verbs get, create and update on "
                    f"leases in {self.namespace}: the Role and RoleBinding "
                    "custom-metrics-server-leader-election (manifests/base/"
                    "role-leader-election.yaml, role-binding-leader-election.yaml) in that "
                    "namespace; or point --leader-elect-resource-namespace at the namespace "
                    "they are in, or drop --leader-elect",
                    404: f"the namespace {self.namespace} does not exist: set "
                    "--leader-elect-resource-namespace (default $POD_NAMESPACE)",
                },
            )
        except StartupError as error:
            cause = error.__cause__
            if isinstance(cause, KubeApiError) and cause.code == 409:
                return False  # another candidate won the race: standby
            raise

    async def release(self) -> None:
        """Give the Lease up if we hold it (best effort)."""
        if not self._leader:
            return
        self._set_leader(False)
        with contextlib.suppress(KubeApiError):
            current = await self._client.get_json(f"{self._path}/{self.name}")
            if (current.get("spec") or {}).get("holderIdentity") == self.identity:
                current["spec"]["holderIdentity"] = ""
                current["spec"]["renewTime"] = micro_time(self._clock() - self.lease_duration)
                await self._client.put_json(f"{self._path}/{self.name}", current)

    async def __aenter__(self) -> Self:
        self._users += 1
        if self._users > 1:
            return self
        try:
            self._set_leader(await self.first_round())
        except BaseException:
            self._users -= 1
            raise
        self._tasks.start(self.run(first_delay=self.retry_period), name=f"lease-{self.name}")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._users -= 1
        if self._users > 0:
            return
        await self._tasks.stop()
        await self.release()
        if self._closed is not None:
            await self._closed()


_SHARED: dict[tuple[str, str], LeaderElector] = {}


def shared_elector(
    connection: Connection, *, namespace: str, name: str, identity: str
) -> LeaderElector:
    """The process's one elector of the Lease `namespace/name`: every backend that acts only
    on the holder (the Kubernetes backend's `/metrics/resources`, the metric definitions'
    status writer) asks here, so one process campaigns once per Lease and its users agree on
    who leads. The first asker's connection and identity make it, with a client of its own
    (closed, and the elector forgotten, when its last user exits)."""
    key = (namespace, name)
    found = _SHARED.get(key)
    if found is not None:
        return found
    client = KubeClient(connection)
    elector = LeaderElector(client, namespace=namespace, name=name, identity=identity)

    async def closed() -> None:
        if _SHARED.get(key) is elector:
            del _SHARED[key]
        await client.aclose()

    elector._closed = closed
    _SHARED[key] = elector
    return elector
