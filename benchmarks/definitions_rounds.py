"""Rounds of real source reads at MetricDefinition scale: N `prometheus` definitions in M
namespaces, each querying a real Prometheus every `--interval`, through a real kube-apiserver.

    python benchmarks/definitions_rounds.py                 # 10,000 in 3,000 namespaces
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

Prints a JSON summary and writes it under benchmarks/results/. Exits non-zero when a phase
fails (a definition never Ready, a wrong value): the `--smoke` is the check that the benchmark
still works.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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
from tests.prometheus.real_prometheus import Gauge, RealPrometheus  # noqa: E402

STATUS_PAGE = "/apis/custom.metrics.k8s.io/v1beta2/metric-status?format=json"
#: A failure limit for a broken run (never a speed target): seconds per 1,000 definitions.
SERVE_LIMIT_PER_1000 = 120.0


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


def definition(index: int, namespaces: int, interval: str) -> tuple[str, dict[str, Any]]:
    """Definition `index`: in namespace `index % namespaces`, a metric of its own there."""
    namespace = namespace_name(index % namespaces)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MetricDefinition",
        "metadata": {"name": f"queue-{index}", "namespace": namespace},
        "spec": {
            "metricName": f"queue_total_{index // namespaces}",
            "servedAs": {"type": "External"},
            "interval": interval,
            "source": {"type": "Prometheus", "prometheus": {"query": "sum(queue_depth)"}},
        },
    }
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/metricdefinitions", body


def start(workdir: Path, plane: ControlPlane, prometheus: RealPrometheus) -> ServerProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    backends = workdir / "backends.yaml"
    settings: dict[str, Any] = {
        "kubeconfig": str(plane.admin_kubeconfig),
        "writeStatus": False,
        "limits": {"minInterval": "5s"},
        "prometheus": {"servers": [{"name": "main", "url": prometheus.url}]},
    }
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


def check_values(found: list[dict[str, Any]], namespaces: int, queues: int) -> int:
    """How many Ready rows carry their namespace's sum; raises on a wrong one."""
    good = 0
    for row in found:
        if not row.get("ready"):
            continue
        index = int(str(row["namespace"]).rsplit("-", 1)[1])
        want = expected(index, queues)
        got = row.get("lastValue")
        if got is None or float(got) != want:  # the page may render it as a string
            raise RuntimeError(f"{row['namespace']}/{row['name']}: {got!r} != {want}")
        good += 1
    return good


def engine_queries(prometheus: RealPrometheus) -> float:
    """Prometheus's count of inner query evaluations (one per instant query)."""
    text = httpx.get(f"{prometheus.url}/metrics", timeout=30).text
    match = re.search(
        r'^prometheus_engine_query_duration_seconds_count\{slice="inner_eval"\} (\S+)$',
        text,
        re.MULTILINE,
    )
    if match is None:
        raise RuntimeError("Prometheus does not export its inner_eval count")
    return float(match.group(1))


def first_round(
    server: ServerProcess, prometheus: RealPrometheus, args: argparse.Namespace, launched: float
) -> dict[str, Any]:
    """Phase 1: from the launch until every definition is Ready with its namespace's sum."""
    assert prometheus.process is not None
    total = args.definitions
    limit = max(60.0, SERVE_LIMIT_PER_1000 * total / 1000)
    prom_cpu0, _ = proc(prometheus.process.pid)
    good = 0
    while time.perf_counter() - launched < limit:
        if server.process.poll() is not None:
            raise RuntimeError(f"the server exited\n{server.logs()[-4000:]}")
        try:
            good = check_values(rows(server), args.namespaces, args.queues)
        except httpx.HTTPError:
            good = 0  # not listening yet
        if good >= total:
            break
        time.sleep(0.5)
    else:
        raise RuntimeError(f"{good} of {total} definitions Ready after {limit:g} s")
    took = time.perf_counter() - launched
    server_cpu, rss = proc(server.pid)
    prom_cpu1, _ = proc(prometheus.process.pid)
    print(f"first round: every definition Ready with its sum {took:.1f} s after launch", flush=True)
    return {
        "first_round_s": round(took, 2),
        "first_round_server_cpu_s": round(server_cpu, 2),
        "first_round_prometheus_cpu_s": round(prom_cpu1 - prom_cpu0, 2),
        "rss_after_first_round_mib": round(rss, 1),
    }


def steady(
    server: ServerProcess, prometheus: RealPrometheus, args: argparse.Namespace
) -> dict[str, Any]:
    """Phase 2: `--minutes` of rounds; shares of a core and CPU per query."""
    assert prometheus.process is not None
    server0, _ = proc(server.pid)
    prom0, _ = proc(prometheus.process.pid)
    queries0 = engine_queries(prometheus)
    seconds = args.minutes * 60
    time.sleep(seconds)
    server1, rss = proc(server.pid)
    prom1, _ = proc(prometheus.process.pid)
    queries = engine_queries(prometheus) - queries0
    good = check_values(rows(server), args.namespaces, args.queues)
    if good != args.definitions:
        raise RuntimeError(f"{good} of {args.definitions} Ready with their sum at the end")
    if queries <= 0:
        raise RuntimeError("no query reached Prometheus")
    result = {
        "steady_seconds": seconds,
        "steady_queries": int(queries),
        "steady_queries_per_s": round(queries / seconds, 1),
        "steady_server_cpu_percent": round((server1 - server0) / seconds * 100, 1),
        "steady_prometheus_cpu_percent": round((prom1 - prom0) / seconds * 100, 1),
        "server_cpu_per_query_us": round((server1 - server0) / queries * 1e6),
        "prometheus_cpu_per_query_us": round((prom1 - prom0) / queries * 1e6),
        "steady_rss_mib": round(rss, 1),
    }
    print(
        f"steady: {queries:.0f} queries in {seconds:g} s; server {result['steady_server_cpu_percent']}%"
        f" ({result['server_cpu_per_query_us']} µs a query), Prometheus "
        f"{result['steady_prometheus_cpu_percent']}% ({result['prometheus_cpu_per_query_us']} µs)",
        flush=True,
    )
    return result


def run(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    """Every phase on one control plane and one Prometheus; the figures."""
    spaces = args.namespaces
    result: dict[str, Any] = {
        "definitions": args.definitions,
        "namespaces": spaces,
        "series": spaces * args.queues,
        "interval": args.interval,
        "machine": f"{os.cpu_count()} CPU {platform.machine()}, Python {platform.python_version()}",
        "load_average_start": os.getloadavg(),
    }
    (base / "prometheus").mkdir(parents=True)
    # Only the minutes the run reads: 5 min before the start, 1 h after.
    prometheus = RealPrometheus(
        base / "prometheus", series(spaces, args.queues), before=300, after=3600
    )
    prometheus.backfill()
    prometheus.start()
    plane = ControlPlane.start(base / "plane")
    try:
        plane.kubectl("apply", "--server-side", "--field-manager=bench", "-k", str(CRD_DIR))
        plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{CRD_NAME}")
        namespaces = [
            ("/api/v1/namespaces", {"metadata": {"name": namespace_name(i)}}) for i in range(spaces)
        ]
        asyncio.run(post_all(plane, namespaces, args.concurrency))
        posts = [definition(i, spaces, args.interval) for i in range(args.definitions)]
        took = asyncio.run(post_all(plane, posts, args.concurrency))
        print(f"{args.definitions} definitions created in {took:.1f} s", flush=True)
        launched = time.perf_counter()
        server = start(base / "server", plane, prometheus)
        try:
            result.update(first_round(server, prometheus, args, launched))
            result.update(steady(server, prometheus, args))
        finally:
            stop_server(server)
    finally:
        plane.stop()
        prometheus.stop()
    result["load_average_end"] = os.getloadavg()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--definitions", type=int, default=10_000)
    parser.add_argument("--namespaces", type=int, default=3_000)
    parser.add_argument("--queues", type=int, default=3, help="series per namespace")
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
        name = f"definitions-rounds-{time.strftime('%Y%m%dT%H%M%S')}.json"
        (out / name).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
