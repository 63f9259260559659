"""Request-path benchmark: the real server over TLS keep-alive, loaded by wrk.

Starts `custom-metrics-server serve --demo` with 1,000 and 10,000 simulated pods (1,000 of them
`app=web` in `default`), warms up, then runs `wrk -t1 -c16 --latency` (the settings of
docs/performance.md and the shared reference measurements) against:

* single: `GET .../v1beta2/namespaces/default/pods/<pod>/http_requests_per_second`
* list:   `GET .../v1beta2/namespaces/default/pods/*/http_requests_per_second?labelSelector=app%3Dweb`
          (1,000 items, about 290 kB)

and reports requests/s, p50/p99 latency, the server's CPU per request and its RSS. Results go
to stdout as a Markdown table and to `benchmarks/results/<time>.json`.

    python benchmarks/request_path.py            # full run (about 2 minutes)
    python benchmarks/request_path.py --smoke    # 1 s per case, checks the harness works
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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

from custom_metrics_server.testing.server_process import (  # noqa: E402
    start_server as start_launched,
)

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def start_server(
    workdir: Path, pods: int, web_pods: int, *extra: str
) -> tuple[subprocess.Popen[str], str]:
    """The server process and its base URL, once it printed its banner."""
    return start_serve(workdir, "--demo-pods", str(pods), "--demo-web-pods", str(web_pods), *extra)


def start_serve(workdir: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    """`serve --demo` with `args` on a free port; the process and its base URL (the shared
    launcher, `custom_metrics_server.testing`)."""
    server = start_launched(workdir, *args, ready=False, timeout=60)
    return server.process, server.url


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mib(pid: int) -> float:
    """Resident set size in MiB."""
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if not match:
        raise ValueError(f"unexpected wrk latency {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def run_wrk(
    url: str, seconds: float, connections: int, headers: tuple[str, ...] = ()
) -> dict[str, Any]:
    """One wrk run; requests/s, latency percentiles and error counts."""
    extra = [arg for header in headers for arg in ("-H", header)]
    output = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "--latency",
            *extra,
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result: dict[str, Any] = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))}  # type: ignore[union-attr]
    for percentile in ("50", "90", "99"):
        match = re.search(rf"^\s+{percentile}%\s+(\S+)", output, re.MULTILINE)
        result[f"p{percentile}_ms"] = _ms(match.group(1)) if match else None
    requests = re.search(r"(\d+) requests in", output)
    result["requests"] = int(requests.group(1)) if requests else 0
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    result["non_2xx"] = int(errors.group(1)) if errors else 0
    socket_errors = re.search(r"Socket errors: (.*)", output)
    result["socket_errors"] = socket_errors.group(1) if socket_errors else ""
    return result


def measure(
    pid: int, url: str, *, seconds: float, connections: int, headers: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A warm-up run, then the measured run with the server's CPU per request."""
    run_wrk(url, min(2.0, seconds), connections, headers)
    before = cpu_seconds(pid)
    result = run_wrk(url, seconds, connections, headers)
    used = cpu_seconds(pid) - before
    result["server_cpu_us_per_request"] = round(used / max(1, result["requests"]) * 1e6, 1)
    result["server_cores"] = round(used / seconds, 2)
    result["rss_mib"] = round(rss_mib(pid), 1)
    return result


def first_web_pod(base: str, cafile: Path) -> str:
    """Name of one `app=web` pod, read through the API like any client."""
    import ssl
    import urllib.request

    context = ssl.create_default_context(cafile=str(cafile))
    path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/http_requests_per_second?labelSelector=app%3Dweb"
    with urllib.request.urlopen(base + path, context=context, timeout=30) as response:
        body = json.loads(response.read())
    return str(body["items"][0]["describedObject"]["name"])


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    wrk = subprocess.run(["wrk", "--version"], capture_output=True, text=True, check=False)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "wrk": (wrk.stdout or wrk.stderr).splitlines()[0] if (wrk.stdout or wrk.stderr) else "",
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="1 s per case with 200 pods")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--pods", type=int, nargs="*", default=[1000, 10000])
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is not installed (Debian: apt-get install wrk)", file=sys.stderr)
        return 2
    sizes = [200] if args.smoke else args.pods
    seconds = 1.0 if args.smoke else args.seconds
    rows = []
    for pods in sizes:
        web = min(1000, pods)
        with tempfile.TemporaryDirectory() as tmp:
            process, base = start_server(Path(tmp), pods, web)
            try:
                pod = first_web_pod(base, Path(tmp) / "certs" / "apiserver.crt")
                cases = {
                    "resource": f"{base}/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/kube_pod_resource_request?labelSelector=app%3Dweb&metricLabelSelector=resource%3Dcpu",
                    "single": f"{base}/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/{pod}/http_requests_per_second",
                    "list": f"{base}/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/http_requests_per_second?labelSelector=app%3Dweb",
                }
                for case, url in cases.items():
                    result = measure(
                        process.pid, url, seconds=seconds, connections=args.connections
                    )
                    rows.append(
                        {
                            "pods": pods,
                            "case": case,
                            "items": 1 if case == "single" else web,
                            "case_detail": "KEP-1748 requests, computed per request"
                            if case == "resource"
                            else "",
                            **result,
                        }
                    )
                    print(json.dumps(rows[-1]), file=sys.stderr)
            finally:
                process.terminate()
                process.wait(timeout=30)
    report = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "wrk": f"-t1 -c{args.connections} -d{seconds}s --latency",
        "rows": rows,
    }
    print(
        "| pods | case | items | req/s | p50 ms | p99 ms | server µs/req | server cores | RSS MiB | errors |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['pods']:,} | {row['case']} | {row['items']:,} | {row['rps']:,.0f} | {row['p50_ms']:.2f} | "
            f"{row['p99_ms']:.2f} | {row['server_cpu_us_per_request']} | {row['server_cores']} | {row['rss_mib']} | "
            f"{row['non_2xx']} {row['socket_errors']} |"
        )
    if not args.smoke:
        results = ROOT / "benchmarks" / "results"
        results.mkdir(parents=True, exist_ok=True)
        (results / f"request_path-{report['time']}.json").write_text(
            json.dumps(report, indent=2) + "\n"
        )
    failed = [row for row in rows if row["non_2xx"] or row["socket_errors"] or row["requests"] == 0]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
