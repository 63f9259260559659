"""`serve --workers N` through the real server process (custom_metrics_server.workers).

Every backend replicable (the demo): the same answers as one process for every URL form, fresh
connections spread over both workers and their answers for one pod agreeing, a killed worker
replaced, SIGTERM stopping every process, a stalled main process not stopping the answers (it
is out of the request path), and a killed main process taking the workers along.

A backend that is not replicable (the Kubernetes backend): one process serves, with the one
warning line, and the backends start once (the same lists, watches and kubelet scrapes on the
fake kube-apiserver as `--workers 1`). With `--workers-replicate-watches` two workers run it,
each with its own lists, watches and scrapes (twice those of one process), and answer a pod's
usage, an Object metric and `/metrics/resources` (the Lease held by the pod) as one process."""

from __future__ import annotations

import argparse
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
from tests.fakes.cluster_process import TOKEN, load_world, serve_flags, write_kubeconfig
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


def _bodies_by_process(
    server: ServerProcess, path: str, count: int, headers: dict[str, str] | None = None
) -> dict[int, list[tuple[int, bytes]]]:
    """`count` fresh connections, one GET each: (status, body) by the process that served
    them, a worker or, without workers, the server itself (found from /proc: nothing is
    exposed for it)."""
    port = int(server.url.rsplit(":", 1)[1])
    processes = _workers(server) or {server.pid}
    context = server.ssl_context()
    found: dict[int, list[tuple[int, bytes]]] = {}
    connections = []
    try:
        for _ in range(count):
            connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
            connections.append(connection)
            connection.request("GET", path, headers={"Accept": "*/*", **(headers or {})})
            response = connection.getresponse()
            answer = (response.status, response.read())
            assert connection.sock is not None
            inode = _server_end(port, connection.sock.getsockname()[1])
            found.setdefault(_socket_owners(processes)[inode], []).append(answer)
    finally:
        for connection in connections:
            connection.close()
    return found


def _answers_by_worker(server: ServerProcess, path: str, count: int) -> dict[int, list[Any]]:
    """The items of `count` answers on fresh connections, by the worker that served them."""
    found: dict[int, list[Any]] = {}
    for pid, answers in _bodies_by_process(server, path, count).items():
        for status, body in answers:
            assert status == 200, body
            found.setdefault(pid, []).append(orjson.loads(body)["items"])
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


#: What the HPA asks of the Kubernetes backend in the fake cluster (one node, two pods in
#: ns-0000): one pod's usage (from the kubelet's scrape) and an Object metric (the namespace).
KUBE_URLS = (
    f"{P}/namespaces/ns-0000/pods/p-00000-0/kube_running_pod_resource_usage"
    "?metricLabelSelector=resource%3Dmemory",
    f"{P}/namespaces/ns-0000/metrics/kube_pod_resource_request?metricLabelSelector=resource%3Dcpu",
    "/metrics/resources",
)


def _requests_to_the_api_server(
    tmp_path: Path, workers: int, *flags: str, expect_workers: int = 0
) -> tuple[dict[tuple[str, str], int], str, dict[str, bytes]]:
    """What one server with `--workers workers` (and `flags`) asks the fake kube-apiserver
    for while it serves, its log, and its answers to `KUBE_URLS` (the same from every
    process: asserted); it runs `expect_workers` worker processes. The scrape interval is an
    hour: each process scrapes the node once, when it is ready."""
    api = FakeKubeApiServer()
    load_world(
        api,
        argparse.Namespace(
            nodes=1, pods_per_node=2, namespaces=1, healthy_nodes=1, hanging_nodes=0
        ),
    )
    api.apply("namespaces", {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "a"}})
    api.start()
    auth = FakeAuthApiServer()
    auth.tokens[TOKEN] = {"username": "hpa", "groups": ["system:authenticated"]}
    auth.allow_all = True
    auth.up()
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    try:
        kubeconfig, auth_kubeconfig = tmp_path / "kubeconfig", tmp_path / "auth"
        write_kubeconfig(kubeconfig, api.url)
        auth.write_kubeconfig(auth_kubeconfig)
        server = start_server(
            tmp_path / "server",
            *serve_flags(kubeconfig, auth_kubeconfig),
            "--metric-resolution",
            "1h",
            "--workers",
            str(workers),
            *flags,
            demo=False,
            timeout=60,
        )
        try:
            processes = _workers(server) or {server.pid}
            assert len(_workers(server)) == expect_workers
            answers: dict[str, bytes] = {}

            def every_process_answers(path: str) -> bool:
                """Every process served the path (16 fresh connections) with 200 and the
                same body, usage included (its first scrape round is over)."""
                found = _bodies_by_process(server, path, 16, bearer)
                bodies = {_normal(body) for answers in found.values() for _, body in answers}
                statuses = {status for answers in found.values() for status, _ in answers}
                if set(found) != processes or statuses != {200} or len(bodies) != 1:
                    return False
                answers[path] = bodies.pop()
                return b'"items":[]' not in answers[path]

            for path in KUBE_URLS:
                assert _wait(lambda path=path: every_process_answers(path), 60), path
        finally:
            stop_server(server)
        paths = ("/api/v1/pods", "/api/v1/nodes")
        counts = {(kind, p): api.count(kind, p) for kind in ("list", "watch") for p in paths}
        counts["scrape", "node-00000"] = api.count(
            "proxy", "/api/v1/nodes/node-00000/proxy/metrics/resource"
        )
        return counts, server.logs(), answers
    finally:
        auth.down()
        api.close()


def _normal(body: bytes) -> bytes:
    """A JSON answer without the fields that move with the clock, or the text as it is."""
    try:
        return orjson.dumps(_strip_times(orjson.loads(body)), option=orjson.OPT_SORT_KEYS)
    except orjson.JSONDecodeError:
        return body


def test_a_backend_that_is_not_replicable_serves_from_one_process(tmp_path: Path) -> None:
    # A Deployment that sets --workers keeps running (no crash loop) with the Kubernetes
    # backend, whose watches and scrapes must not run once per worker unless asked to.
    one, _, answers = _requests_to_the_api_server(tmp_path / "one", 1)
    three, log, same = _requests_to_the_api_server(tmp_path / "three", 3, expect_workers=0)
    line = (
        "--workers 3 ignored: serving from this one process, since worker processes need every "
        "backend to be replicable and this one is not: kubernetes (kubernetes) "
        '(measured: docs/performance.md, "Workers")'
    )
    assert sum(line in entry for entry in log.splitlines()) == 1
    assert one[("list", "/api/v1/pods")] >= 1
    assert one[("watch", "/api/v1/pods")] >= 1
    assert one[("scrape", "node-00000")] == 1
    assert three == one
    assert same == answers


def test_replicated_watches_run_the_kubernetes_backend_in_every_worker(tmp_path: Path) -> None:
    # --workers-replicate-watches: each worker lists, watches and scrapes on its own (what
    # two replicas cost the API server and the kubelets) and answers as one process does;
    # with --leader-elect both workers campaign as the pod, so both serve the series.
    lease = ("--leader-elect", "--leader-elect-resource-namespace", "ns-0000")
    one, _, answers = _requests_to_the_api_server(tmp_path / "one", 1, *lease)
    two, log, same = _requests_to_the_api_server(
        tmp_path / "two", 2, "--workers-replicate-watches", *lease, expect_workers=2
    )
    assert (
        "--workers 2: 2 worker processes, each serving the whole API with its own backends; "
        "this process only supervises (every backend is replicable: kubernetes (kubernetes)); "
        "--workers-replicate-watches: every worker lists, watches and scrapes for kubernetes "
        "(kubernetes) on its own, 2 x what one process asks of the API server and the kubelets "
        "or pods"
    ) in log
    assert one[("watch", "/api/v1/pods")] >= 1
    assert one[("scrape", "node-00000")] == 1
    assert two == {key: 2 * count for key, count in one.items()}
    assert same == answers
    series = same[KUBE_URLS[2]]  # not the standby's empty body, from either worker
    assert b'kube_pod_resource_request{namespace="ns-0000",node="node-00000",pod="p-00000-0"' in (
        series
    )


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
