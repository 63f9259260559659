"""`serve --workers`: the single-object request path with 1 process against N workers (issue 17,
item 6), alternated in one run.

Starts the real `custom-metrics-server serve --demo` (1,000 simulated pods) for each case and
loads one pod's custom metric with `wrk -t2 -c16 --latency` over TLS keep-alive:

* demo: no delegated authentication (the demo gate);
* token: delegated authentication and authorization against the fake kube-apiserver of the
  tests (TokenReview and SubjectAccessReview in this process, everything allowed), with
  `Authorization: Bearer`; a warm-up run fills each process's caches first, so the measured
  run makes no review (the counts are reported).

Each round runs every case with `--workers 1` (one process), then with `--workers N` (the demo
is replicable: every worker serves the whole API with its own simulated cluster), so both share
the machine's load. Whether a run got workers is read from the server's start-up line.
Reported per run: req/s, p50/p99, the CPU of every server process per request (utime + stime
from /proc), wrk's own CPU (the machine has 2 cores: what wrk burns, the server cannot use),
RSS of every process, and the 1-minute load average before the run.

    python benchmarks/workers.py                 # 3 rounds, 10 s runs (~4 min)
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.request_path import _ms, cpu_seconds, first_web_pod, machine, rss_mib  # noqa: E402
from custom_metrics_server.testing.server_process import ServerProcess, start_server  # noqa: E402
from tests.fakes.auth_webhooks import FakeAuthApiServer  # noqa: E402

TOKEN = "bench-token"  # a fake credential for the fake kube-apiserver
RESULTS = ROOT / "benchmarks" / "results"


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
    parser.add_argument("--modes", default="demo,token")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is not installed (Debian: apt-get install wrk)", file=sys.stderr)
        return 2
    if args.smoke:
        args.seconds, args.rounds, args.pods = 1.0, 1, 200
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, FakeAuthApiServer() as fake:
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
        modes = {"demo": [], "token": delegated}
        demo = ["--demo-pods", str(args.pods), "--demo-web-pods", str(min(1000, args.pods))]
        variants = {
            "1": (1, demo),
            f"{args.workers}": (args.workers, demo),
        }
        path = os.environ.get("PYTHONPATH", "")
        env = {"PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), path)))}
        for round_ in range(args.rounds):
            for mode in args.modes.split(","):
                for variant, (workers, backends) in variants.items():
                    name = f"{round_}-{mode}-{variant}"
                    flags = [*modes[mode], *backends]
                    server = start_server(
                        work / name, *flags, "--workers", str(workers), timeout=60, env=env
                    )
                    try:
                        pod = (
                            first_web_pod(server.url, server.cert_dir / "apiserver.crt")
                            if mode == "demo"
                            else _pod(server)
                        )
                        url = f"{server.url}/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/{pod}/http_requests_per_second"
                        headers = [f"Authorization: Bearer {TOKEN}"] if mode == "token" else []
                        reviews = (len(fake.token_reviews), len(fake.access_reviews))
                        result = measure(server, url, args, headers)
                        result["workers_mode"] = _workers_mode(server)
                        result["reviews_during_runs"] = [
                            len(fake.token_reviews) - reviews[0],
                            len(fake.access_reviews) - reviews[1],
                        ]
                    finally:
                        server.stop()
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


def _workers_mode(server: ServerProcess) -> str:
    """Whether the server started workers, from its start-up line (workers.plan)."""
    return "workers" if " worker processes, each serving " in server.logs() else "one process"


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """The runs as Markdown tables on stdout."""
    print(f"machine: {json.dumps(machine())}")
    print(
        "| round | mode | workers | how | load | req/s | p50 ms | p99 ms | server µs/req (per process) | server cores | wrk cores | RSS MiB (per process) | reviews | non-2xx |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        per = " + ".join(f"{v}" for v in row["cpu_us_per_request"].values())
        rss = " + ".join(f"{v}" for v in row["rss_mib"].values())
        print(
            f"| {row['round']} | {row['mode']} | {row['workers']} | {row['workers_mode']} | {row['load1']} | {row['rps']:,.0f} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} "
            f"| {row['server_cpu_us_per_request']} ({per}) | {row['server_cores']} | {row['wrk_cores']} | {row['rss_total_mib']} ({rss}) | {row['reviews_during_runs']} | {row['non_2xx']} |"
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
