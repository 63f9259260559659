"""Authenticated request path: what delegated authentication and authorization cost per request.

Runs the real server (`tests.security.serve_secure`, the same app and uvicorn settings as the
CLI) on the simulated cluster (1,000 pods by default) over TLS keep-alive, with the fake
kube-apiserver of the tests answering TokenReview and SubjectAccessReview, and loads one
single-pod URL with `wrk -t1 -c16 --latency` (docs/performance.md settings) in three modes:

* demo: no delegated auth (the demo gate: headers stripped, everyone allowed);
* anonymous: delegated auth, no credentials, the SubjectAccessReview for system:anonymous cached;
* token: delegated auth, `Authorization: Bearer` (TokenReview cached) plus spoofed `X-Remote-*`
  headers (stripped), the SubjectAccessReview cached.

wrk cannot present a client certificate, so the front-proxy path (certificate check cached per
connection, `X-Remote-*` parsed per request) is measured in process: `gate.check` on a scope
carrying the front-proxy certificate and headers, against the other paths, in us per call.

    python benchmarks/authenticated_path.py            # about 2 minutes
    python benchmarks/authenticated_path.py --smoke    # 1 s per case
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.request_path import _ms, cpu_seconds, rss_mib  # noqa: E402
from tests.fakes.auth_webhooks import FakeAuthApiServer  # noqa: E402
from tests.security.conftest import (  # noqa: E402
    front_proxy_headers,
    full_flags,
    make_pki,
    start_secure,
    stop,
)

TOKEN = "bench-token"  # a fake credential for the fake kube-apiserver


def run_wrk(url: str, seconds: float, connections: int, headers: list[str]) -> dict[str, Any]:
    command = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency"]
    for header in headers:
        command += ["-H", header]
    output = subprocess.run([*command, url], capture_output=True, text=True, check=True).stdout
    result: dict[str, Any] = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))}  # type: ignore[union-attr]
    for percentile in ("50", "99"):
        match = re.search(rf"^\s+{percentile}%\s+(\S+)", output, re.MULTILINE)
        result[f"p{percentile}_ms"] = _ms(match.group(1)) if match else None
    requests = re.search(r"(\d+) requests in", output)
    result["requests"] = int(requests.group(1)) if requests else 0
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    result["non_2xx"] = int(errors.group(1)) if errors else 0
    return result


def measure(
    pid: int, url: str, seconds: float, connections: int, headers: list[str]
) -> dict[str, Any]:
    run_wrk(url, min(2.0, seconds), connections, headers)
    before = cpu_seconds(pid)
    result = run_wrk(url, seconds, connections, headers)
    used = cpu_seconds(pid) - before
    result["server_cpu_us_per_request"] = round(used / max(1, result["requests"]) * 1e6, 1)
    result["rss_mib"] = round(rss_mib(pid), 1)
    return result


def gate_microbenchmark(
    pki: Any, fake: FakeAuthApiServer, workdir: Path, calls: int
) -> dict[str, float]:
    """us per `gate.check` for each authentication path, caches warm, in this process."""
    from cryptography.hazmat.primitives.serialization import Encoding

    from custom_metrics_server.security.options import add_security_flags, build_security

    workdir.mkdir(parents=True, exist_ok=True)
    parser = argparse.ArgumentParser()
    parser.add_argument("--cert-dir", type=Path)
    parser.add_argument("--tls-cert-file", type=Path)
    parser.add_argument("--tls-private-key-file", type=Path)
    parser.add_argument("--fast-retries", action="store_true")
    add_security_flags(parser)
    args = parser.parse_args(
        ["--cert-dir", str(workdir), *full_flags(pki, fake.write_kubeconfig(workdir / "kc"))]
    )
    delegated = build_security(args, demo=False)
    demo = build_security(parser.parse_args(["--cert-dir", str(workdir)]), demo=True)
    der = pki.front_proxy.cert.public_bytes(Encoding.DER)
    path = (
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/web-1/http_requests_per_second"
    )
    base_headers = [(b"host", b"127.0.0.1"), (b"user-agent", b"wrk"), (b"accept", b"*/*")]
    fp = [
        (n.lower().encode(), v.encode())
        for n, v in front_proxy_headers(
            "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
            "system:serviceaccounts",
            "system:serviceaccounts:kube-system",
        )
    ]
    cases: dict[str, tuple[Any, list[tuple[bytes, bytes]], dict[str, Any] | None]] = {
        "demo gate": (demo.gate, base_headers, None),
        "anonymous, SAR cached": (delegated.gate, base_headers, None),
        "token, TokenReview + SAR cached": (
            delegated.gate,
            [*base_headers, (b"authorization", f"Bearer {TOKEN}".encode())],
            None,
        ),
        "front proxy, certificate + SAR cached": (
            delegated.gate,
            [*base_headers, *fp],
            {"tls": {"client_cert_der": der}},
        ),
    }

    async def run() -> dict[str, float]:
        results: dict[str, float] = {}
        for name, (gate, headers, extensions) in cases.items():
            template: dict[str, Any] = {
                "type": "http",
                "method": "GET",
                "path": path,
                "query_string": b"",
            }
            if extensions:
                template["extensions"] = extensions
            assert await gate.check({**template, "headers": list(headers)}) is None, name
            started = time.perf_counter()
            for _ in range(calls):
                await gate.check({**template, "headers": list(headers)})
            results[name] = round((time.perf_counter() - started) / calls * 1e6, 2)
        return results

    return asyncio.run(run())


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--pods", type=int, default=1000)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is not installed (Debian: apt-get install wrk)", file=sys.stderr)
        return 2
    seconds = 1.0 if args.smoke else args.seconds
    pods = 200 if args.smoke else args.pods
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, FakeAuthApiServer() as fake:
        work = Path(tmp)
        pki = make_pki(work / "pki")
        fake.allow_all = True
        fake.tokens[TOKEN] = {"username": "bench", "groups": ["bench"]}
        kubeconfig = fake.write_kubeconfig(work / "kubeconfig")
        demo_flags = [
            "--demo",
            "--tls-cert-file",
            str(pki.serving.cert_file),
            "--tls-private-key-file",
            str(pki.serving.key_file),
        ]
        modes = {
            "demo": (demo_flags, []),
            "anonymous": (full_flags(pki, kubeconfig), []),
            "token": (
                full_flags(pki, kubeconfig),
                [
                    f"Authorization: Bearer {TOKEN}",
                    "X-Remote-User: admin",
                    "X-Remote-Group: system:masters",
                ],
            ),
        }
        for mode, (flags, headers) in modes.items():
            server = start_secure(
                work / mode,
                *flags,
                "--demo-pods",
                str(pods),
                "--demo-web-pods",
                str(min(1000, pods)),
                ca_file=pki.serving_ca.cert_file,
            )
            try:
                with server.client(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
                    listing = client.get(
                        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/http_requests_per_second?labelSelector=app%3Dweb"
                    )
                    pod = listing.json()["items"][0]["describedObject"]["name"]
                url = f"{server.url}/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/{pod}/http_requests_per_second"
                result = measure(server.process.pid, url, seconds, args.connections, headers)
                rows.append({"mode": mode, "pods": pods, **result})
                print(json.dumps(rows[-1]), file=sys.stderr)
            finally:
                stop(server)
        reviews = (len(fake.token_reviews), len(fake.access_reviews))
        micro = gate_microbenchmark(pki, fake, work / "micro", 2000 if args.smoke else 20000)
    print("| mode | pods | req/s | p50 ms | p99 ms | server µs/req | RSS MiB | non-2xx |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['mode']} | {row['pods']:,} | {row['rps']:,.0f} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {row['server_cpu_us_per_request']} | {row['rss_mib']} | {row['non_2xx']} |"
        )
    print(
        f"\nTokenReviews / SubjectAccessReviews made during the wrk runs: {reviews[0]} / {reviews[1]}"
    )
    print("\n| gate.check in process | µs per call |\n|---|---|")
    for name, value in micro.items():
        print(f"| {name} | {value} |")
    failed = [row for row in rows if row["non_2xx"] or row["requests"] == 0]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
