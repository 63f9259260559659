"""Pass-through benchmark: the latency and CPU the pass-through adds over the upstream's own, on
loopback (issue 13 target: <= 1 ms p50 added).

Two real server processes over TLS:

* the **upstream**: `serve --demo --demo-file <PODS pods with values>`, queried directly;
* **us**: `serve --demo --backends-config` with the same objects (the cluster view) and a
  `passthrough` entry pointing at the upstream (its CA file, every metric routed to it).

For each case, the same request is sent to the upstream directly and through us by wrk (one
connection, one request at a time: the latency of a request, not of a queue), then the
percentiles and each process's CPU time (utime + stime) per request are compared:

* `single`: one pod's value (`pods/web-0100/http_requests`): the HPA's Object/Pods path for one
  object, one upstream call;
* `list`: `pods/*?labelSelector=app%3Dweb` over all PODS pods: our query layer resolves the
  selector, the pass-through makes one `*` call to the upstream and filters it;
* `external`: an external metric with its label selector.

The `fan-out against *` line calibrates `prefers_wildcard`: the total CPU (both processes) of
one single-object request through us against the list of PODS items, giving the cost of one
more item as a fraction of one more call (`ITEM_COST` in backends/passthrough/backend.py).

    python benchmarks/passthrough.py             # 10 s per case, 1,000 pods
    python benchmarks/passthrough.py --smoke     # 1 s per case, 200 pods (make bench-smoke)
    python benchmarks/passthrough.py --out results.json

`--smoke` fails (exit 1) when a request through us is not answered 200, or when the added p50 of
the single-object case is over 5 ms (the 1 ms target is for a quiet machine; the smoke run only
catches a regression by an order of magnitude on a shared one).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from request_path import cpu_seconds, machine, run_wrk  # noqa: E402

from custom_metrics_server.testing.server_process import (  # noqa: E402
    ServerProcess,
    start_server,
)

P2 = "/apis/custom.metrics.k8s.io/v1beta2"
E = "/apis/external.metrics.k8s.io/v1beta1"


def cases(pods: int) -> dict[str, str]:
    middle = f"web-{pods // 2:04d}"
    return {
        "single": f"{P2}/namespaces/default/pods/{middle}/http_requests",
        "list": f"{P2}/namespaces/default/pods/*/http_requests?labelSelector=app%3Dweb",
        "external": f"{E}/namespaces/default/queue_depth?labelSelector=queue%3Djobs",
    }


def fixture(pods: int) -> dict[str, Any]:
    objects: list[dict[str, Any]] = [{"resource": "namespaces", "name": "default"}]
    objects += [
        {
            "resource": "pods",
            "namespace": "default",
            "name": f"web-{i:04d}",
            "labels": {"app": "web"},
        }
        for i in range(pods)
    ]
    values = [
        {
            "resource": "pods",
            "namespace": "default",
            "name": f"web-{i:04d}",
            "metric": "http_requests",
            "value": f"{i + 1}500m",
            "window": 60,
        }
        for i in range(pods)
    ]
    external = [
        {"metric": "queue_depth", "labels": {"queue": "jobs"}, "value": 42},
        {"metric": "queue_depth", "labels": {"queue": "mail"}, "value": 7},
    ]
    return {"objects": objects, "values": values, "external": external}


def start(workdir: Path, pods: int) -> tuple[ServerProcess, ServerProcess]:
    document = fixture(pods)
    upstream_file = workdir / "upstream.yaml"
    upstream_file.write_text(yaml.safe_dump(document))
    upstream = start_server(workdir / "upstream", "--demo-file", str(upstream_file), timeout=60)
    backends = {
        "backends": [
            {"name": "objects", "type": "fixture", "settings": {"objects": document["objects"]}},
            {
                "name": "upstream",
                "type": "passthrough",
                "settings": {
                    "url": upstream.url,
                    "caFile": str(upstream.cert_dir / "apiserver.crt"),
                },
                "routes": [{"metric": "*"}],
            },
        ]
    }
    backends_file = workdir / "backends.yaml"
    backends_file.write_text(yaml.safe_dump(backends))
    try:
        us = start_server(workdir / "us", "--backends-config", str(backends_file), timeout=60)
    except BaseException:
        upstream.stop()
        raise
    return upstream, us


def check(server: ServerProcess, path: str) -> bytes:
    with server.client() as client:
        answer = client.get(path)
    if answer.status_code != 200:
        raise SystemExit(f"{server.url}{path}: {answer.status_code} {answer.text[:300]}")
    return answer.content


def measure(
    target: ServerProcess, others: list[ServerProcess], path: str, seconds: float
) -> dict[str, Any]:
    """wrk, one connection, against `target`; CPU per request of every process involved."""
    pids = [target.pid] + [other.pid for other in others]
    before = [cpu_seconds(pid) for pid in pids]
    result = run_wrk(f"{target.url}{path}", seconds, 1)
    after = [cpu_seconds(pid) for pid in pids]
    requests = max(1, result["requests"])
    result["cpu_ms"] = [
        round((a - b) / requests * 1e3, 3) for a, b in zip(after, before, strict=True)
    ]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="1 s per case, 200 pods")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3, help="runs per case; medians reported")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is not installed (Debian: apt-get install wrk)", file=sys.stderr)
        return 2
    pods = 200 if args.smoke else args.pods
    seconds = 1.0 if args.smoke else args.seconds
    rounds = 1 if args.smoke else args.rounds
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-passthrough-") as tmp:
        upstream, us = start(Path(tmp), pods)
        try:
            for name, path in cases(pods).items():
                direct = check(upstream, path)
                through = check(us, path)
                if name != "list" and direct != through:
                    print(f"warning: {name}: the answers differ", file=sys.stderr)
                # Warm both (connections, caches) before measuring.
                run_wrk(f"{upstream.url}{path}", 1, 1)
                run_wrk(f"{us.url}{path}", 1, 1)
                runs: dict[str, list[dict[str, Any]]] = {"upstream": [], "us": []}
                for _ in range(rounds):  # alternate, so a drift of the load hits both
                    runs["upstream"].append(measure(upstream, [], path, seconds))
                    runs["us"].append(measure(us, [upstream], path, seconds))
                rows[name] = {side: _median(one) for side, one in runs.items()}
        finally:
            us.stop()
            upstream.stop()
    report = {
        "machine": machine(),
        "pods": pods,
        "seconds": seconds,
        "rounds": rounds,
        "load": _load(),
        "cases": rows,
    }
    _print(report)
    single_us = rows["single"]["us"]
    list_us = rows["list"]["us"]
    total_single = sum(single_us["cpu_ms"])
    total_list = sum(list_us["cpu_ms"])
    item_cost = (total_list - total_single) / pods / total_single if total_single else 0.0
    report["item_cost"] = round(item_cost, 4)
    print(
        f"\nfan-out against *: one call through us {total_single:.3f} ms CPU (both processes), "
        f"the list of {pods} {total_list:.3f} ms: one more item costs {item_cost:.4f} of a call"
    )
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))
    added = rows["single"]["us"]["p50_ms"] - rows["single"]["upstream"]["p50_ms"]
    failed = any(row["us"]["non_2xx"] or row["us"]["socket_errors"] for row in rows.values())
    if args.smoke and (failed or added > 5.0):
        print(
            f"FAILED: non-2xx or socket errors through us, or {added:.2f} ms added", file=sys.stderr
        )
        return 1
    return 0


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("rps", "p50_ms", "p90_ms", "p99_ms"):
        out[key] = round(statistics.median(run[key] for run in runs), 3)
    out["cpu_ms"] = [
        round(statistics.median(run["cpu_ms"][i] for run in runs), 3)
        for i in range(len(runs[0]["cpu_ms"]))
    ]
    out["non_2xx"] = sum(run["non_2xx"] for run in runs)
    out["socket_errors"] = "; ".join(run["socket_errors"] for run in runs if run["socket_errors"])
    return out


def _load() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def _print(report: dict[str, Any]) -> None:
    print(
        f"{report['pods']} pods, {report['seconds']:g} s x {report['rounds']} per side, load {report['load']}"
    )
    print(
        f"{'case':<9} {'side':<9} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'CPU ms/req (target; upstream)':>30}"
    )
    for name, row in report["cases"].items():
        for side in ("upstream", "us"):
            one = row[side]
            cpu = " ; ".join(f"{value:.3f}" for value in one["cpu_ms"])
            print(
                f"{name:<9} {side:<9} {one['rps']:>8.0f} {one['p50_ms']:>8.3f} "
                f"{one['p99_ms']:>8.3f} {cpu:>30}"
            )
        added = row["us"]["p50_ms"] - row["upstream"]["p50_ms"]
        print(f"{name:<9} {'added':<9} {'':>8} {added:>8.3f}")


if __name__ == "__main__":
    sys.exit(main())
