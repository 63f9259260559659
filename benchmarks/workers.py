"""`serve --workers`: the single-object request path with 1 process against N workers (issue 17,
item 6; issue 28, item 1), alternated in one run.

Starts the real `custom-metrics-server serve` for each case and loads one URL with
`wrk -t2 -c16 --latency` over TLS keep-alive. Modes (`--modes`, default all):

* demo: `--demo` (1,000 simulated pods), one pod's `http_requests_per_second`, no delegated
  authentication (the demo gate);
* token: the same with delegated authentication and authorization against the fake
  kube-apiserver of the tests (TokenReview and SubjectAccessReview in this process,
  everything allowed), with `Authorization: Bearer`; a warm-up run fills each process's caches
  first, so the measured run makes (almost) no review (the counts are reported);
* kube-pod, kube-object: the Kubernetes backend against the fake kube-apiserver of the tests
  (`tests.fakes.kube_apiserver`, in this process, on a thread) holding `--nodes` nodes with
  `--pods-per-node` pods each (`tests.fakes.cluster_process.load_world`: 1,000 pods in 10
  namespaces by default) and a fake kubelet behind the node proxy of every node, delegated
  auth as `token`: one pod's `kube_running_pod_resource_usage` (memory: from the kubelet
  scrape), and the Object metric `kube_pod_resource_request` (cpu) of namespace `ns-0000`
  (100 pods summed). The N-worker case adds `--workers-replicate-watches`: every worker lists,
  watches and scrapes on its own. Reported beside the rest: what the API server received from
  the server over its life, start to the end of the run: lists, watches, and the node-proxy
  scrapes (what the kubelets receive; every node once per `--metric-resolution`, 15 s, from
  every process that runs the backend).

Each round runs every case with `--workers 1` (one process), then with `--workers N` (every
worker serves the whole API with its own backends), so both share the machine's load. Whether a
run got workers is read from the server's start-up line. Reported per run: req/s, p50/p99, the
CPU of every server process per request (utime + stime from /proc), wrk's own CPU (the machine
has 2 cores: what wrk burns, the server cannot use), RSS of every process, and the 1-minute
load average before the run. Workers only gain with a free core per worker.

    python benchmarks/workers.py                 # 3 rounds, 10 s runs (~8 min)
    python benchmarks/workers.py --modes kube-pod,kube-object --rounds 4
    python benchmarks/workers.py --workers 3 --rounds 5
    python benchmarks/workers.py --smoke         # 1 round, 1 s runs; fails on a non-2xx answer
                                                 # or a run without the workers it asked for
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.request_path import _ms, cpu_seconds, first_web_pod, machine, rss_mib  # noqa: E402
from custom_metrics_server.testing.server_process import ServerProcess, start_server  # noqa: E402
from tests.fakes.auth_webhooks import FakeAuthApiServer  # noqa: E402
from tests.fakes.cluster_process import load_world, write_kubeconfig  # noqa: E402
from tests.fakes.kube_apiserver import FakeKubeApiServer  # noqa: E402

TOKEN = "bench-token"  # a fake credential for the fake kube-apiserver
RESULTS = ROOT / "benchmarks" / "results"
API = "/apis/custom.metrics.k8s.io/v1beta2"
#: The Kubernetes backend's URLs (`load_world`'s names: pod p-00000-0 is in ns-0000).
KUBE_URLS = {
    "kube-pod": f"{API}/namespaces/ns-0000/pods/p-00000-0/kube_running_pod_resource_usage"
    "?metricLabelSelector=resource%3Dmemory",
    "kube-object": f"{API}/namespaces/ns-0000/metrics/kube_pod_resource_request"
    "?metricLabelSelector=resource%3Dcpu",
}


def children(pid: int) -> list[int]:
    """Direct child processes of `pid` (the workers)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.extend(int(child) for child in text)
    return found


def run_wrk(
    url: str, seconds: float, headers: list[str], threads: int, connections: int
) -> dict[str, Any]:
    """One wrk run: req/s, p50/p99, errors, and wrk's own CPU seconds."""
    command = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--latency",
    ]
    for header in headers:
        command += ["-H", header]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    output = subprocess.run([*command, url], capture_output=True, text=True, check=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result: dict[str, Any] = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))}  # type: ignore[union-attr]
    for percentile in ("50", "99"):
        match = re.search(rf"^\s+{percentile}%\s+(\S+)", output, re.MULTILINE)
        result[f"p{percentile}_ms"] = _ms(match.group(1)) if match else None
    requests = re.search(r"(\d+) requests in", output)
    result["requests"] = int(requests.group(1)) if requests else 0
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    result["non_2xx"] = int(errors.group(1)) if errors else 0
    result["wrk_cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return result


def measure(
    server: ServerProcess, url: str, args: argparse.Namespace, headers: list[str]
) -> dict[str, Any]:
    """Warm-up, then the measured run with every server process's CPU and RSS."""
    run_wrk(url, min(2.0, args.seconds), headers, args.threads, args.connections)
    pids = [server.pid, *children(server.pid)]
    before = {pid: cpu_seconds(pid) for pid in pids}
    load = os.getloadavg()[0]
    result = run_wrk(url, args.seconds, headers, args.threads, args.connections)
    used = {pid: cpu_seconds(pid) - before[pid] for pid in pids}
    count = max(1, result["requests"])
    result["load1"] = round(load, 2)
    result["cpu_us_per_request"] = {
        ("main" if pid == server.pid else f"worker {pid}"): round(used[pid] / count * 1e6, 1)
        for pid in pids
    }
    result["server_cpu_us_per_request"] = round(sum(used.values()) / count * 1e6, 1)
    result["server_cores"] = round(sum(used.values()) / args.seconds, 2)
    result["wrk_cores"] = round(result["wrk_cpu_s"] / args.seconds, 2)
    result["rss_mib"] = {
        ("main" if pid == server.pid else f"worker {pid}"): round(rss_mib(pid), 1) for pid in pids
    }
    result["rss_total_mib"] = round(sum(result["rss_mib"].values()), 1)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="the N to compare with 1")
    parser.add_argument("--threads", type=int, default=2, help="wrk -t")
    parser.add_argument("--connections", type=int, default=16, help="wrk -c")
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=100, help="kube modes: fake nodes")
    parser.add_argument("--pods-per-node", type=int, default=10, help="kube modes")
    parser.add_argument("--modes", default="demo,token,kube-pod,kube-object")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is not installed (Debian: apt-get install wrk)", file=sys.stderr)
        return 2
    if args.smoke:
        args.seconds, args.rounds, args.pods, args.nodes = 1.0, 1, 200, 20
    rows: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeAuthApiServer() as fake,
        FakeKubeApiServer() as cluster,
    ):
        work = Path(tmp)
        fake.allow_all = True
        fake.tokens[TOKEN] = {"username": "bench", "groups": ["bench"]}
        auth = fake.write_kubeconfig(work / "auth-kubeconfig")
        delegated = [
            "--authentication-kubeconfig",
            str(auth),
            "--authorization-kubeconfig",
            str(auth),
            "--authentication-skip-lookup",
        ]
        load_world(
            cluster,
            argparse.Namespace(
                nodes=args.nodes,
                pods_per_node=args.pods_per_node,
                namespaces=10,
                healthy_nodes=args.nodes,
                hanging_nodes=0,
            ),
        )
        write_kubeconfig(work / "kubeconfig", cluster.url)
        demo = ["--demo-pods", str(args.pods), "--demo-web-pods", str(min(1000, args.pods))]
        kube = [*delegated, "--kubeconfig", str(work / "kubeconfig")]
        modes = {
            "demo": (demo, []),
            "token": ([*delegated, *demo], []),
            "kube-pod": (kube, ["--workers-replicate-watches"]),
            "kube-object": (kube, ["--workers-replicate-watches"]),
        }
        path = os.environ.get("PYTHONPATH", "")
        env = {"PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), path)))}
        for round_ in range(args.rounds):
            for mode in args.modes.split(","):
                for variant, workers in (("1", 1), (f"{args.workers}", args.workers)):
                    flags, replicate = modes[mode]
                    flags = [*flags, *(replicate if workers > 1 else [])]
                    result = run_case(
                        Case(work / f"{round_}-{mode}-{variant}", mode, workers, flags),
                        args,
                        env,
                        fake,
                        cluster,
                    )
                    rows.append({"round": round_, "mode": mode, "workers": variant, **result})
                    print(json.dumps(rows[-1]), file=sys.stderr)
    report(rows, args)
    if not args.smoke:
        RESULTS.mkdir(exist_ok=True)
        out = RESULTS / f"workers-{time.strftime('%Y%m%dT%H%M%S')}.json"
        out.write_text(
            json.dumps(
                {"machine": machine(), "args": vars(args), "rows": rows},
                indent=1,
            )
        )
        print(f"\nwritten to {out}")
    return 1 if _failures(rows, args) else 0


def _failures(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    """Runs with a non-2xx answer, no request, or without the workers their variant means."""
    expected = {"1": "one process", f"{args.workers}": "workers"}
    failed = [
        f"{row['round']}-{row['mode']}-{row['workers']}"
        for row in rows
        if row["non_2xx"] or row["requests"] == 0 or row["workers_mode"] != expected[row["workers"]]
    ]
    for name in failed:
        print(f"FAILED: {name}", file=sys.stderr)
    return failed


@dataclass(frozen=True)
class Case:
    """One server to start and load: its directory, mode, workers and flags."""

    workdir: Path
    mode: str
    workers: int
    flags: list[str]


def run_case(
    case: Case,
    args: argparse.Namespace,
    env: dict[str, str],
    fake: FakeAuthApiServer,
    cluster: FakeKubeApiServer,
) -> dict[str, Any]:
    """Start the server of `case`, measure it (`measure`), stop it; the row's figures."""
    kube = case.mode.startswith("kube")
    calls = {kind: cluster.count(kind) for kind in ("list", "watch", "proxy")}
    started = time.monotonic()
    server = start_server(
        case.workdir,
        *case.flags,
        "--workers",
        str(case.workers),
        timeout=120,
        env=env,
        demo=not kube,
    )
    try:
        if kube:
            _first_rounds(server, cluster, calls["proxy"], args.nodes)
            url = f"{server.url}{KUBE_URLS[case.mode]}"
        else:
            pod = (
                first_web_pod(server.url, server.cert_dir / "apiserver.crt")
                if case.mode == "demo"
                else _pod(server)
            )
            url = f"{server.url}{API}/namespaces/default/pods/{pod}/http_requests_per_second"
        headers = [f"Authorization: Bearer {TOKEN}"] if case.mode != "demo" else []
        reviews = (len(fake.token_reviews), len(fake.access_reviews))
        result = measure(server, url, args, headers)
        result["workers_mode"] = _workers_mode(server)
        result["reviews_during_runs"] = [
            len(fake.token_reviews) - reviews[0],
            len(fake.access_reviews) - reviews[1],
        ]
        if kube:
            result["api_server"] = _api_load(cluster, calls, started, args.nodes)
    finally:
        server.stop()
    return result


def _first_rounds(
    server: ServerProcess, cluster: FakeKubeApiServer, before: int, nodes: int
) -> None:
    """Wait until every serving process has scraped every node once (its first round: the
    pod's usage is there)."""
    processes = max(1, len(children(server.pid))) if _workers_mode(server) == "workers" else 1
    deadline = time.monotonic() + 120
    while cluster.count("proxy") - before < nodes * processes:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the first scrape rounds did not end: {cluster.count('proxy')}")
        time.sleep(0.1)


def _api_load(
    cluster: FakeKubeApiServer, before: dict[str, int], started: float, nodes: int
) -> dict[str, float]:
    """What the server asked of the fake API server over its life so far: lists, watches,
    node-proxy scrapes (kubelet scrapes, `rounds` of every node) and the life's seconds."""
    scrapes = cluster.count("proxy") - before["proxy"]
    return {
        "lists": cluster.count("list") - before["list"],
        "watches": cluster.count("watch") - before["watch"],
        "scrapes": scrapes,
        "rounds": round(scrapes / max(1, nodes), 2),
        "life_s": round(time.monotonic() - started, 1),
    }


def _workers_mode(server: ServerProcess) -> str:
    """Whether the server started workers, from its start-up line (workers.plan)."""
    return "workers" if " worker processes, each serving " in server.logs() else "one process"


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """The runs as Markdown tables on stdout."""
    print(f"machine: {json.dumps(machine())}")
    print(
        "| round | mode | workers | how | load | req/s | p50 ms | p99 ms | server µs/req (per process) | server cores | wrk cores | RSS MiB (per process) | reviews | API server over the life: lists, watches, kubelet scrapes (rounds), seconds | non-2xx |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        per = " + ".join(f"{v}" for v in row["cpu_us_per_request"].values())
        rss = " + ".join(f"{v}" for v in row["rss_mib"].values())
        load = row.get("api_server")
        api = (
            f"{load['lists']}, {load['watches']}, {load['scrapes']} ({load['rounds']}), {load['life_s']}"
            if load
            else ""
        )
        print(
            f"| {row['round']} | {row['mode']} | {row['workers']} | {row['workers_mode']} | {row['load1']} | {row['rps']:,.0f} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} "
            f"| {row['server_cpu_us_per_request']} ({per}) | {row['server_cores']} | {row['wrk_cores']} | {row['rss_total_mib']} ({rss}) | {row['reviews_during_runs']} | {api} | {row['non_2xx']} |"
        )
    print(
        "\n| mode | workers | median req/s | ratio to 1 process | median server µs/req |"
        "\n|---|---|---|---|---|"
    )
    for mode in args.modes.split(","):
        base = _median([r["rps"] for r in rows if r["mode"] == mode and r["workers"] == "1"])
        for variant in ("1", f"{args.workers}"):
            chosen = [r for r in rows if r["mode"] == mode and r["workers"] == variant]
            value = _median([r["rps"] for r in chosen])
            cpu = _median([r["server_cpu_us_per_request"] for r in chosen])
            print(f"| {mode} | {variant} | {value:,.0f} | {value / base:.2f}x | {cpu} |")


def _pod(server: ServerProcess) -> str:
    with server.client(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        listing = client.get(
            "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/http_requests_per_second",
            params={"labelSelector": "app=web"},
        )
        listing.raise_for_status()
        return str(listing.json()["items"][0]["describedObject"]["name"])


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


if __name__ == "__main__":
    sys.exit(main())
