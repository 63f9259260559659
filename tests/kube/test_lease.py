"""Leader election against a local HTTP server that stores Leases with optimistic concurrency.

Real twin (two server replicas on a real Lease, a takeover): tests/controlplane/test_lease.py.
The Lease endpoint failing with 503 and the warnings that follow are staged only here."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import uvicorn

from custom_metrics_server.kube.client import KubeApiError, KubeClient
from custom_metrics_server.kube.config import Connection
from custom_metrics_server.kube.lease import LeaderElector, parse_time, shared_elector
from custom_metrics_server.runtime.startup import StartupError

PREFIX = "/apis/coordination.k8s.io/v1/namespaces/ns/leases"


class LeaseServer:
    """GET/POST/PUT of Lease objects with resourceVersion checks, like kube-apiserver."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.down = False
        self.forbidden = False
        self.lock = threading.Lock()
        #: GETs answered only once this many have arrived (staging two readers of one version)
        self.gets_together = 0
        self.conflicts = 0
        self._gets: list[asyncio.Event] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        status, document = self.handle(scope["method"], scope["path"], body)
        payload = orjson.dumps(document)
        if scope["method"] == "GET" and self.gets_together:
            # Answered as read on arrival, sent once the others have read the same version.
            arrived = asyncio.Event()
            self._gets.append(arrived)
            if len(self._gets) >= self.gets_together:
                self.gets_together = 0
                for event in self._gets:
                    event.set()
            await arrived.wait()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": payload})

    def status(self, code: int, reason: str) -> tuple[int, dict[str, Any]]:
        return code, {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": reason,
            "message": reason,
            "code": code,
        }

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        with self.lock:
            if self.down:
                return self.status(503, "ServiceUnavailable")
            if self.forbidden:
                return self.status(403, "Forbidden")
            name = path.removeprefix(PREFIX).strip("/")
            if method == "GET":
                lease = self.leases.get(name)
                return (200, lease) if lease else self.status(404, "NotFound")
            document = orjson.loads(body)
            name = name or document["metadata"]["name"]
            current = self.leases.get(name)
            if method == "POST" and current is not None:
                return self.status(409, "AlreadyExists")
            if method == "PUT" and (
                current is None
                or document["metadata"].get("resourceVersion")
                != current["metadata"]["resourceVersion"]
            ):
                self.conflicts += 1
                return self.status(409, "Conflict")
            self.version += 1
            document["metadata"]["resourceVersion"] = str(self.version)
            self.leases[name] = document
            return (201 if method == "POST" else 200), document


@pytest.fixture
def lease_server() -> Iterator[tuple[LeaseServer, str]]:
    app = LeaseServer()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    yield app, f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(5)
    sock.close()


CLIENTS: list[KubeClient] = []


def elector(url: str, identity: str, **kwargs: Any) -> LeaderElector:
    client = KubeClient(Connection(host=url))
    CLIENTS.append(client)
    return LeaderElector(
        client,
        namespace="ns",
        name="cms",
        identity=identity,
        lease_duration=kwargs.pop("lease_duration", 1.0),
        renew_deadline=0.6,
        retry_period=0.05,
        **kwargs,
    )


@pytest.fixture(autouse=True)
async def close_clients() -> Any:
    yield
    while CLIENTS:
        await CLIENTS.pop().aclose()


async def wait_for(condition: Any, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


async def test_exactly_one_of_two_candidates_leads(lease_server: tuple[LeaseServer, str]) -> None:
    server, url = lease_server
    first, second = elector(url, "a"), elector(url, "b")
    async with first, second:
        await wait_for(lambda: first.is_leader or second.is_leader)
        await asyncio.sleep(0.3)
        assert first.is_leader != second.is_leader
        holder = server.leases["cms"]["spec"]["holderIdentity"]
        assert holder == ("a" if first.is_leader else "b")


async def test_two_workers_of_one_pod_both_lead_when_their_renewals_collide(
    lease_server: tuple[LeaseServer, str],
) -> None:
    # `serve --workers 2 --workers-replicate-watches`: both workers campaign as the pod.
    server, url = lease_server
    first, second = elector(url, "pod-a"), elector(url, "pod-a")
    other = elector(url, "pod-b")
    assert await first.try_acquire_or_renew()
    assert await other.try_acquire_or_renew() is False
    server.gets_together = 2  # both read the same version, then both write it: one loses
    results = await asyncio.gather(first.try_acquire_or_renew(), second.try_acquire_or_renew())
    assert server.conflicts == 1
    assert results == [True, True]  # the loser found its own pod renewed, not another holder
    assert server.leases["cms"]["spec"]["holderIdentity"] == "pod-a"
    assert await other.try_acquire_or_renew() is False


async def test_a_conflict_with_another_holder_is_still_lost(
    lease_server: tuple[LeaseServer, str],
) -> None:
    server, url = lease_server
    first, other = elector(url, "pod-a"), elector(url, "pod-b")
    server.leases["cms"] = {
        "metadata": {"name": "cms", "resourceVersion": "0"},
        "spec": {"holderIdentity": "", "renewTime": "2020-01-01T00:00:00.000000Z"},
    }
    server.gets_together = 2  # both see a free Lease; one takes it
    results = await asyncio.gather(
        first.try_acquire_or_renew(), other.try_acquire_or_renew(), return_exceptions=True
    )
    assert server.conflicts == 1
    lost = [r for r in results if isinstance(r, KubeApiError)]
    assert [error.code for error in lost] == [409]  # `run` counts it as not leading
    holder = server.leases["cms"]["spec"]["holderIdentity"]
    assert holder == ("pod-a" if results[0] is True else "pod-b")
    assert results.count(True) == 1


async def test_successor_takes_over_after_release(lease_server: tuple[LeaseServer, str]) -> None:
    server, url = lease_server
    changes: list[bool] = []
    first = elector(url, "a", lease_duration=30.0)
    second = elector(url, "b", lease_duration=30.0, on_change=changes.append)
    async with first:
        await wait_for(lambda: first.is_leader)
        async with second:
            await asyncio.sleep(0.2)
            assert not second.is_leader  # the lease is 30 s long and renewed
            await first.__aexit__(None, None, None)  # release on shutdown
            await wait_for(lambda: second.is_leader)
    assert changes == [True, False]
    assert server.leases["cms"]["spec"]["leaseTransitions"] >= 1


async def test_expired_lease_is_taken_over(lease_server: tuple[LeaseServer, str]) -> None:
    server, url = lease_server
    server.leases["cms"] = {
        "metadata": {"name": "cms", "resourceVersion": "0"},
        "spec": {
            "holderIdentity": "gone",
            "leaseDurationSeconds": 1,
            "renewTime": "2020-01-01T00:00:00.000000Z",
        },
    }
    candidate = elector(url, "b")
    async with candidate:
        await wait_for(lambda: candidate.is_leader)
    spec = server.leases["cms"]["spec"]
    assert spec["leaseTransitions"] == 1
    assert (parse_time(spec["acquireTime"]) or 0) > time.time() - 60


async def test_leader_steps_down_when_it_cannot_renew(
    lease_server: tuple[LeaseServer, str],
) -> None:
    server, url = lease_server
    leader = elector(url, "a")
    async with leader:
        await wait_for(lambda: leader.is_leader)
        server.down = True
        # Within the 0.6 s renew deadline; the wait only bounds a leader that never steps down.
        await wait_for(lambda: not leader.is_leader, within=10)
        assert "503" in leader.last_error
        server.down = False
        await wait_for(lambda: leader.is_leader)


async def test_renewal_failures_are_a_warning_per_distinct_error_not_per_round(
    lease_server: tuple[LeaseServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    server, url = lease_server
    leader = elector(url, "a")
    with caplog.at_level(logging.DEBUG, logger="custom_metrics_server.kube.lease"):
        async with leader:
            await wait_for(lambda: leader.is_leader)
            server.down = True
            await wait_for(lambda: leader._errors_in_a_row >= 12)
            server.down = False
            await wait_for(lambda: leader.is_leader)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # The first failure, then every tenth repeat; the rest at debug.
    assert len(warnings) == 2, warnings
    assert "(failure 1 in a row)" in warnings[0]
    assert "(failure 10 in a row)" in warnings[1]


async def test_a_lease_it_may_not_touch_fails_start_up_naming_the_role(
    lease_server: tuple[LeaseServer, str],
) -> None:
    server, url = lease_server
    server.forbidden = True
    candidate = elector(url, "a")
    with pytest.raises(StartupError) as raised:
        async with candidate:
            pass
    line = raised.value.line()
    assert line.startswith(
        "cannot take part in leader election on Lease ns/cms (--leader-elect): GET "
        f"{url}{PREFIX}/cms answered 403 Forbidden"
    )
    assert "the Role and RoleBinding custom-metrics-server-leader-election" in line


async def test_one_elector_per_lease_in_a_process_entered_by_each_user(
    lease_server: tuple[LeaseServer, str],
) -> None:
    """The Kubernetes backend and the metric definitions' status writer ask for the same
    Lease: one elector, one campaign, held until its last user leaves, then released and
    forgotten (a later ask makes a new one)."""
    app, url = lease_server
    connection = Connection(host=url)
    first = shared_elector(connection, namespace="ns", name="shared", identity="pod-a")
    second = shared_elector(connection, namespace="ns", name="shared", identity="pod-a")
    other = shared_elector(connection, namespace="ns", name="another", identity="pod-a")
    assert first is second
    assert other is not first
    async with first:
        writes = app.version
        async with second:
            assert app.version == writes  # the second user does not campaign again
            assert first.is_leader
        assert first.is_leader  # the first user still holds it
        assert app.leases["shared"]["spec"]["holderIdentity"] == "pod-a"
    assert app.leases["shared"]["spec"]["holderIdentity"] == ""  # released by the last
    again = shared_elector(connection, namespace="ns", name="shared", identity="b")
    assert again is not first
    for made in (again, other):  # entered and left: their own clients closed
        async with made:
            pass
