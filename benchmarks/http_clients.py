"""httpx, the lean pool (`http_client/http11.py`) and aiohttp on the server's four outbound
workloads (issue 28: one HTTP client stack for every outbound call):

* `scrape`: a kubelet scrape round at 5,000 nodes: 5,000 GETs of a 41 KB kubelet body
  (`tests/fakes/envelope_world.py`'s kubelet, 34 pods), 32 in flight (the scraper's default);
* `list`: the pods' initial list at 150,000 pods: 300 GETs of a 500-pod page (~1.4 MB of the
  envelope world's pods), one at a time (a reflector pages sequentially);
* `review`: SubjectAccessReview POSTs (a ~0.5 KB review in, the allowed review back), 16 in
  flight;
* `query`: Prometheus instant queries (a one-series vector), 16 in flight.

The server is one process of its own (asyncio, uvloop, TLS 1.3 with a trustme certificate,
keep-alive HTTP/1.1, answers pre-rendered), so the CPU measured is the client's alone. Each
client runs every workload in a child process of its own (its imports only, its RSS its own),
the clients taking turns round after round (`--rounds`, the order rotated each round) so that
the machine's load drifts over all of them alike. In the child: uvloop, as `serve`; a warm-up
of each workload (connections made, caches filled), then CPU per call = the child's
`time.process_time()` over the workload / calls (user and system apart, and minor page
faults); RSS after each workload and the peak (`VmHWM`). Figures are medians over the rounds.

The allocator as a long-running server has it: each child first allocates and frees an 8 MiB
block, which raises glibc's dynamic mmap threshold above a list page's size, as the server's
first big answer does. Without it (`--cold-allocator`) a 1.4 MB body is mmapped and faulted in
page by page on every call: 2-3 ms of system time a page that depends on what the process
happened to free before (the scrape workload raised the threshold in one client's child and
not in another's), not on the client.

The clients are used as the server would: httpx's `AsyncClient` (keep-alive limits of the
workload's concurrency, the `httpx` logger at WARNING as `serve` has it), the lean
`Http11Pool` with a pre-built head, aiohttp's `ClientSession` (a `TCPConnector` of the same
limit); the same `ssl.SSLContext` settings for all three, bodies read whole.

    python benchmarks/http_clients.py               # 3 rounds, ~5 min on 2 shared cores
    python benchmarks/http_clients.py --smoke       # a few seconds
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import platform
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CLIENTS = ("httpx", "lean", "aiohttp")
#: workload: (calls measured, calls in flight)
WORKLOADS: dict[str, tuple[int, int]] = {
    "scrape": (5000, 32),
    "list": (300, 1),
    "review": (2000, 16),
    "query": (2000, 16),
}
SMOKE: dict[str, tuple[int, int]] = {
    "scrape": (200, 32),
    "list": (10, 1),
    "review": (100, 16),
    "query": (100, 16),
}
TOKEN = "benchmark-token"
SAR_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
QUERY_PATH = "/api/v1/query?query=sum%28rate%28http_requests_total%7Bnamespace%3D%22ns-0002%22%2Cpod%3D%22web-00000%22%7D%5B2m%5D%29%29"


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def status_kib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return float(line.split()[1])
    return 0.0


# -- bodies ---------------------------------------------------------------------------------


def bodies() -> dict[str, bytes]:
    """The answers, as the envelope's fake world renders them."""
    from tests.fakes.envelope_world import (
        _NodeKubelet,
        make_pod,
        plan_world,
        scale_shape,
    )

    plan = plan_world(scale_shape(150_000))
    pods = [(f"ns-{i % 50:04d}", f"pod-{i:06d}") for i in range(34)]  # ~41 KB, as measured
    kubelet = _NodeKubelet(7, pods).render(3, int(time.time() * 1e9))
    items = [make_pod(plan, i) for i in range(500)]
    page = {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "123456", "continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"},
        "items": items,
    }
    review = {
        "kind": "SubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "spec": {
            "resourceAttributes": {
                "namespace": "ns-0002",
                "verb": "get",
                "group": "custom.metrics.k8s.io",
                "resource": "pods",
                "name": "http_requests_per_second",
            },
            "user": "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
            "groups": ["system:serviceaccounts", "system:authenticated"],
        },
        "status": {"allowed": True, "reason": 'RBAC: allowed by ClusterRoleBinding "hpa"'},
    }
    vector = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": {"pod": "web-00000"}, "value": [1733500000.123, "2.5"]}],
        },
    }
    return {
        "kubelet": kubelet,
        "list": json.dumps(page, separators=(",", ":")).encode(),
        "review": json.dumps(review, separators=(",", ":")).encode(),
        "query": json.dumps(vector, separators=(",", ":")).encode(),
    }


def review_request() -> bytes:
    body = json.loads(bodies_cache["review"])
    del body["status"]
    return json.dumps(body, separators=(",", ":")).encode()


bodies_cache: dict[str, bytes] = {}


# -- the server -----------------------------------------------------------------------------


def serve(port_file: Path, cert: Path, key: Path) -> None:
    import uvloop

    answers = {}
    for name, body in bodies().items():
        kind = "text/plain; version=0.0.4" if name == "kubelet" else "application/json"
        answers[name] = (
            f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line = head[: head.index(b"\r\n")]
                lowered = head.lower()
                at = lowered.find(b"content-length:")
                if at >= 0:
                    length = int(head[at + 15 : head.index(b"\r\n", at)])
                    await reader.readexactly(length)
                if b"/proxy/metrics/resource" in line:
                    writer.write(answers["kubelet"])
                elif b"/api/v1/pods" in line:
                    writer.write(answers["list"])
                elif b"subjectaccessreviews" in line:
                    writer.write(answers["review"])
                else:
                    writer.write(answers["query"])
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context, backlog=1024)
        port_file.write_text(str(server.sockets[0].getsockname()[1]))  # noqa: ASYNC240 - once
        await asyncio.Event().wait()

    uvloop.run(main())


# -- the clients ----------------------------------------------------------------------------

Call = Callable[[str, int], Awaitable[int]]  # (workload, index) -> bytes read


def target(workload: str, index: int) -> str:
    if workload == "scrape":
        return f"/api/v1/nodes/node-{index:05d}/proxy/metrics/resource"
    if workload == "list":
        return f"/api/v1/pods?limit=500&continue=page-{index}"
    if workload == "review":
        return SAR_PATH
    return QUERY_PATH


async def make_httpx(base: str, context: ssl.SSLContext, limit: int) -> tuple[Call, Any]:
    import logging

    import httpx

    logging.getLogger("httpx").setLevel(logging.WARNING)
    client = httpx.AsyncClient(
        base_url=base,
        verify=context,
        timeout=30.0,
        headers={"Authorization": f"Bearer {TOKEN}", "User-Agent": "bench"},
        limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit),
    )
    sar = review_request()

    async def call(workload: str, index: int) -> int:
        if workload == "review":
            response = await client.post(
                SAR_PATH, content=sar, headers={"Content-Type": "application/json"}
            )
        else:
            response = await client.get(target(workload, index))
        assert response.status_code == 200
        return len(response.content)

    return call, client.aclose


async def make_lean(base: str, context: ssl.SSLContext, limit: int) -> tuple[Call, Any]:
    from custom_metrics_server.http_client.http11 import Http11Pool

    host, _, port = base.removeprefix("https://").partition(":")
    pool = Http11Pool(
        host=host,
        port=int(port),
        ssl_context=context,
        server_hostname=host,
        timeout=30.0,
        max_connections=limit,
        max_idle=limit,
    )
    fixed = (
        f"Host: {host}:{port}\r\nUser-Agent: bench\r\nAuthorization: Bearer {TOKEN}\r\n".encode()
    )
    sar = review_request()
    post = (
        f"POST {SAR_PATH} HTTP/1.1\r\n".encode()
        + fixed
        + f"Content-Type: application/json\r\nContent-Length: {len(sar)}\r\n\r\n".encode()
    )

    async def call(workload: str, index: int) -> int:
        if workload == "review":
            answer = await pool.request(post, sar)
        else:
            head = b"GET " + target(workload, index).encode() + b" HTTP/1.1\r\n" + fixed + b"\r\n"
            answer = await pool.request(head)
        assert answer.status == 200
        return len(answer.body)

    return call, pool.aclose


async def make_aiohttp(base: str, context: ssl.SSLContext, limit: int) -> tuple[Call, Any]:
    import aiohttp

    session = aiohttp.ClientSession(
        base_url=base,
        connector=aiohttp.TCPConnector(ssl=context, limit=limit),
        timeout=aiohttp.ClientTimeout(total=30.0),
        headers={"Authorization": f"Bearer {TOKEN}", "User-Agent": "bench"},
    )
    sar = review_request()

    async def call(workload: str, index: int) -> int:
        if workload == "review":
            async with session.post(
                SAR_PATH, data=sar, headers={"Content-Type": "application/json"}
            ) as response:
                assert response.status == 200
                return len(await response.read())
        async with session.get(target(workload, index)) as response:
            assert response.status == 200
            return len(await response.read())

    return call, session.close


MAKERS = {"httpx": make_httpx, "lean": make_lean, "aiohttp": make_aiohttp}


async def run_workload(call: Call, workload: str, calls: int, in_flight: int) -> int:
    next_index = 0
    total = 0

    async def worker() -> None:
        nonlocal next_index, total
        while next_index < calls:
            index = next_index
            next_index += 1
            read = await call(workload, index)
            total += read  # not `total += await ...`: that loads `total` before the wait

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return total


def client_main(
    name: str, base: str, ca: Path, workloads: dict[str, tuple[int, int]], *, warm: bool
) -> None:
    import resource

    import uvloop

    if warm:
        block = bytes(8 << 20)  # see the module docstring: the allocator of a running server
        del block
    bodies_cache.update(bodies())  # before the baseline: the request bodies, not the client
    context = ssl.create_default_context(cafile=str(ca))
    results: dict[str, Any] = {"client": name, "rss_start_mib": status_kib("VmRSS") / 1024}

    async def main() -> None:
        for workload, (calls, in_flight) in workloads.items():
            call, close = await MAKERS[name](base, context, in_flight)
            await run_workload(call, workload, max(in_flight * 2, calls // 10), in_flight)
            started = time.process_time()
            times = os.times()
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            wall = time.perf_counter()
            read = await run_workload(call, workload, calls, in_flight)
            cpu = time.process_time() - started
            after = os.times()
            results[workload] = {
                "calls": calls,
                "in_flight": in_flight,
                "bytes_per_call": read // calls,
                "cpu_us_per_call": cpu / calls * 1e6,
                "user_us_per_call": (after.user - times.user) / calls * 1e6,
                "system_us_per_call": (after.system - times.system) / calls * 1e6,
                "minor_faults_per_call": (
                    resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
                )
                / calls,
                "wall_s": time.perf_counter() - wall,
                "rss_mib": status_kib("VmRSS") / 1024,
            }
            await close()

    uvloop.run(main())
    results["rss_peak_mib"] = status_kib("VmHWM") / 1024
    if name == "aiohttp":
        from aiohttp import http_parser

        results["aiohttp_c_parser"] = http_parser.HttpResponseParser.__module__
    print(json.dumps(results))


# -- the parent -----------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    import aiohttp
    import httptools
    import httpx

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "openssl": ssl.OPENSSL_VERSION,
        "httpx": httpx.__version__,
        "aiohttp": aiohttp.__version__,
        "httptools": httptools.__version__,
        "uvloop": importlib.metadata.version("uvloop"),
    }


def table(summary: dict[str, dict[str, dict[str, float]]]) -> str:
    lines = [
        "| workload | "
        + " | ".join(f"{c} µs/call" for c in CLIENTS)
        + " | httpx/lean | aiohttp/lean |",
        "|---|" + "---|" * (len(CLIENTS) + 2),
    ]
    for workload in WORKLOADS:
        cells = [summary[c][workload]["cpu_us_per_call"] for c in CLIENTS]
        lean = summary["lean"][workload]["cpu_us_per_call"]
        lines.append(
            f"| {workload} | "
            + " | ".join(f"{v:,.0f}" for v in cells)
            + f" | {cells[0] / lean:.1f}x | {cells[2] / lean:.1f}x |"
        )
    lines.append(
        "| RSS after all (MiB) | "
        + " | ".join(f"{summary[c]['all']['rss_mib']:.0f}" for c in CLIENTS)
        + " | | |"
    )
    lines.append(
        "| RSS peak (MiB) | "
        + " | ".join(f"{summary[c]['all']['rss_peak_mib']:.0f}" for c in CLIENTS)
        + " | | |"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/http_clients.json")
    parser.add_argument("--serve", nargs=3, metavar=("PORT_FILE", "CERT", "KEY"))
    parser.add_argument("--client", nargs=3, metavar=("NAME", "BASE", "CA"))
    parser.add_argument("--workloads", default="")
    parser.add_argument("--cold-allocator", action="store_true", help="no allocator warm-up")
    args = parser.parse_args()
    if args.serve:
        serve(*map(Path, args.serve))
        return 0
    if args.client:
        name, base, ca = args.client
        client_main(name, base, Path(ca), json.loads(args.workloads), warm=not args.cold_allocator)
        return 0

    import trustme

    workloads = SMOKE if args.smoke else WORKLOADS
    rounds = 1 if args.smoke else args.rounds
    work = Path(tempfile.mkdtemp(prefix="http-clients-"))
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    issued.private_key_and_cert_chain_pem.write_to_path(str(work / "server.pem"))
    ca.cert_pem.write_to_path(str(work / "ca.pem"))
    port_file = work / "port"
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port_file), *(str(work / "server.pem"),) * 2]
    )
    try:
        for _ in range(600):
            if port_file.exists() and port_file.read_text():
                break
            time.sleep(0.1)
        base = f"https://127.0.0.1:{port_file.read_text()}"
        loads = [load()]
        runs: dict[str, list[dict[str, Any]]] = {c: [] for c in CLIENTS}
        for round_ in range(rounds):
            order = CLIENTS[round_ % 3 :] + CLIENTS[: round_ % 3]
            for name in order:
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--client",
                        name,
                        base,
                        str(work / "ca.pem"),
                        "--workloads",
                        json.dumps(workloads),
                        *(["--cold-allocator"] if args.cold_allocator else []),
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                runs[name].append(json.loads(out))
                print(
                    f"round {round_ + 1} {name}: "
                    + ", ".join(
                        f"{w} {runs[name][-1][w]['cpu_us_per_call']:.0f} µs" for w in workloads
                    ),
                    flush=True,
                )
            loads.append(load())
    finally:
        server.terminate()
        server.wait()
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for name, results in runs.items():
        summary[name] = {
            w: {
                key: statistics.median(r[w][key] for r in results)
                for key in (
                    "cpu_us_per_call",
                    "user_us_per_call",
                    "system_us_per_call",
                    "minor_faults_per_call",
                    "bytes_per_call",
                    "wall_s",
                    "rss_mib",
                )
            }
            for w in workloads
        }
        summary[name]["all"] = {
            "rss_mib": statistics.median(r[list(workloads)[-1]]["rss_mib"] for r in results),
            "rss_peak_mib": statistics.median(r["rss_peak_mib"] for r in results),
            "rss_start_mib": statistics.median(r["rss_start_mib"] for r in results),
        }
    report = {
        "machine": machine(),
        "load": loads,
        "workloads": workloads,
        "rounds": rounds,
        "allocator": "cold" if args.cold_allocator else "warm",
        "summary": summary,
        "runs": runs,
    }
    print(table(summary))
    print("load average:", " -> ".join(loads))
    if not args.smoke:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))
        print("written:", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
