"""Protobuf against JSON on the `pods/*` path (issue 7): the real server over TLS, loaded by wrk.

Starts `custom-metrics-server serve --demo` with 10,000 simulated pods, all `app=web` in
`default`, and runs `wrk -t1 -c16 --latency` with `Accept: application/json` and with
`Accept: application/vnd.kubernetes.protobuf` against:

* list:   `GET .../v1beta2/namespaces/default/pods/*/http_requests_per_second` (10,000 items)
* single: `GET .../v1beta2/namespaces/default/pods/<pod>/http_requests_per_second`

then, in process, times the encoders alone: a 10,000-item MetricValueList (first encoding,
and again from the per-sample caches) and a 10,000-pod PodMetricsList (schema-driven).
Prints a Markdown table; results go to `benchmarks/results/protobuf-<time>.json`.

    python benchmarks/protobuf.py            # about a minute
    python benchmarks/protobuf.py --smoke    # 1 s per case with 500 pods
"""

from __future__ import annotations

import argparse
import json
import shutil
import ssl
import sys
import tempfile
import time
import urllib.request
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from request_path import ROOT, machine, measure, start_server

ACCEPT = {
    "json": "application/json",
    "protobuf": "application/vnd.kubernetes.protobuf",
}
PREFIX = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods"


def fetch(url: str, cafile: Path, accept: str) -> bytes:
    """One response body, read through the API like any client."""
    context = ssl.create_default_context(cafile=str(cafile))
    request = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(request, context=context, timeout=60) as response:
        return bytes(response.read())


def _seconds(function: Any, argument: Any, kwargs: dict[str, Any]) -> float:
    started = time.perf_counter()
    function(argument, **kwargs)
    return time.perf_counter() - started


def encoder_timings(items: int) -> list[dict[str, Any]]:
    """The encoders alone, in this process: ms per body."""
    from custom_metrics_server.api import protobuf, wire
    from custom_metrics_server.domain import ItemShape, ObjectRef, Sample
    from custom_metrics_server.machinery.labels import EVERYTHING

    def samples() -> list[Sample]:
        return [
            Sample(
                ObjectRef("Pod", "default", f"web-{i:05d}-5d78f", "v1"),
                "http_requests_per_second",
                Decimal(i) / 7,
                1767323045.0,
                60,
            )
            for i in range(items)
        ]

    kwargs: dict[str, Any] = {
        "api_version": "custom.metrics.k8s.io/v1beta2",
        "shape": ItemShape.V1BETA2,
        "metric_selector": EVERYTHING,
    }
    rows = []
    for name, encode in (
        ("json", wire.metric_value_list),
        ("protobuf", protobuf.metric_value_list),
    ):
        cold = min(_seconds(encode, samples(), kwargs) for _ in range(3))
        cached = samples()
        encode(cached, **kwargs)
        warm = min(_seconds(encode, cached, kwargs) for _ in range(20))
        rows.append(
            {
                "body": f"MetricValueList, {items:,} items",
                "encoding": name,
                "first_ms": round(cold * 1e3, 2),
                "cached_ms": round(warm * 1e3, 2),
                "bytes": len(encode(cached, **kwargs)),
            }
        )
    pod = {
        "metadata": {
            "name": "",
            "namespace": "default",
            "creationTimestamp": "2026-01-02T03:04:06Z",
            "labels": {"app": "web", "pod-template-hash": "5d78f"},
        },
        "timestamp": "2026-01-02T03:04:05Z",
        "window": "20.038s",
        "containers": [
            {"name": "app", "usage": {"cpu": "250m", "memory": "128Mi"}},
            {"name": "sidecar", "usage": {"cpu": "1203114n", "memory": "24572Ki"}},
        ],
    }
    document = {
        "kind": "PodMetricsList",
        "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": {},
        "items": [
            {**pod, "metadata": {**pod["metadata"], "name": f"web-{i:05d}"}} for i in range(items)
        ],
    }
    for name, encode_document in (("json", wire.dumps), ("protobuf", protobuf.encode_document)):
        took = min(_seconds(encode_document, document, {}) for _ in range(5))
        rows.append(
            {
                "body": f"PodMetricsList, {items:,} pods (2 containers)",
                "encoding": name,
                "first_ms": round(took * 1e3, 2),
                "cached_ms": None,
                "bytes": len(encode_document(document)),
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="1 s per case with 500 pods")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--pods", type=int, default=10000)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is not installed (Debian: apt-get install wrk)", file=sys.stderr)
        return 2
    pods = 500 if args.smoke else args.pods
    seconds = 1.0 if args.smoke else args.seconds
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        process, base = start_server(Path(tmp), pods, pods)
        cafile = Path(tmp) / "certs" / "apiserver.crt"
        try:
            listing = json.loads(
                fetch(f"{base}{PREFIX}/*/http_requests_per_second", cafile, ACCEPT["json"])
            )
            pod = listing["items"][0]["describedObject"]["name"]
            cases = {
                "list": (f"{base}{PREFIX}/*/http_requests_per_second", len(listing["items"])),
                "single": (f"{base}{PREFIX}/{pod}/http_requests_per_second", 1),
            }
            for case, (url, items) in cases.items():
                for encoding, accept in ACCEPT.items():
                    body = fetch(url, cafile, accept)
                    result = measure(
                        process.pid,
                        url,
                        seconds=seconds,
                        connections=args.connections,
                        headers=(f"Accept: {accept}",),
                    )
                    rows.append(
                        {
                            "pods": pods,
                            "case": case,
                            "items": items,
                            "encoding": encoding,
                            "bytes": len(body),
                            **result,
                        }
                    )
                    print(json.dumps(rows[-1]), file=sys.stderr)
        finally:
            process.terminate()
            process.wait(timeout=30)
    encoders = encoder_timings(pods)
    report = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "wrk": f"-t1 -c{args.connections} -d{seconds}s --latency",
        "rows": rows,
        "encoders": encoders,
    }
    print(
        "| case | items | Accept | body bytes | req/s | p50 ms | p99 ms | server µs/req | errors |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['case']} | {row['items']:,} | {row['encoding']} | {row['bytes']:,} | {row['rps']:,.0f} | "
            f"{row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {row['server_cpu_us_per_request']} | "
            f"{row['non_2xx']} {row['socket_errors']} |"
        )
    print()
    print("| body | encoding | first encoding ms | from caches ms | bytes |")
    print("|---|---|---|---|---|")
    for row in encoders:
        cached = "" if row["cached_ms"] is None else row["cached_ms"]
        print(
            f"| {row['body']} | {row['encoding']} | {row['first_ms']} | {cached} | {row['bytes']:,} |"
        )
    if not args.smoke:
        results = ROOT / "benchmarks" / "results"
        results.mkdir(parents=True, exist_ok=True)
        (results / f"protobuf-{report['time']}.json").write_text(
            json.dumps(report, indent=2) + "\n"
        )
    failed = [row for row in rows if row["non_2xx"] or row["socket_errors"] or row["requests"] == 0]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
