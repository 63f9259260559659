"""`serve --workers N` through the real server process (custom_metrics_server.workers).

Every backend replicable (the demo): the same answers as one process for every URL form, fresh
connections spread over both workers and their answers for one pod agreeing, a killed worker
replaced, SIGTERM stopping every process, a stalled main process not stopping the answers (it
is out of the request path), and a killed main process taking the workers along.

A backend that is not replicable (the Kubernetes backend): one process serves, with the one
warning line, and the backends start once (the same lists and watches on the fake
kube-apiserver as `--workers 1`)."""

from __future__ import annotations

import http.client
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from custom_metrics_server.testing.server_process import ServerProcess, start_server, stop_server
from tests.fakes.auth_webhooks import FakeAuthApiServer
from tests.fakes.cluster_process import TOKEN, serve_flags, write_kubeconfig
from tests.fakes.kube_apiserver import FakeKubeApiServer

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.integration

P = "/apis/custom.metrics.k8s.io/v1beta2"
PB = "application/vnd.kubernetes.protobuf"
#: (path, Accept) pairs: every URL form the server answers, good and bad.
URLS: list[tuple[str, str]] = [
    ("/apis", "application/json"),
    ("/apis", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"),
    ("/apis/custom.metrics.k8s.io", "application/json"),
    (P, "application/json"),
    ("/apis/custom.metrics.k8s.io/v1beta1", "application/json"),
    ("/apis/external.metrics.k8s.io/v1beta1", "application/json"),
    (f"{P}/namespaces/default/pods/*/http_requests_per_second?labelSelector=app%3Dweb", "*/*"),
    (f"{P}/namespaces/default/pods/*/http_requests_per_second?labelSelector=app%3Dweb", PB),
    (f"{P}/namespaces/default/pods/*/http_requests_per_second?pretty=true", "*/*"),
    (f"{P}/namespaces/default/pods/nope/http_requests_per_second", "*/*"),
    (f"{P}/namespaces/default/pods/*/no_such_metric", "*/*"),
    (f"{P}/namespaces/default/pods/*/http_requests_per_second?labelSelector=%3D%3D", "*/*"),
    (f"{P}/namespaces/default/pods/*/http_requests_per_second", "text/nothing"),
    (f"{P}/nodes/*/node_cpu_usage", "*/*"),
    ("/apis/external.metrics.k8s.io/v1beta1/namespaces/default/queue_depth", "*/*"),
    ("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods", "application/json"),
    ("/apis/metrics.k8s.io/v1beta1/nodes", "application/json"),
    ("/api/v1/namespaces/default/pods", "application/json"),
    ("/version", "*/*"),
    ("/openapi/v2", "*/*"),
    ("/healthz", "*/*"),
    ("/livez", "*/*"),
    ("/readyz", "*/*"),
    ("/readyz?verbose", "*/*"),
    ("/no/such/path", "*/*"),
    ("/apis/custom.metrics.k8s.io/v9", "*/*"),
]


def _strip_times(value: Any) -> Any:
    """Bodies without the fields that move with the clock (metric values are seeded; the
    usage of metrics.k8s.io is a rate over each process's own clock)."""
    if isinstance(value, dict):
        return {
            key: _strip_times(item)
            for key, item in value.items()
            if key not in ("timestamp", "window", "creationTimestamp", "usage")
        }
    if isinstance(value, list):
        return [_strip_times(item) for item in value]
    return value


def _answer(client: httpx.Client, path: str, accept: str) -> tuple[Any, ...]:
    response = client.get(path, headers={"Accept": accept})
    # The address discovery advertises is the server's own (its port differs).
    body: Any = response.content.replace(str(client.base_url.netloc.decode()).encode(), b"SELF")
    if response.headers.get("content-type", "").startswith("application/json"):
        body = _strip_times(orjson.loads(body))
    elif "protobuf" in response.headers.get("content-type", ""):
        body = len(body)  # timestamps are inside; the size is fixed
    return response.status_code, response.headers.get("content-type"), body


def _workers(server: ServerProcess) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{server.pid}/task").iterdir():
        found.update(int(pid) for pid in (task / "children").read_text().split())
    return found


def _wait(condition: Any, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    return condition()


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    work = tmp_path_factory.mktemp("workers")
    flags = ("--demo-pods", "40", "--demo-interval", "1h", "--enable-metrics-api")
    one = start_server(work / "one", *flags)
    two = start_server(work / "two", *flags, "--workers", "2")
    yield one, two
    stop_server(one)
    stop_server(two)


def test_answers_are_the_same_with_and_without_workers(
    pair: tuple[ServerProcess, ServerProcess],
) -> None:
    one, two = pair
    assert len(_workers(two)) == 2
    assert "--workers 2: 2 worker processes, each serving the whole API" in two.logs()
    with one.client() as a, two.client() as b:
        for path, accept in URLS:
            assert _answer(a, path, accept) == _answer(b, path, accept), (path, accept)
        # HEAD: the headers of the GET, no body.
        head = b.head(f"{P}/namespaces/default/pods/*/http_requests_per_second")
        assert head.status_code == 200
        assert head.content == b""


def test_a_killed_worker_is_replaced(pair: tuple[ServerProcess, ServerProcess]) -> None:
    _, two = pair
    before = _workers(two)
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    after = _wait(lambda: (found := _workers(two)) and victim not in found and len(found) == 2)
    assert after, _workers(two)
    with two.client() as client:
        # Every new connection lands on a listening worker (no reset from the dead one).
        for _ in range(10):
            response = client.get(f"{P}/namespaces/default/pods/*/http_requests_per_second")
            assert response.status_code == 200
    assert "exited (status -9): replacing it" in two.logs()


def _socket_owners(pids: set[int]) -> dict[int, int]:
    """The inode of every socket the processes hold, and its process."""
    owners = {}
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                owners[int(target[8:-1])] = pid
    return owners


def _listening(server: ServerProcess) -> set[int]:
    """The workers that listen on the server's port (a replacement does once it started)."""
    port = int(server.url.rsplit(":", 1)[1])
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(int(fields[9]))
    owners = _socket_owners(_workers(server))
    return {owners[inode] for inode in inodes if inode in owners}


def _server_end(port: int, client_port: int) -> int:
    """The inode of the server's end of the loopback connection from `client_port`."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote = fields[1].rsplit(":", 1)[1], fields[2].rsplit(":", 1)[1]
            if int(local, 16) == port and int(remote, 16) == client_port:
                return int(fields[9])
    raise AssertionError(f"no connection from port {client_port}")


def _answers_by_worker(server: ServerProcess, path: str, count: int) -> dict[int, list[Any]]:
    """`count` fresh connections, one GET each: the answers by the worker that served them
    (found from /proc: nothing is exposed for it)."""
    port = int(server.url.rsplit(":", 1)[1])
    workers = _workers(server)
    context = server.ssl_context()
    found: dict[int, list[Any]] = {}
    connections = []
    try:
        for _ in range(count):
            connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
            connections.append(connection)
            connection.request("GET", path, headers={"Accept": "application/json"})
            response = connection.getresponse()
            body = orjson.loads(response.read())
            assert response.status == 200, body
            assert connection.sock is not None
            inode = _server_end(port, connection.sock.getsockname()[1])
            found.setdefault(_socket_owners(workers)[inode], []).append(body["items"])
    finally:
        for connection in connections:
            connection.close()
    return found


def test_fresh_connections_spread_over_the_workers_and_their_answers_agree(
    pair: tuple[ServerProcess, ServerProcess],
) -> None:
    _, two = pair
    # Both listen (after test_a_killed_worker_is_replaced, the replacement may still start).
    assert _wait(lambda: len(_listening(two)) == 2)
    with two.client() as client:
        listing = client.get(f"{P}/namespaces/default/pods/*/http_requests_per_second")
        pod = listing.json()["items"][0]["describedObject"]["name"]
    path = f"{P}/namespaces/default/pods/{pod}/http_requests_per_second"
    for _attempt in range(2):  # a demo tick between two answers moves every value once
        by_worker = _answers_by_worker(two, path, 32)
        answers = [items for answers in by_worker.values() for items in answers]
        if len({item[0]["timestamp"] for item in answers}) == 1:
            break
    assert len(by_worker) == 2, by_worker.keys()  # 32 connections, the kernel's hash: both
    assert set(by_worker) == _workers(two)
    assert all(items == answers[0] for items in answers), answers
    assert answers[0][0]["describedObject"]["name"] == pod


def test_a_stalled_main_process_does_not_stop_the_workers(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--demo-pods", "10", "--workers", "2")
    try:
        with server.client() as client:
            os.kill(server.pid, signal.SIGSTOP)
            try:
                answers = [
                    client.get(f"{P}/namespaces/default/pods/*/http_requests_per_second")
                    for _ in range(5)
                ]
                ready = client.get("/readyz")
            finally:
                os.kill(server.pid, signal.SIGCONT)
        assert [answer.status_code for answer in answers] == [200] * 5
        assert ready.status_code == 200  # the worker's own readiness
    finally:
        stop_server(server)


def test_sigterm_stops_every_process(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--demo-pods", "10", "--workers", "2")
    workers = _workers(server)
    assert len(workers) == 2
    stop_server(server, timeout=20)  # SIGTERM, as a kubelet stops the container
    assert server.process.returncode == 0
    for pid in workers:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in _state(pid), pid
    log = server.logs()
    assert "passed to the workers" in log
    assert "backends stopped" in log


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0].lower()
    except (FileNotFoundError, IndexError):
        return "zombie"


def _requests_to_the_api_server(
    tmp_path: Path, workers: int, expect_workers: int = 0
) -> tuple[dict[tuple[str, str], int], str]:
    """What one server with `--workers workers` asks the fake kube-apiserver for, while it
    serves, and its log; it runs `expect_workers` worker processes."""
    api = FakeKubeApiServer()
    api.apply("namespaces", {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "a"}})
    api.start()
    auth = FakeAuthApiServer()
    auth.tokens[TOKEN] = {"username": "hpa", "groups": ["system:authenticated"]}
    auth.allow_all = True
    auth.up()
    try:
        kubeconfig, auth_kubeconfig = tmp_path / "kubeconfig", tmp_path / "auth"
        write_kubeconfig(kubeconfig, api.url)
        auth.write_kubeconfig(auth_kubeconfig)
        server = start_server(
            tmp_path / "server",
            *serve_flags(kubeconfig, auth_kubeconfig),
            "--workers",
            str(workers),
            demo=False,
            timeout=60,
        )
        try:
            for _ in range(6):  # over new connections: every worker serves some
                with server.client(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
                    answer = client.get(f"{P}/namespaces/a/pods/*/kube_pod_info")
                    assert answer.status_code in (200, 404)
            assert len(_workers(server)) == expect_workers
        finally:
            stop_server(server)
        paths = ("/api/v1/pods", "/api/v1/nodes")
        counts = {(kind, p): api.count(kind, p) for kind in ("list", "watch") for p in paths}
        return counts, server.logs()
    finally:
        auth.down()
        api.close()


def test_a_backend_that_is_not_replicable_serves_from_one_process(tmp_path: Path) -> None:
    # A Deployment that sets --workers keeps running (no crash loop) with the Kubernetes
    # backend, whose watches and scrapes must not run once per worker.
    one, _ = _requests_to_the_api_server(tmp_path / "one", 1)
    three, log = _requests_to_the_api_server(tmp_path / "three", 3, expect_workers=0)
    line = (
        "--workers 3 ignored: serving from this one process, since worker processes need every "
        "backend to be replicable and this one is not: kubernetes (kubernetes) "
        '(measured: docs/performance.md, "Workers")'
    )
    assert sum(line in entry for entry in log.splitlines()) == 1
    assert one[("list", "/api/v1/pods")] >= 1
    assert one[("watch", "/api/v1/pods")] >= 1
    assert three == one


def test_a_killed_main_process_takes_the_workers_along(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--demo-pods", "10", "--workers", "2")
    workers = _workers(server)
    assert len(workers) == 2
    os.kill(server.pid, signal.SIGKILL)
    server.process.wait(timeout=10)
    assert _wait(lambda: all(_gone(pid) for pid in workers)), [_state(p) for p in workers]
    stop_server(server)


def _gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists() or "zombie" in _state(pid)
