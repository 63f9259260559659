"""Prometheus backend benchmark: one pod and `pods/*` over 1,000 pods against a real Prometheus.

Backfills a real Prometheus (Debian `prometheus`/`promtool`) with `http_requests_total` for
1,000 pods, starts `serve --demo-file <1,000 pods> --prometheus-url ... --config ...`, then:

1. times the exact PromQL of the list, straight against Prometheus (httpx keep-alive);
2. runs wrk against the server for the single-object request
   (`pods/web-0500/http_requests_per_second`) and the list
   (`pods/*?labelSelector=app%3Dweb`, 1,000 items);
3. reads the server's own `/metrics` to split each request's time between Prometheus
   (`custom_metrics_server_prometheus_request_duration_seconds`) and the server itself, and
   the CPU time (utime + stime) the server and Prometheus used per request.

To compare two trees of the package in one run (before and after a change), give each with
`--tree`: one server per tree runs against the same Prometheus (each with that tree first on
`PYTHONPATH`), and every round measures every tree once per case, the trees' order
alternating between rounds, so that a drift of the machine's load hits all trees alike. The
table gives the median of the rounds and the load average around each.

    python benchmarks/prometheus_backend.py                       # this tree, about 1 minute
    python benchmarks/prometheus_backend.py --smoke               # 1 s per case
    git archive --prefix=before/ main | tar -x -C /tmp
    python benchmarks/prometheus_backend.py --tree /tmp/before --tree . --rounds 5 --cases single
    python benchmarks/prometheus_backend.py --profile /tmp/prof   # py-spy of each server (single)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
#: A child measuring one tree in process imports that tree's package (PYTHONPATH), not ours.
WORKER = "--worker" in sys.argv
if not WORKER:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))

    from request_path import cpu_seconds, machine, rss_mib, run_wrk

    from custom_metrics_server.testing.server_process import (
        ServerProcess,
        start_server,
        stop_server,
    )
    from tests.prometheus.real_prometheus import CounterLine, RealPrometheus

PODS = 1000
RULES = """
rules:
- seriesQuery: 'http_requests_total{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  name: {matches: "^(.*)_total$", as: "${1}_per_second"}
  metricsQuery: 'sum(rate(<<.Series>>{<<.LabelMatchers>>}[2m])) by (<<.GroupBy>>)'
"""
LIST = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/http_requests_per_second?labelSelector=app%3Dweb"
SINGLE = (
    "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/web-0500/http_requests_per_second"
)
CASES = {"single": SINGLE, "list_1000": LIST}
PROMQL = 'sum(rate(http_requests_total{namespace="default"}[2m])) by (pod)'


def write_inputs(workdir: Path) -> tuple[Path, Path]:
    """The demo cluster (1,000 `app=web` pods in `default`) and the rules file."""
    cluster = workdir / "cluster.yaml"
    objects = [{"resource": "namespaces", "name": "default"}] + [
        {
            "resource": "pods",
            "namespace": "default",
            "name": f"web-{i:04d}",
            "labels": {"app": "web"},
        }
        for i in range(PODS)
    ]
    cluster.write_text(json.dumps({"objects": objects}))
    rules = workdir / "rules.yaml"
    rules.write_text(RULES)
    return cluster, rules


def start(workdir: Path, prometheus: RealPrometheus, tree: Path | None) -> ServerProcess:
    """The server of `tree` (None: this interpreter's package) against `prometheus`."""
    cluster, rules = write_inputs(workdir.parent)
    env = {"PYTHONPATH": str(tree)} if tree is not None else None
    return start_server(
        workdir,
        "--demo-file",
        str(cluster),
        "--prometheus-url",
        prometheus.url,
        "--config",
        str(rules),
        "--metrics-max-age",
        "1h",
        ready=False,
        timeout=60,
        env=env,
    )


def direct_latency(prometheus: RealPrometheus, seconds: float) -> dict[str, float]:
    """The server's PromQL, asked of Prometheus directly, one at a time."""
    samples: list[float] = []
    with httpx.Client(base_url=prometheus.url, timeout=10) as client:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.perf_counter()
            response = client.get("/api/v1/query", params={"query": PROMQL})
            samples.append((time.perf_counter() - started) * 1000)
            assert len(response.json()["data"]["result"]) == PODS
    samples.sort()
    return {
        "queries": len(samples),
        "p50_ms": round(statistics.median(samples), 2),
        "p99_ms": round(samples[max(0, int(len(samples) * 0.99) - 1)], 2),
    }


def _metric_sum(text: str, pattern: str) -> float:
    return sum(float(m.group(1)) for m in re.finditer(pattern + r"\s+(\S+)$", text, re.MULTILINE))


def split(base: str, context: ssl.SSLContext, resource: str) -> dict[str, float]:
    """Seconds spent per request in total and waiting for Prometheus (server self-metrics)."""
    text = httpx.get(base + "/metrics", verify=context, timeout=10).text
    total = _metric_sum(
        text, rf'apiserver_request_duration_seconds_sum\{{[^}}]*resource="{resource}"[^}}]*\}}'
    )
    count = _metric_sum(
        text, rf'apiserver_request_duration_seconds_count\{{[^}}]*resource="{resource}"[^}}]*\}}'
    )
    prom = _metric_sum(
        text, r'custom_metrics_server_prometheus_request_duration_seconds_sum\{api="query"[^}]*\}'
    )
    return {"requests": count, "total_s": total, "prometheus_s": prom}


def measure(
    server: ServerProcess,
    prometheus_pid: int,
    path: str,
    *,
    seconds: float,
    connections: int,
    profile: Path | None = None,
) -> dict[str, Any]:
    """wrk against one path, with the time split between Prometheus and the server, and the
    CPU time each process used per request. With `profile`, py-spy records the server during
    the measured run (its figures are then not comparable)."""
    base, context, pid = server.url, server.ssl_context(), server.pid
    run_wrk(base + path, min(2.0, seconds), connections)  # warm-up
    load = os.getloadavg()[0]
    before_split = split(base, context, "pods")
    before_cpu = cpu_seconds(pid)
    before_prometheus = cpu_seconds(prometheus_pid)
    spy = None
    if profile is not None:
        spy = subprocess.Popen(
            [
                py_spy(),
                "record",
                "--pid",
                str(pid),
                "--rate",
                "250",
                "--duration",
                str(max(1, round(seconds))),
                "--format",
                "raw" if profile.suffix == ".txt" else "flamegraph",
                "-o",
                str(profile),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    result = run_wrk(base + path, seconds, connections)
    used = cpu_seconds(pid) - before_cpu
    used_prometheus = cpu_seconds(prometheus_pid) - before_prometheus
    if spy is not None:
        spy.wait(timeout=60)
    after_split = split(base, context, "pods")
    requests = after_split["requests"] - before_split["requests"]
    total = after_split["total_s"] - before_split["total_s"]
    prom = after_split["prometheus_s"] - before_split["prometheus_s"]
    answered = max(1, result["requests"])
    result["load"] = round(load, 2)
    result["server_cpu_ms_per_request"] = round(used / answered * 1e3, 3)
    result["prometheus_cpu_ms_per_request"] = round(used_prometheus / answered * 1e3, 3)
    result["mean_ms"] = round(total / max(1, requests) * 1e3, 2)
    result["prometheus_mean_ms"] = round(prom / max(1, requests) * 1e3, 2)
    result["server_share"] = round(1 - prom / total, 3) if total else None
    result["rss_mib"] = round(rss_mib(pid), 1)
    return result


def py_spy() -> str:
    """The py-spy next to this interpreter, else on PATH."""
    local = Path(sys.executable).with_name("py-spy")
    found = str(local) if local.exists() else shutil.which("py-spy")
    if found is None:
        raise SystemExit("py-spy is not installed (pip install py-spy)")
    return found


def wait_listed(server: ServerProcess) -> None:
    """Until the server lists the metric for every pod (its first series listing is done)."""
    with server.client(timeout=30) as client:
        deadline = time.monotonic() + 60
        while len(client.get(LIST).json().get("items", [])) != PODS:
            assert time.monotonic() < deadline, "server never listed the metric"
            time.sleep(0.2)


def _scope(path: str) -> dict[str, Any]:
    raw, _, query = path.partition("?")
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "https",
        "path": raw,
        "raw_path": raw.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1:6443"), (b"accept", b"application/json")],
        "server": ("127.0.0.1", 6443),
        "client": ("127.0.0.1", 40000),
    }


async def _worker(args: argparse.Namespace) -> dict[str, Any]:
    """In the child: the app `serve` builds for this tree, against the benchmark's Prometheus;
    CPU µs per single-object request through the whole ASGI app (no TLS or socket on the
    front side, so the figure is the request path's own, Prometheus call included)."""
    from custom_metrics_server import cli
    from custom_metrics_server.server.app import AppSettings, create_app

    parsed = cli.build_parser().parse_args(
        [
            "serve",
            "--demo",
            "--demo-file",
            args.cluster,
            "--prometheus-url",
            args.prometheus_url,
            "--config",
            args.rules,
            "--metrics-max-age",
            "1h",
        ]
    )
    served = cli._with_prometheus(parsed, cli._demo(parsed))
    app = create_app(cluster=served.cluster, backends=served.backends, settings=AppSettings())
    backend: Any = served.backends[-1]
    status = 0

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    scope = _scope(SINGLE)
    batches: list[float] = []
    async with backend:
        await backend.relist()
        for batch in range(args.repeat + 1):
            started = time.process_time()
            for _ in range(args.requests):
                await app(dict(scope, headers=list(scope["headers"])), receive, send)
            assert status == 200, status
            if batch:  # the first batch warms up
                batches.append((time.process_time() - started) / args.requests * 1e6)
    return {"best_us": round(min(batches), 1), "median_us": round(statistics.median(batches), 1)}


def in_process_rounds(
    args: argparse.Namespace,
    prometheus: RealPrometheus,
    workdir: Path,
    trees: dict[str, Path | None],
) -> dict[str, list[dict[str, Any]]]:
    """Every round runs a child per tree (the order alternating), each with that tree first
    on PYTHONPATH."""
    figures: dict[str, list[dict[str, Any]]] = {label: [] for label in trees}
    for number in range(args.in_process):
        order = list(trees.items())
        if number % 2:
            order.reverse()
        for label, tree in order:
            command = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--worker",
                *("--prometheus-url", prometheus.url),
                *("--cluster", str(workdir / "cluster.yaml")),
                *("--rules", str(workdir / "rules.yaml")),
                *("--requests", str(args.requests), "--repeat", str(args.repeat)),
            ]
            env = {**os.environ, "PYTHONPATH": str(tree or ROOT)}
            load = os.getloadavg()[0]
            output = subprocess.run(
                command, capture_output=True, text=True, check=True, env=env, cwd=tree or ROOT
            ).stdout
            result = {**json.loads(output.strip().splitlines()[-1]), "load": round(load, 2)}
            figures[label].append(result)
            print(f"in process {number + 1} {label}: {result}", file=sys.stderr, flush=True)
    return figures


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tree", action="append", type=Path, help="a tree to measure")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument(
        "--cases", default="single,list_1000", help=f"comma-separated, of {', '.join(CASES)}"
    )
    parser.add_argument("--no-direct", action="store_true", help="skip the direct PromQL timing")
    parser.add_argument(
        "--profile",
        type=Path,
        help="directory: py-spy records each server during the first round's single case "
        "(server-N.svg, in --tree order)",
    )
    parser.add_argument(
        "--profile-format",
        choices=("flamegraph", "raw"),
        default="flamegraph",
        help="py-spy's output: an SVG, or collapsed stacks as text (server-N.txt)",
    )
    parser.add_argument(
        "--in-process",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="also measure CPU per single-object request in process (ROUNDS rounds per tree)",
    )
    parser.add_argument("--requests", type=int, default=2000, help="in process: per batch")
    parser.add_argument("--repeat", type=int, default=5, help="in process: batches per round")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--prometheus-url", help=argparse.SUPPRESS)
    parser.add_argument("--cluster", help=argparse.SUPPRESS)
    parser.add_argument("--rules", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.smoke and args.in_process:
        args.requests, args.repeat = 50, 1
    args.seconds = 1.0 if args.smoke else args.seconds
    args.cases = [case.strip() for case in args.cases.split(",") if case.strip()]
    unknown = [case for case in args.cases if case not in CASES]
    if unknown:
        parser.error(f"unknown case(s): {', '.join(unknown)}")
    return args


Figures = dict[str, dict[str, list[dict[str, Any]]]]


def run_rounds(
    args: argparse.Namespace,
    prometheus: RealPrometheus,
    servers: dict[str, ServerProcess],
    figures: Figures,
) -> None:
    """Every round measures every server once per case, the servers' order alternating."""
    assert prometheus.process is not None
    labels = list(servers)
    for number in range(args.rounds):
        order = list(servers.items())
        if number % 2:
            order.reverse()
        for case in args.cases:
            for label, server in order:
                profile = None
                if args.profile is not None and number == 0 and case == "single":
                    suffix = "txt" if args.profile_format == "raw" else "svg"
                    profile = args.profile / f"server-{labels.index(label)}.{suffix}"
                result = measure(
                    server,
                    prometheus.process.pid,
                    CASES[case],
                    seconds=args.seconds,
                    connections=args.connections,
                    profile=profile,
                )
                figures[label][case].append(result)
                print(
                    f"round {number + 1} {case} {label}: {json.dumps(result)}",
                    file=sys.stderr,
                    flush=True,
                )


def report(args: argparse.Namespace, results: dict[str, Any], figures: Figures) -> None:
    """The Markdown table of medians, old tree first, each tree's req/s against the first."""
    print(f"load average {results['load_before']} before, {results['load_after']} after; ")
    print(
        f"wrk -t1 -c{args.connections} -d{args.seconds:g}s, {args.rounds} round(s), medians "
        "(load: the 1-minute load average at the start of each run)"
    )
    print()
    print(
        "| tree | case | req/s | p50 ms | p99 ms | mean ms | in Prometheus ms | server share "
        "| server CPU ms/req | Prometheus CPU ms/req | RSS MiB | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    first: dict[str, float] = {}
    for label, per_case in figures.items():
        for case in args.cases:
            runs = per_case[case]

            def med(key: str, runs: list[dict[str, Any]] = runs) -> float:
                return float(statistics.median(r[key] for r in runs if r[key] is not None))

            rps = med("rps")
            first.setdefault(case, rps)
            ratio = f" ({rps / first[case]:.2f}x)" if len(figures) > 1 else ""
            loads = [r["load"] for r in runs]
            print(
                f"| {label} | {case} | {rps:.0f}{ratio} | {med('p50_ms'):.2f} | "
                f"{med('p99_ms'):.2f} | {med('mean_ms'):.2f} | {med('prometheus_mean_ms'):.2f} | "
                f"{med('server_share'):.0%} | {med('server_cpu_ms_per_request'):.3f} | "
                f"{med('prometheus_cpu_ms_per_request'):.3f} | {max(r['rss_mib'] for r in runs)} "
                f"| {min(loads):.2f}-{max(loads):.2f} |"
            )
    if "in_process" in results:
        print(
            "\nIn process, one pod through the whole ASGI app (CPU µs per request; best and "
            f"median of {args.repeat} batches of {args.requests}, then the median over rounds):\n"
        )
        print("| tree | best µs | median µs | rounds | load |")
        print("|---|---|---|---|---|")
        for label, runs in results["in_process"].items():
            loads = [r["load"] for r in runs]
            print(
                f"| {label} | {statistics.median(r['best_us'] for r in runs):.1f} "
                f"| {statistics.median(r['median_us'] for r in runs):.1f} | {len(runs)} "
                f"| {min(loads):.2f}-{max(loads):.2f} |"
            )
    if "prometheus_direct" in results:
        direct = results["prometheus_direct"]
        print(
            f"\nThe list's PromQL straight to Prometheus ({PODS} series), sequential: "
            f"p50 {direct['p50_ms']} ms, p99 {direct['p99_ms']} ms"
        )


def main() -> int:
    args = parse_args()
    if args.worker:
        import uvloop

        print(json.dumps(uvloop.run(_worker(args))))
        return 0
    reason = RealPrometheus.available()
    if reason:
        print(f"cannot run: {reason}")
        return 1
    trees: list[Path | None] = [tree.resolve() for tree in args.tree] if args.tree else [None]
    labels = [str(tree) if tree is not None else "this tree" for tree in trees]
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    figures: Figures = {label: {case: [] for case in args.cases} for label in labels}
    results: dict[str, Any] = {"machine": machine(), "connections": args.connections}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        series: list[Any] = [
            CounterLine(
                "http_requests_total",
                {"namespace": "default", "pod": f"web-{i:04d}"},
                1.0 + i / 1000,
            )
            for i in range(PODS)
        ]
        prometheus = RealPrometheus(workdir / "prom", series, before=900, after=1800)
        prometheus.workdir.mkdir()
        prometheus.backfill()
        prometheus.start()
        servers: dict[str, ServerProcess] = {}
        try:
            for number, (label, tree) in enumerate(zip(labels, trees, strict=True)):
                servers[label] = start(workdir / f"server-{number}", prometheus, tree)
            for server in servers.values():
                wait_listed(server)
            if not args.no_direct:
                results["prometheus_direct"] = direct_latency(prometheus, args.seconds)
            results["load_before"] = round(os.getloadavg()[0], 2)
            print(f"load average before: {results['load_before']}", file=sys.stderr, flush=True)
            run_rounds(args, prometheus, servers, figures)
            if args.in_process:
                results["in_process"] = in_process_rounds(
                    args, prometheus, workdir, dict(zip(labels, trees, strict=True))
                )
            results["load_after"] = round(os.getloadavg()[0], 2)
        finally:
            for server in servers.values():
                stop_server(server)
            prometheus.stop()
    results["runs"] = figures
    print(json.dumps(results, indent=2))
    print()
    report(args, results, figures)
    failed = any(
        run["non_2xx"] or run["socket_errors"] or not run["requests"]
        for per_case in figures.values()
        for runs in per_case.values()
        for run in runs
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
