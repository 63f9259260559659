"""MetricDefinitions at scale through a real kube-apiserver: N definitions in M namespaces
listed and watched by the real server process, their statuses written back.

    python benchmarks/definitions_scale.py                 # 10,000 in 3,000 namespaces
    python benchmarks/definitions_scale.py --smoke         # 200 in 60 (about a minute)
    python benchmarks/definitions_scale.py --definitions 2000 --namespaces 600 --minutes 3

The control-plane tier's machinery (tests/controlplane/cluster.py: real etcd + kube-apiserver
from the unpacked binaries) with the CRD of manifests/crds. Every definition is a schedule
source (one window all day: no exporter, no Prometheus, no background work of its own; its
refresh is a computation in memory), External in its namespace, its own metric name there.

1. **Create**: the namespaces, then the definitions, by parallel POSTs over one HTTP/1.1
   client (`--concurrency` in flight); the API server's creation rate is printed.
2. **Watch ingest**: with the namespaces but no definitions yet, the server starts with the
   backend (`writeStatus: false`), its RSS is taken (the baseline); then the definitions are
   created while it watches: time from the first POST until the metric status page shows every
   definition Ready (each ADDED event through the catalog, a value computed by the tick).
3. **List ingest**: that server stopped, a new one starts with `writeStatus: true` over the N
   existing definitions: time from its launch until `/readyz` (the list done) and until the
   metric status page shows every definition Ready; its RSS then, and per definition over the
   baseline.
4. **One round of queries**: one External GET per definition (`--concurrency` in flight, one
   client), the server's CPU per query.
5. **Steady state**, `--minutes` minutes: the server's CPU (the tick's refreshes, one per
   definition every 30 s, the default interval, plus the status writer's rounds and writes),
   and the status writes per minute as kube-apiserver's audit log records them
   (`update`/`patch` of `metricdefinitions/status`), and the Events created.

Prints a JSON summary and writes it under benchmarks/results/. Exits non-zero when a phase
fails (a definition never served, a creation refused): the `--smoke` is the check that the
benchmark still works.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import yaml  # noqa: E402

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

STATUS_PAGE = "/apis/custom.metrics.k8s.io/v1beta2/metric-status?format=json"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1/namespaces"
TICKS = os.sysconf("SC_CLK_TCK")
#: A failure limit for a broken run (never a speed target): seconds per 1,000 definitions.
SERVE_LIMIT_PER_1000 = 120.0


def namespace_name(index: int) -> str:
    return f"scale-{index:05d}"


def definition(index: int, namespaces: int) -> tuple[str, dict[str, Any]]:
    """Definition `index`: in namespace `index % namespaces`, a metric of its own there."""
    namespace = namespace_name(index % namespaces)
    window = {"start": "00:00", "end": "24:00", "value": index % 100 + 1}
    return namespace, {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MetricDefinition",
        "metadata": {"name": f"load-{index}", "namespace": namespace},
        "spec": {
            "metricName": f"expected_load_{index // namespaces}",
            "servedAs": {"type": "External"},
            "source": {"type": "Schedule", "schedule": {"timeZone": "UTC", "windows": [window]}},
        },
    }


async def post_all(
    plane: ControlPlane, items: list[tuple[str, dict[str, Any]]], concurrency: int
) -> float:
    """POST each (path, body) with `concurrency` in flight over one client; the seconds taken.
    429 and 5xx are retried (the API server's own back-pressure); any other refusal raises."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    verify = plane.ssl_context(plane.pki.admin)
    queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
    for item in items:
        queue.put_nowait(item)
    started = time.perf_counter()
    async with httpx.AsyncClient(
        base_url=plane.url, verify=verify, limits=limits, timeout=60
    ) as client:

        async def worker() -> None:
            while not queue.empty():
                path, body = queue.get_nowait()
                for attempt in range(10):
                    response = await client.post(path, json=body)
                    if response.status_code < 300 or response.status_code == 409:
                        break
                    if response.status_code != 429 and response.status_code < 500:
                        raise RuntimeError(f"POST {path}: {response.status_code} {response.text}")
                    await asyncio.sleep(0.2 * (attempt + 1))
                else:
                    raise RuntimeError(f"POST {path}: still {response.status_code}")

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


def proc(pid: int) -> tuple[float, float]:
    """(CPU seconds user+system, RSS MiB) of process `pid`."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICKS
    rss_kb = next(
        int(line.split()[1])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("VmRSS:")
    )
    return cpu, rss_kb / 1024


def start(workdir: Path, plane: ControlPlane, write_status: bool) -> ServerProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    backends = workdir / "backends.yaml"
    settings: dict[str, Any] = {
        "kubeconfig": str(plane.admin_kubeconfig),
        "writeStatus": write_status,
    }
    entry = {"name": "metric-definitions", "type": "metric-definitions", "settings": settings}
    backends.write_text(yaml.safe_dump({"backends": [entry]}))
    return start_server(workdir, "--backends-config", str(backends), timeout=120, ready=False)


def ready_count(server: ServerProcess) -> int:
    """Definitions the metric status page shows Ready (served, with a value)."""
    with server.client(timeout=60) as client:
        response = client.get(STATUS_PAGE)
        if response.status_code != 200:
            raise RuntimeError(f"metric status page: {response.status_code} {response.text[:500]}")
        page = response.json()
    return sum(1 for row in page.get("definitions", []) if row.get("ready"))


def wait_served(server: ServerProcess, total: int, since: float) -> float:
    """Seconds from `since` (perf_counter) until every definition is Ready; raises past the
    failure limit."""
    limit = max(60.0, SERVE_LIMIT_PER_1000 * total / 1000)
    count = 0
    while time.perf_counter() - since < limit:
        if server.process.poll() is not None:
            raise RuntimeError(f"the server exited\n{server.logs()[-4000:]}")
        count = ready_count(server)
        if count >= total:
            return time.perf_counter() - since
        time.sleep(0.5)
    raise RuntimeError(f"{count} of {total} definitions Ready after {limit:g} s")


def wait_ready(server: ServerProcess, since: float) -> float:
    with server.client() as client:
        while time.perf_counter() - since < 300:
            if client.get("/readyz").status_code == 200:
                return time.perf_counter() - since
            time.sleep(0.05)
    raise RuntimeError("the server never became ready")


async def query_round(server: ServerProcess, total: int, namespaces: int, concurrency: int) -> int:
    """One External GET per definition; how many answered 200 with one value."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    good = 0
    indices = iter(range(total))
    async with httpx.AsyncClient(
        base_url=server.url, verify=server.ssl_context(), limits=limits, timeout=60
    ) as client:

        async def worker() -> None:
            nonlocal good
            for index in indices:
                namespace = namespace_name(index % namespaces)
                path = f"{EXTERNAL}/{namespace}/expected_load_{index // namespaces}"
                response = await client.get(path)
                if response.status_code == 200 and len(response.json()["items"]) == 1:
                    good += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return good


def status_writes(plane: ControlPlane, since: datetime) -> tuple[Counter[int], int]:
    """Status writes of metricdefinitions by minute since `since` (audit log), and Events
    created since then."""
    minutes: Counter[int] = Counter()
    events = 0
    for event in plane.audit_events():
        ref = event.get("objectRef") or {}
        stamp = event.get("requestReceivedTimestamp")
        if not stamp or event.get("stage") != "ResponseComplete":
            continue
        at = datetime.fromisoformat(stamp)
        if at < since:
            continue
        verb = event.get("verb")
        if (
            ref.get("resource") == "metricdefinitions"
            and ref.get("subresource") == "status"
            and verb in ("update", "patch")
        ):
            minutes[int((at - since).total_seconds() // 60)] += 1
        elif ref.get("resource") == "events" and verb == "create":
            events += 1
    return minutes, events


def watch_phase(
    plane: ControlPlane, args: argparse.Namespace, workdir: Path, result: dict[str, Any]
) -> float:
    """Phase 2: a server over no definitions (its RSS, the baseline, returned), then the
    definitions created under it until each is Ready."""
    total, spaces = args.definitions, args.namespaces
    watching = start(workdir, plane, write_status=False)
    try:
        wait_ready(watching, time.perf_counter())
        time.sleep(3)
        cpu0, rss_empty = proc(watching.pid)
        result["rss_empty_mib"] = round(rss_empty, 1)
        posts = []
        for index in range(total):
            namespace, body = definition(index, spaces)
            path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/metricdefinitions"
            posts.append((path, body))
        began = time.perf_counter()
        took = asyncio.run(post_all(plane, posts, args.concurrency))
        result["create_definitions_s"] = round(took, 2)
        result["create_rate_per_s"] = round(total / took, 1)
        print(f"{total} definitions created in {took:.1f} s ({total / took:.0f}/s)", flush=True)
        served = wait_served(watching, total, began)
        cpu1, rss = proc(watching.pid)
        result["watch_ingest_s"] = round(served, 2)
        result["watch_lag_after_last_post_s"] = round(served - took, 2)
        result["watch_ingest_server_cpu_s"] = round(cpu1 - cpu0, 2)
        result["watch_rss_mib"] = round(rss, 1)
        print(
            f"watch: every definition Ready {served:.1f} s after the first POST; "
            f"server CPU {cpu1 - cpu0:.1f} s",
            flush=True,
        )
    finally:
        stop_server(watching)
    return rss_empty


def list_phase(
    server: ServerProcess, launched: float, rss_empty: float, total: int, result: dict[str, Any]
) -> None:
    """Phase 3: the new server's list until /readyz and until every definition is Ready."""
    result["list_ready_s"] = round(wait_ready(server, launched), 2)
    served = wait_served(server, total, launched)
    cpu_served, rss = proc(server.pid)
    result["list_ingest_s"] = round(served, 2)
    result["list_ingest_server_cpu_s"] = round(cpu_served, 2)
    result["list_rss_mib"] = round(rss, 1)
    # What one poll of the metric status page (every definition's row) costs the server: the
    # ingest's CPU above includes a poll every 0.5 s.
    ready_count(server)
    cpu_after, _ = proc(server.pid)
    result["status_page_server_cpu_ms"] = round((cpu_after - cpu_served) * 1000)
    per = (rss - rss_empty) * 1024 * 1024 / total
    result["rss_per_definition_bytes"] = round(per)
    print(
        f"list: /readyz {result['list_ready_s']} s, every definition Ready {served:.1f} s "
        f"after launch; RSS {rss_empty:.0f} -> {rss:.0f} MiB ({per:.0f} B a definition)",
        flush=True,
    )


def query_phase(server: ServerProcess, args: argparse.Namespace, result: dict[str, Any]) -> None:
    """Phase 4: one round of External queries, one per definition."""
    total = args.definitions
    cpu0, _ = proc(server.pid)
    began = time.perf_counter()
    good = asyncio.run(query_round(server, total, args.namespaces, args.concurrency))
    took = time.perf_counter() - began
    cpu1, _ = proc(server.pid)
    if good != total:
        raise RuntimeError(f"{good} of {total} External queries answered one value")
    result["query_round_s"] = round(took, 2)
    result["query_server_cpu_us"] = round((cpu1 - cpu0) / total * 1e6)
    print(f"queries: {total} in {took:.1f} s, {result['query_server_cpu_us']} µs CPU each")


def steady_phase(
    plane: ControlPlane,
    server: ServerProcess,
    minutes: float,
    since: tuple[datetime, float],
    result: dict[str, Any],
) -> None:
    """Phase 5: the tick's refreshes and the status writer for `minutes`; the status writes
    counted from the server's launch (`since`: wall clock, perf_counter)."""
    cpu0, _ = proc(server.pid)
    time.sleep(minutes * 60)
    cpu1, rss_end = proc(server.pid)
    seconds = minutes * 60
    result["steady_server_cpu_percent"] = round((cpu1 - cpu0) / seconds * 100, 1)
    result["steady_rss_mib"] = round(rss_end, 1)
    per_minute, events = status_writes(plane, since[0])
    last = max(per_minute) if per_minute else 0
    # Minutes since the server's launch; the last one is cut short by the end.
    result["status_writes_by_minute"] = [per_minute[m] for m in range(last + 1)]
    result["status_write_seconds_observed"] = round(time.perf_counter() - since[1], 1)
    result["events_created"] = events
    if not per_minute:
        raise RuntimeError("no status write reached the API server")
    print(
        f"steady: {result['steady_server_cpu_percent']}% of a core over {seconds:g} s; "
        f"status writes by minute {result['status_writes_by_minute']}; {events} Events",
        flush=True,
    )


def run(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    """Every phase on one control plane; the figures."""
    spaces = args.namespaces
    result: dict[str, Any] = {
        "definitions": args.definitions,
        "namespaces": spaces,
        "machine": f"{os.cpu_count()} CPU {platform.machine()}, Python {platform.python_version()}",
        "load_average_start": os.getloadavg(),
    }
    plane = ControlPlane.start(base / "plane")
    try:
        plane.kubectl("apply", "--server-side", "--field-manager=bench", "-k", str(CRD_DIR))
        plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{CRD_NAME}")
        namespaces = [
            ("/api/v1/namespaces", {"metadata": {"name": namespace_name(i)}}) for i in range(spaces)
        ]
        took = asyncio.run(post_all(plane, namespaces, args.concurrency))
        result["create_namespaces_s"] = round(took, 2)
        print(f"{spaces} namespaces created in {took:.1f} s", flush=True)
        rss_empty = watch_phase(plane, args, base / "watching", result)
        since = (datetime.now().astimezone(), time.perf_counter())
        server = start(base / "listing", plane, write_status=True)
        try:
            list_phase(server, since[1], rss_empty, args.definitions, result)
            query_phase(server, args, result)
            steady_phase(plane, server, args.minutes, since, result)
        finally:
            stop_server(server)
    finally:
        plane.stop()
    result["load_average_end"] = os.getloadavg()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--definitions", type=int, default=10_000)
    parser.add_argument("--namespaces", type=int, default=3_000)
    parser.add_argument("--minutes", type=float, default=3, help="steady state observed")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--smoke", action="store_true", help="200 in 60 namespaces, 0.5 min")
    args = parser.parse_args()
    if args.smoke:
        args.definitions, args.namespaces, args.minutes = 200, 60, 0.5
    with tempfile.TemporaryDirectory(prefix="definitions-scale-") as tmp:
        try:
            result = run(args, Path(tmp))
        except Exception as err:  # the smoke's failure: a message and a non-zero exit
            print(f"FAILED: {err}", file=sys.stderr)
            return 1
    print(json.dumps(result, indent=2))
    if not args.smoke:
        out = ROOT / "benchmarks" / "results"
        out.mkdir(exist_ok=True)
        name = f"definitions-scale-{time.strftime('%Y%m%dT%H%M%S')}.json"
        (out / name).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
