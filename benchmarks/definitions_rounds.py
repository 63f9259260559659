"""Rounds of real source reads at MetricDefinition scale: N `prometheus` definitions in M
namespaces, each querying a real Prometheus every `--interval`, or N `pods` definitions each
scraping its own pod's `/metrics`, through a real kube-apiserver.

    python benchmarks/definitions_rounds.py                 # 10,000 in 3,000 namespaces
    python benchmarks/definitions_rounds.py --source pods   # 10,000 pods definitions, 10,000 pods
    python benchmarks/definitions_rounds.py --smoke         # 200 in 60 (about a minute)

The control-plane tier's machinery (tests/controlplane/cluster.py: real etcd + kube-apiserver)
with the CRD of manifests/crds, and a real Prometheus (tests/prometheus/real_prometheus.py)
backfilled with `--queues` constant `queue_depth` series per namespace. Definition `i` lives in
namespace `i % M`, is External there, and its query is `sum(queue_depth)`, which the server
confines to its namespace (`promql_scope`), so its value is the sum of that namespace's series
only: every definition's value is checked against it (a confinement failure at scale would
show as a wrong sum).

1. **First round**: the definitions exist before the server starts (`writeStatus: false`, so
   only the reads are measured); from its launch until every definition is Ready with the right
   value, each having made its first query (all due at once, `CONCURRENCY` in flight): the
   round's wall time, and the CPU of the server and of Prometheus in it.
2. **Steady rounds**, `--minutes`: one query per definition every `--interval` (spread by when
   each was first read): the server's and Prometheus's share of a core, the queries made (the
   server's own counter of source refreshes is not exported, so the count is Prometheus's
   `prometheus_engine_query_duration_seconds_count` for the inner evaluation) and the CPU per
   query on each side.

With `--source pods`, definition `i` selects the one pod `app=def-<i>` of its namespace (port
`metrics`, gauge `queue_depth`): N pods are created and set Running as a kubelet would (no
kubelet runs), each at its own loopback address `127.x.y.z`, where one exporter process (bound
to every loopback address) answers a value derived from the address: each definition's value is
checked against its pod's, and the exporter counts the scrapes (the steady phase's reads).

Prints a JSON summary and writes it under benchmarks/results/. Exits non-zero when a phase
fails (a definition never Ready, a wrong value): the `--smoke` is the check that the benchmark
still works.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import yaml  # noqa: E402

from benchmarks.definitions_scale import namespace_name, post_all, proc  # noqa: E402
from custom_metrics_server.testing.server_process import (  # noqa: E402
    ServerProcess,
    start_server,
    stop_server,
)
from tests.controlplane.cluster import ControlPlane  # noqa: E402
from tests.controlplane.test_metric_definitions import (  # noqa: E402
    CRD_DIR,
    CRD_NAME,
    GROUP,
    VERSION,
)
from tests.prometheus.real_prometheus import Gauge, RealPrometheus, free_port  # noqa: E402

STATUS_PAGE = "/apis/custom.metrics.k8s.io/v1beta2/metric-status?format=json"
#: A failure limit for a broken run (never a speed target): seconds per 1,000 definitions.
SERVE_LIMIT_PER_1000 = 120.0
#: The pods' container port, where the exporter listens on every loopback address.
EXPORTER_PORT = free_port()


def export(port: int, scrapes: Any) -> None:
    """The exporter process: HTTP/1.1 with keep-alive on `port` of every local address, each
    answer a gauge whose value depends on the address the connection reached."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        address = writer.get_extra_info("sockname")[0]
        body = f"# TYPE queue_depth gauge\nqueue_depth {pod_value(address)}\n".encode()
        head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
        )
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                with scrapes.get_lock():
                    scrapes.value += 1
                writer.write(head + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(serve, "0.0.0.0", port, backlog=4096)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


async def apply_all(
    plane: ControlPlane, items: list[tuple[str, dict[str, Any]]], concurrency: int
) -> float:
    """Server-side apply (PATCH) of each (path, body), `concurrency` in flight; seconds taken."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    verify = plane.ssl_context(plane.pki.admin)
    pending = iter(items)
    started = time.perf_counter()
    headers = {"content-type": "application/apply-patch+yaml"}
    async with httpx.AsyncClient(
        base_url=plane.url, verify=verify, limits=limits, timeout=60
    ) as client:

        async def worker() -> None:
            for path, body in pending:
                for attempt in range(10):
                    response = await client.patch(path, content=json.dumps(body), headers=headers)
                    if response.status_code < 300:
                        break
                    if response.status_code != 429 and response.status_code < 500:
                        raise RuntimeError(f"PATCH {path}: {response.status_code} {response.text}")
                    await asyncio.sleep(0.2 * (attempt + 1))
                else:
                    raise RuntimeError(f"PATCH {path}: still {response.status_code}")

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


def queue_value(namespace_index: int, queue: int) -> float:
    """The constant value of queue `queue` of namespace `namespace_index`."""
    return float((namespace_index * 7 + queue * 3) % 101 + 1)


def expected(namespace_index: int, queues: int) -> float:
    """What a confined `sum(queue_depth)` answers in that namespace."""
    return sum(queue_value(namespace_index, queue) for queue in range(queues))


def series(namespaces: int, queues: int) -> list[Gauge | Any]:
    """The Prometheus series: `queues` gauges per namespace."""
    return [
        Gauge("queue_depth", {"namespace": namespace_name(n), "queue": f"q{q}"}, queue_value(n, q))
        for n in range(namespaces)
        for q in range(queues)
    ]


def pod_address(index: int) -> str:
    """Pod `index`'s loopback address: 127.0.0.2 on, each octet 1-254 (no network or
    broadcast-looking address, and never 127.0.0.1)."""
    number = index + 1
    number = (number // 254) * 256 + number % 254 + 1  # skip octets 0 and 255
    return f"127.{number >> 16 & 255}.{number >> 8 & 255}.{number & 255}"


def pod_value(address: str) -> float:
    """What the exporter answers at `address`."""
    return float(sum(int(part) for part in address.split(".")[1:]) % 97 + 1)


def pod(index: int, namespaces: int) -> tuple[str, dict[str, Any]]:
    """Pod `index` in definition `index`'s namespace, selected by it alone."""
    namespace = namespace_name(index % namespaces)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"app-{index}",
            "namespace": namespace,
            "labels": {"app": f"def-{index}"},
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "example.invalid/app",
                    "ports": [{"name": "metrics", "containerPort": EXPORTER_PORT}],
                }
            ]
        },
    }
    return f"/api/v1/namespaces/{namespace}/pods", body


def running(index: int, namespaces: int) -> tuple[str, dict[str, Any]]:
    """The status a kubelet would write for pod `index` (server-side apply of `status`)."""
    namespace = namespace_name(index % namespaces)
    address = pod_address(index)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"app-{index}", "namespace": namespace},
        "status": {"phase": "Running", "podIP": address, "podIPs": [{"ip": address}]},
    }
    path = f"/api/v1/namespaces/{namespace}/pods/app-{index}/status"
    return f"{path}?fieldManager=bench-kubelet&force=true", body


def definition(
    index: int, namespaces: int, interval: str, source: str = "prometheus"
) -> tuple[str, dict[str, Any]]:
    """Definition `index`: in namespace `index % namespaces`, a metric of its own there."""
    namespace = namespace_name(index % namespaces)
    if source == "pods":
        spec = {
            "type": "Pods",
            "pods": {
                "selector": {"matchLabels": {"app": f"def-{index}"}},
                "port": "metrics",
                "metric": "queue_depth",
            },
        }
    else:
        spec = {"type": "Prometheus", "prometheus": {"query": "sum(queue_depth)"}}
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MetricDefinition",
        "metadata": {"name": f"queue-{index}", "namespace": namespace},
        "spec": {
            "metricName": f"queue_total_{index // namespaces}",
            "servedAs": {"type": "External"},
            "interval": interval,
            "source": spec,
        },
    }
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/metricdefinitions", body


class Reads:
    """What the definitions read (Prometheus, or the pods' exporter): its process for CPU, and
    how many reads it has answered so far."""

    def __init__(self, pid: int, count: Any, kind: str) -> None:
        self.pid = pid
        self.count = count
        self.kind = kind


def start(workdir: Path, plane: ControlPlane, prometheus_url: str | None) -> ServerProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    backends = workdir / "backends.yaml"
    settings: dict[str, Any] = {
        "kubeconfig": str(plane.admin_kubeconfig),
        "writeStatus": False,
        # One pod per definition: the per-namespace default (100 targets, 50 definitions)
        # holds at 10,000 in 3,000 namespaces; the shortest interval is the smoke's.
        "limits": {"minInterval": "5s"},
    }
    if prometheus_url is not None:
        settings["prometheus"] = {"servers": [{"name": "main", "url": prometheus_url}]}
    entry = {"name": "metric-definitions", "type": "metric-definitions", "settings": settings}
    backends.write_text(yaml.safe_dump({"backends": [entry]}))
    return start_server(workdir, "--backends-config", str(backends), timeout=120, ready=False)


def rows(server: ServerProcess) -> list[dict[str, Any]]:
    """The metric status page's definition rows."""
    with server.client(timeout=60) as client:
        response = client.get(STATUS_PAGE)
        if response.status_code != 200:
            raise RuntimeError(f"metric status page: {response.status_code} {response.text[:500]}")
        found: list[dict[str, Any]] = response.json().get("definitions", [])
    return found


def want(row: dict[str, Any], args: argparse.Namespace) -> float:
    """A definition's right value: its namespace's sum, or its own pod's gauge."""
    if args.source == "pods":
        return pod_value(pod_address(int(str(row["name"]).rsplit("-", 1)[1])))
    return expected(int(str(row["namespace"]).rsplit("-", 1)[1]), args.queues)


def check_values(found: list[dict[str, Any]], args: argparse.Namespace) -> int:
    """How many Ready rows carry their right value; raises on a wrong one."""
    good = 0
    for row in found:
        if not row.get("ready"):
            continue
        right = want(row, args)
        got = row.get("lastValue")
        if got is None or float(got) != right:  # the page may render it as a string
            raise RuntimeError(f"{row['namespace']}/{row['name']}: {got!r} != {right}")
        good += 1
    return good


def engine_queries(url: str) -> float:
    """Prometheus's count of inner query evaluations (one per instant query)."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    match = re.search(
        r'^prometheus_engine_query_duration_seconds_count\{slice="inner_eval"\} (\S+)$',
        text,
        re.MULTILINE,
    )
    if match is None:
        raise RuntimeError("Prometheus does not export its inner_eval count")
    return float(match.group(1))


def first_round(
    server: ServerProcess, reads: Reads, args: argparse.Namespace, launched: float
) -> dict[str, Any]:
    """Phase 1: from the launch until every definition is Ready with its right value."""
    total = args.definitions
    limit = max(60.0, SERVE_LIMIT_PER_1000 * total / 1000)
    read_cpu0, _ = proc(reads.pid)
    good = 0
    while time.perf_counter() - launched < limit:
        if server.process.poll() is not None:
            raise RuntimeError(f"the server exited\n{server.logs()[-4000:]}")
        try:
            good = check_values(rows(server), args)
        except httpx.HTTPError:
            good = 0  # not listening yet
        if good >= total:
            break
        time.sleep(0.5)
    else:
        stuck = [row for row in rows(server) if not row.get("ready")][:3]
        raise RuntimeError(
            f"{good} of {total} definitions Ready after {limit:g} s: {stuck}\n"
            f"{server.logs()[-3000:]}"
        )
    took = time.perf_counter() - launched
    server_cpu, rss = proc(server.pid)
    read_cpu1, _ = proc(reads.pid)
    print(f"first round: every definition Ready and right {took:.1f} s after launch", flush=True)
    return {
        "first_round_s": round(took, 2),
        "first_round_server_cpu_s": round(server_cpu, 2),
        f"first_round_{reads.kind}_cpu_s": round(read_cpu1 - read_cpu0, 2),
        "rss_after_first_round_mib": round(rss, 1),
    }


def steady(server: ServerProcess, reads: Reads, args: argparse.Namespace) -> dict[str, Any]:
    """Phase 2: `--minutes` of rounds; shares of a core and CPU per read."""
    server0, _ = proc(server.pid)
    read0, _ = proc(reads.pid)
    count0 = reads.count()
    seconds = args.minutes * 60
    time.sleep(seconds)
    server1, rss = proc(server.pid)
    read1, _ = proc(reads.pid)
    count = reads.count() - count0
    good = check_values(rows(server), args)
    if good != args.definitions:
        raise RuntimeError(f"{good} of {args.definitions} Ready and right at the end")
    if count <= 0:
        raise RuntimeError(f"no read reached the {reads.kind}")
    kind = reads.kind
    result = {
        "steady_seconds": seconds,
        "steady_reads": int(count),
        "steady_reads_per_s": round(count / seconds, 1),
        "steady_server_cpu_percent": round((server1 - server0) / seconds * 100, 1),
        f"steady_{kind}_cpu_percent": round((read1 - read0) / seconds * 100, 1),
        "server_cpu_per_read_us": round((server1 - server0) / count * 1e6),
        f"{kind}_cpu_per_read_us": round((read1 - read0) / count * 1e6),
        "steady_rss_mib": round(rss, 1),
    }
    print(
        f"steady: {count:.0f} reads in {seconds:g} s; server {result['steady_server_cpu_percent']}%"
        f" ({result['server_cpu_per_read_us']} µs a read), {kind} "
        f"{result[f'steady_{kind}_cpu_percent']}% ({result[f'{kind}_cpu_per_read_us']} µs)",
        flush=True,
    )
    return result


def make_pods(plane: ControlPlane, args: argparse.Namespace) -> None:
    """`--source pods`: one pod per definition in its namespace, Running at its address."""
    spaces, total = args.namespaces, args.definitions
    # What a pod's admission needs in a namespace (ControlPlane.create_namespace's).
    needs = [
        (
            f"/api/v1/namespaces/{namespace_name(i)}/{kind}",
            {"metadata": {"name": name, "namespace": namespace_name(i)}},
        )
        for i in range(spaces)
        for kind, name in (
            ("serviceaccounts", "default"),
            ("configmaps", "openshift-service-ca.crt"),
        )
    ]
    asyncio.run(post_all(plane, needs, args.concurrency))
    took = asyncio.run(post_all(plane, [pod(i, spaces) for i in range(total)], args.concurrency))
    took += asyncio.run(
        apply_all(plane, [running(i, spaces) for i in range(total)], args.concurrency)
    )
    print(f"{total} pods created and Running in {took:.1f} s", flush=True)


def run(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    """Every phase on one control plane and one Prometheus or exporter; the figures."""
    spaces, total = args.namespaces, args.definitions
    result: dict[str, Any] = {
        "source": args.source,
        "definitions": total,
        "namespaces": spaces,
        "interval": args.interval,
        "machine": f"{os.cpu_count()} CPU {platform.machine()}, Python {platform.python_version()}",
        "load_average_start": os.getloadavg(),
    }
    prometheus: RealPrometheus | None = None
    exporter: multiprocessing.Process | None = None
    if args.source == "pods":
        scrapes = multiprocessing.Value("q", 0)
        exporter = multiprocessing.Process(
            target=export, args=(EXPORTER_PORT, scrapes), daemon=True
        )
        exporter.start()
        assert exporter.pid is not None
        reads = Reads(exporter.pid, lambda: float(scrapes.value), "exporter")
    else:
        result["series"] = spaces * args.queues
        (base / "prometheus").mkdir(parents=True)
        # Only the minutes the run reads: 5 min before the start, 1 h after.
        prometheus = RealPrometheus(
            base / "prometheus", series(spaces, args.queues), before=300, after=3600
        )
        prometheus.backfill()
        prometheus.start()
        assert prometheus.process is not None
        url = prometheus.url
        reads = Reads(prometheus.process.pid, lambda: engine_queries(url), "prometheus")
    plane = ControlPlane.start(base / "plane")
    try:
        plane.kubectl("apply", "--server-side", "--field-manager=bench", "-k", str(CRD_DIR))
        plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{CRD_NAME}")
        namespaces = [
            ("/api/v1/namespaces", {"metadata": {"name": namespace_name(i)}}) for i in range(spaces)
        ]
        asyncio.run(post_all(plane, namespaces, args.concurrency))
        if args.source == "pods":
            make_pods(plane, args)
        posts = [definition(i, spaces, args.interval, args.source) for i in range(total)]
        took = asyncio.run(post_all(plane, posts, args.concurrency))
        print(f"{total} definitions created in {took:.1f} s", flush=True)
        launched = time.perf_counter()
        server = start(base / "server", plane, None if prometheus is None else prometheus.url)
        try:
            result.update(first_round(server, reads, args, launched))
            result.update(steady(server, reads, args))
        finally:
            stop_server(server)
    finally:
        plane.stop()
        if prometheus is not None:
            prometheus.stop()
        if exporter is not None:
            exporter.terminate()
    result["load_average_end"] = os.getloadavg()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", choices=("prometheus", "pods"), default="prometheus")
    parser.add_argument("--definitions", type=int, default=10_000)
    parser.add_argument("--namespaces", type=int, default=3_000)
    parser.add_argument("--queues", type=int, default=3, help="series per namespace (prometheus)")
    parser.add_argument("--interval", default="30s", help="each definition's interval")
    parser.add_argument("--minutes", type=float, default=2, help="steady rounds observed")
    parser.add_argument("--concurrency", type=int, default=32, help="POSTs in flight")
    parser.add_argument("--smoke", action="store_true", help="200 in 60 namespaces, 0.5 min")
    args = parser.parse_args()
    if args.smoke:
        args.definitions, args.namespaces, args.minutes, args.interval = 200, 60, 0.5, "10s"
    with tempfile.TemporaryDirectory(prefix="definitions-rounds-") as tmp:
        try:
            result = run(args, Path(tmp))
        except Exception as err:  # the smoke's failure: a message and a non-zero exit
            print(f"FAILED: {err}", file=sys.stderr)
            return 1
    print(json.dumps(result, indent=2))
    if not args.smoke:
        out = ROOT / "benchmarks" / "results"
        out.mkdir(exist_ok=True)
        name = f"definitions-rounds-{args.source}-{time.strftime('%Y%m%dT%H%M%S')}.json"
        (out / name).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
