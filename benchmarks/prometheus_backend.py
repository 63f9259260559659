"""Prometheus backend benchmark: `pods/*` over 1,000 pods against a real Prometheus.

Backfills a real Prometheus (Debian `prometheus`/`promtool`) with `http_requests_total` for
1,000 pods, starts `serve --demo-file <1,000 pods> --prometheus-url ... --config ...`, then:

1. times the exact PromQL the server sends, straight against Prometheus (httpx keep-alive);
2. runs wrk against the server for the list (`pods/*?labelSelector=app%3Dweb`, 1,000 items)
   and the single-object request;
3. reads the server's own `/metrics` to split each request's time between Prometheus
   (`custom_metrics_server_prometheus_request_duration_seconds`) and the server itself.

    python benchmarks/prometheus_backend.py             # about 1 minute
    python benchmarks/prometheus_backend.py --smoke     # 1 s per case
"""

from __future__ import annotations

import argparse
import json
import re
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from request_path import cpu_seconds, machine, rss_mib, run_wrk, start_serve  # noqa: E402

from tests.prometheus.real_prometheus import CounterLine, RealPrometheus  # noqa: E402

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
PROMQL = 'sum(rate(http_requests_total{namespace="default"}[2m])) by (pod)'


def start(workdir: Path, prometheus: RealPrometheus) -> tuple[subprocess.Popen[str], str]:
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
    return start_serve(
        workdir,
        "--demo-file",
        str(cluster),
        "--prometheus-url",
        prometheus.url,
        "--config",
        str(rules),
        "--metrics-max-age",
        "1h",
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
        "p99_ms": round(samples[int(len(samples) * 0.99) - 1], 2),
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
    pid: int, base: str, path: str, context: ssl.SSLContext, *, seconds: float, connections: int
) -> dict[str, Any]:
    """wrk against one path, with the time split between Prometheus and the server."""
    run_wrk(base + path, min(2.0, seconds), connections)  # warm-up
    before_split = split(base, context, "pods")
    before_cpu = cpu_seconds(pid)
    result = run_wrk(base + path, seconds, connections)
    used = cpu_seconds(pid) - before_cpu
    after_split = split(base, context, "pods")
    requests = after_split["requests"] - before_split["requests"]
    total = after_split["total_s"] - before_split["total_s"]
    prom = after_split["prometheus_s"] - before_split["prometheus_s"]
    result["server_cpu_ms_per_request"] = round(used / max(1, result["requests"]) * 1e3, 2)
    result["mean_ms"] = round(total / max(1, requests) * 1e3, 2)
    result["prometheus_mean_ms"] = round(prom / max(1, requests) * 1e3, 2)
    result["server_share"] = round(1 - prom / total, 3) if total else None
    result["rss_mib"] = round(rss_mib(pid), 1)
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    seconds = 1.0 if args.smoke else args.seconds
    reason = RealPrometheus.available()
    if reason:
        print(f"cannot run: {reason}")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        series = [
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
        process, base = start(workdir, prometheus)
        try:
            context = ssl.create_default_context(cafile=str(workdir / "certs" / "apiserver.crt"))
            with httpx.Client(base_url=base, verify=context, timeout=30) as client:
                deadline = time.monotonic() + 30
                while len(client.get(LIST).json().get("items", [])) != PODS:
                    assert time.monotonic() < deadline, "server never listed the metric"
                    time.sleep(0.2)
            direct = direct_latency(prometheus, seconds)
            results: dict[str, Any] = {"machine": machine(), "prometheus_direct": direct}
            for name, path in (("list_1000", LIST), ("single", SINGLE)):
                results[name] = measure(
                    process.pid, base, path, context, seconds=seconds, connections=args.connections
                )
        finally:
            process.terminate()
            process.wait(timeout=30)
            prometheus.stop()
    print(json.dumps(results, indent=2))
    print()
    print(
        "| Case | req/s | p50 ms | p99 ms | mean ms | in Prometheus ms | server share | server CPU ms/req |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in ("list_1000", "single"):
        r = results[name]
        print(
            f"| {name} | {r['rps']:.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['mean_ms']} | "
            f"{r['prometheus_mean_ms']} | {r['server_share']:.0%} | {r['server_cpu_ms_per_request']} |"
        )
    print(f"| PromQL direct ({PODS} series) | | {direct['p50_ms']} | {direct['p99_ms']} | | | | |")
    failed = any(
        results[n]["non_2xx"] or results[n]["socket_errors"] for n in ("list_1000", "single")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
