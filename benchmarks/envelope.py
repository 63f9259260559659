"""The Kubernetes envelope (issue 17): the real server against a fake cluster of 10k-150k pods.

Starts the fake world in its own process (`tests/fakes/envelope_world.py`: the fake
kube-apiserver over the real list/watch wire, fake kubelets behind its node proxy, the auth
fake, a command channel for watch-event streams), then the real `custom-metrics-server serve`
against it (delegated authentication and authorization, `--metric-resolution 15s`), and
measures, from outside the server (its /proc, its /metrics self-metrics, the fake's
accounting):

(a) ingest: spawn -> `/readyz` 200, the server's CPU for it and the fake's first LIST -> ready;
(b) events: the CPU share of a steady 1,000 pod MODIFIED events/s over 60 s, above the
    scrape-only baseline measured over the same number of scrape intervals;
(c) scrapes: CPU per scrape round (60 s = 4 rounds, nothing else running), the round's wall
    time (self-metric), outcomes; the parse share by parsing the same kubelet bodies in
    process (`--breakdown`) and, with `--profile`, by py-spy in the running server;
(d) RSS after ingest and after the scrape rounds, and (`--breakdown`, in a separate process)
    what each part costs: tracemalloc of the records, label index/inventory, usage store;
(e) `/metrics/resources`: CPU per scrape (baseline removed), wall time, size;
(f) serving while the event stream and the scrapes run: 333 req/s of HPA-shaped queries at a
    fixed rate (open loop, latency from the scheduled time; a mix of Pods queries over one
    workload's 30 pods and Object queries on workloads, 5,000 distinct HPAs), then
    `wrk -t1 -c16` on `pods/*` over the 3,000-pod namespace.

Scale-out (`--replicas N`): N servers against one world; what each costs the API server
(requests and bytes per replica at ingest and per minute in steady state, by kind) and the
kubelets (scrapes per node per interval), measured at the fake.

    python benchmarks/envelope.py --scale 10k              # one scale, full phases (~5 min)
    python benchmarks/envelope.py --scale all --breakdown  # 10k, 50k, 150k: the scaling table
    python benchmarks/envelope.py --pods 150000 --nodes 5000 --namespaces 3000 --workloads 15000
    python benchmarks/envelope.py --scale 10k --replicas 3 # scale-out figures
    python benchmarks/envelope.py --smoke                  # ~30 s at small scale (CI)
    python benchmarks/envelope.py --scale 150k --ingest-only --repeat 2 --compare /tmp/old
                                               # ingest and RSS alone, old and new alternated

Options: `--profile` (py-spy, if installed: `pip install py-spy`), `--window` (seconds of the
events and serving windows, default 60), `--interval` (scrape interval, default 15).
Results: a Markdown table on stdout, JSON under benchmarks/results/envelope-<time>.json.
The machine's load average is recorded at every phase: the server, the fake world, the load
generator and wrk share the same cores, so wall-time figures are only as good as the load.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import queue
import random
import re
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
TOKEN = "cluster-process-tester"  # tests.fakes.cluster_process.TOKEN (the auth fake's user)
API = "/apis/custom.metrics.k8s.io/v1beta2"
SCALES = {"10k": 10_000, "50k": 50_000, "150k": 150_000}

TARGETS = {
    "ingest_s": 6.0,
    "events_core_share": 0.10,
    "scrape_round_cpu_s": 3.0,
    "parse_round_cpu_s": 0.2,
    "rss_mib": 450.0,
    "resources_cpu_s": 1.0,
    "hpa_p99_ms": 20.0,
    "wrk_p99_ms": 30.0,
}


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {load()}] {message}", file=sys.stderr, flush=True)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mib(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20


def memory_mib(pid: int | str) -> dict[str, float]:
    """The process's resident memory from /proc/PID/status, MiB: VmRSS (all), RssAnon (the
    heap: what the server's own objects and the allocator's free lists hold), RssFile (the
    mapped files: interpreter, extension modules), VmHWM (the peak RSS so far)."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
            out[name] = round(int(value.split()[0]) / 1024, 1)
    return out


def machine() -> dict[str, Any]:
    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = Path("/proc/meminfo").read_text().split("\n", 1)[0].split()[1]
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(int(mem) / 2**20, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


# ---------------------------------------------------------------------- the fake world


class World:
    """`tests.fakes.envelope_world` in a child process, driven over its stdin."""

    def __init__(
        self, workdir: Path, shape: dict[str, int], replicas: int = 1, extra: tuple[str, ...] = ()
    ) -> None:
        self.workdir = workdir
        self.kubeconfig = workdir / "kubeconfig"
        self.auth = workdir / "auth-kubeconfig"
        plan = workdir / "plan.json"
        command = [
            sys.executable,
            "-m",
            "tests.fakes.envelope_world",
            *(f"--{k.replace('_', '-')}={v}" for k, v in shape.items()),
            f"--kubeconfig={self.kubeconfig}",
            f"--auth-kubeconfig={self.auth}",
            f"--plan={plan}",
            f"--replicas={replicas}",
            *extra,
        ]
        started = time.monotonic()
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(workdir / "world.log", "w"),  # noqa: SIM115 - lives with the process
            text=True,
            cwd=ROOT,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("ready "):
            raise RuntimeError(f"the fake world did not start: {line!r}; see {workdir}/world.log")
        self.url = line.split()[1]
        self.load_seconds = time.monotonic() - started
        self.plan = json.loads(plan.read_text())
        self._lock = threading.Lock()

    def ask(self, command: str) -> str:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        with self._lock:
            self.process.stdin.write(command + "\n")
            self.process.stdin.flush()
            return self.process.stdout.readline().strip()

    def stats(self) -> dict[str, Any]:
        answer = self.ask("stats")
        if not answer.startswith("stats "):
            raise RuntimeError(f"unexpected answer {answer!r}")
        stats: dict[str, Any] = json.loads(answer[6:])
        return stats

    def stream(self, rate: float) -> None:
        self.ask(f"stream {rate:g}")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ask("quit")
        with contextlib.suppress(Exception):
            self.process.wait(timeout=20)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


# ---------------------------------------------------------------------- the server


class Server:
    """`custom-metrics-server serve` against the world, over TLS with delegated auth."""

    def __init__(
        self,
        workdir: Path,
        kubeconfig: Path,
        auth: Path,
        interval: float,
        extra: list[str],
        *,
        pythonpath: str | None = None,
    ) -> None:
        self.workdir = workdir
        certs = workdir / "certs"
        command = [
            sys.executable,
            "-m",
            "custom_metrics_server",
            "serve",
            "--bind-address",
            "127.0.0.1",
            "--secure-port",
            "0",
            "--cert-dir",
            str(certs),
            "--kubeconfig",
            str(kubeconfig),
            "--authentication-kubeconfig",
            str(auth),
            "--authorization-kubeconfig",
            str(auth),
            "--authentication-skip-lookup",
            "--metric-resolution",
            f"{interval:g}s",
            *extra,
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if pythonpath:  # another tree of the package (an A/B against older code): before ours
            env["PYTHONPATH"] = pythonpath
        self.spawned = time.monotonic()
        self.spawned_wall = time.time()
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=open(workdir / "server.log", "w"),  # noqa: SIM115
            text=True,
            env=env,
            cwd=workdir,
        )
        self.pid = self.process.pid
        lines: queue.Queue[str] = queue.Queue()
        stdout = self.process.stdout
        assert stdout is not None
        threading.Thread(target=lambda: [lines.put(x) for x in stdout], daemon=True).start()
        first = lines.get(timeout=120)
        self.banner_at = time.monotonic()
        self.url = first.split(" on ", 1)[1].split()[0]
        self.host, port = self.url.removeprefix("https://").rsplit(":", 1)
        self.port = int(port)
        self.ssl = ssl.create_default_context(cafile=str(certs / "apiserver.crt"))
        import httpx

        self.http = httpx.Client(
            base_url=self.url,
            verify=self.ssl,
            timeout=60,
            headers={"Authorization": f"Bearer {TOKEN}"},
        )

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def rss(self) -> float:
        return rss_mib(self.pid)

    def memory(self, result: dict[str, Any], phase: str) -> None:
        """Record the resident memory after `phase` in `result["memory"]` (in phase order)."""
        figures = {**memory_mib(self.pid), "load": load()}
        result.setdefault("memory", {})[phase] = figures
        log(
            f"memory after {phase}: VmRSS {figures['VmRSS']:.0f} MiB, RssAnon "
            f"{figures['RssAnon']:.0f} MiB, peak {figures['VmHWM']:.0f} MiB"
        )

    def wait_ready(self, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(Exception):
                if self.http.get("/readyz").status_code == 200:
                    return time.monotonic()
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"server not ready; see {self.workdir}/server.log")
            time.sleep(0.05)

    def metrics(self) -> dict[str, float]:
        """`/metrics` as {series: value} (series = name{labels} as written)."""
        text = self.http.get("/metrics").text
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                series, _, value = line.rpartition(" ")
                with contextlib.suppress(ValueError):
                    out[series] = float(value)
        return out

    def close(self) -> None:
        self.http.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def scrape_figures(m: dict[str, float]) -> dict[str, float]:
    prefix = "custom_metrics_server_kubelet_scrape"
    out = {
        "rounds": m.get(f"{prefix}_rounds_total", 0.0),
        "overruns": m.get(f"{prefix}_rounds_overrun_total", 0.0),
        "deferred": m.get(f"{prefix}_deferred_total", 0.0),
        "last_round_s": m.get(f"{prefix}_last_round_duration_seconds", float("nan")),
        "lag_count": m.get("custom_metrics_server_event_loop_lag_seconds_count", 0.0),
        "lag_sum": m.get("custom_metrics_server_event_loop_lag_seconds_sum", 0.0),
    }
    for generation in range(3):  # the cyclic GC's pauses (custom_metrics_server_gc_pause_seconds)
        series = f'custom_metrics_server_gc_pause_seconds_%s{{generation="{generation}"}}'
        out[f"gc{generation}_count"] = m.get(series % "count", 0.0)
        out[f"gc{generation}_sum"] = m.get(series % "sum", 0.0)
    lag = "custom_metrics_server_event_loop_lag_seconds_bucket"
    out["lag_le_25ms"] = m.get(f'{lag}{{le="0.025"}}', 0.0)
    out["lag_le_50ms"] = m.get(f'{lag}{{le="0.05"}}', 0.0)
    out["lag_le_100ms"] = m.get(f'{lag}{{le="0.1"}}', 0.0)
    out["lag_le_1s"] = m.get(f'{lag}{{le="1.0"}}', 0.0)
    # Histograms summed over their other labels, by bound: the server's own request latency
    # and the SubjectAccessReviews' (apiserver_delegated_authz_request_duration_seconds).
    for key, name in (
        ("request", "apiserver_request_duration_seconds_bucket{"),
        ("review", "apiserver_delegated_authz_request_duration_seconds_bucket{"),
    ):
        for series, value in m.items():
            if series.startswith(name):
                bound = series.split('le="', 1)[1].split('"', 1)[0]
                out[f"{key}_le_{bound}"] = out.get(f"{key}_le_{bound}", 0.0) + value
    for series, value in m.items():
        if series.startswith(f"{prefix}s_total{{"):
            outcome = series.split('outcome="', 1)[1].split('"', 1)[0]
            out[f"scrapes_{outcome}"] = value
    return out


def histogram_quantiles(
    before: dict[str, float], after: dict[str, float], key: str
) -> dict[str, float | None]:
    """Count and the p50/p90/p99 bucket bounds (ms) of what a histogram of `scrape_figures`
    observed between two scrapes: an upper bound of each quantile, at the buckets' precision."""
    bounds = sorted(
        (float(k.rsplit("_", 1)[1]), k)
        for k in after
        if k.startswith(f"{key}_le_") and k.rsplit("_", 1)[1] != "+Inf"
    )
    total = after.get(f"{key}_le_+Inf", 0.0) - before.get(f"{key}_le_+Inf", 0.0)
    out: dict[str, float | None] = {"count": total}
    for q in (50, 90, 99):
        out[f"p{q}_ms_at_most"] = None
        for bound, k in bounds:
            if total and after[k] - before.get(k, 0.0) >= q / 100 * total:
                out[f"p{q}_ms_at_most"] = round(1000 * bound, 1)
                break
    return out


# ---------------------------------------------------------------------- py-spy


class Profiler:
    """py-spy record (raw collapsed stacks, non-blocking) on a pid between start and stop."""

    def __init__(self, enabled: bool, outdir: Path) -> None:
        self.binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        self.enabled = enabled and Path(self.binary).exists()
        self.outdir = outdir
        self.process: subprocess.Popen[bytes] | None = None
        self.output: Path | None = None

    def start(self, pid: int, name: str) -> None:
        if not self.enabled:
            return
        self.output = self.outdir / f"{name}.txt"
        self.process = subprocess.Popen(
            [self.binary, "record", "--pid", str(pid), "--rate", "100", "--nonblocking",
             "--format", "raw", "--output", str(self.output)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def stop(self) -> dict[str, Any] | None:
        if self.process is None or self.output is None:
            return None
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.process = None
        if not self.output.exists():
            return None
        return summarise_stacks(self.output)


#: Stages of the server's work, by a frame that appears in the stack (first match wins).
STAGES = (
    ("scrape: parse (read_usage_rows)", "read_usage_rows"),
    ("scrape: usage store (UsageStore.apply)", "UsageStore.apply"),
    ("scrape: HTTP fetch (httpx/httpcore)", "KubeletScraper._fetch"),
    ("scrape: other", "KubeletScraper"),
    ("list: records (ClusterState.apply)", "_Sink.listed"),
    ("list: relist bookkeeping (list_finished)", "_Sink.list_finished"),
    ("list: page fetch (lean pool)", "KubeClient.get_raw"),
    ("list: page decode (schema)", "WireCodec"),
    ("list: page fetch + JSON decode", "KubeClient.get_json"),
    ("watch: records (_Sink.event)", "_Sink.event"),
    ("watch: stream read + decode", "Reflector._watch"),
    ("serve: authorization (SubjectAccessReview)", "Authorizer._review"),
    ("serve: authentication (TokenReview)", "Authenticator"),
    ("serve: /metrics/resources", "exposition_stream"),
    ("serve: metric computation", "ResourceMetricsBackend"),
    ("serve: rest of the request path", "RequestResponseCycle"),
    ("serve: HTTP/TLS (uvicorn)", "httptools_impl"),
    ("logging", "logging/__init__"),
)


def stage_of(stack: str) -> str:
    for name, key in STAGES:
        if key in stack:
            return name
    return "event loop, I/O and the rest"


_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^:)]*)(?::\d+)?\)$")


def _short(path: str) -> str:
    for marker in ("site-packages/", "custom_metrics_server/", "lib/python3"):
        if marker in path:
            tail = path.split(marker, 1)[1]
            return ("custom_metrics_server/" + tail) if marker == "custom_metrics_server/" else tail
    return path


def summarise_stacks(path: Path, top: int = 25) -> dict[str, Any]:
    """Self and inclusive shares by function, and self share by module, of py-spy raw output."""
    self_f: Counter[str] = Counter()
    incl_f: Counter[str] = Counter()
    self_m: Counter[str] = Counter()
    stages: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue  # a torn last line (py-spy stopped mid-write)
        count = int(count_text)
        total += count
        stages[stage_of(stack)] += count
        frames = stack.split(";")
        names = []
        for frame in frames:
            match = _FRAME.match(frame)
            if match:
                names.append((match["func"], _short(match["file"])))
            else:
                names.append((frame, ""))
        leaf = names[-1]
        self_f[f"{leaf[0]} ({leaf[1]})"] += count
        self_m[leaf[1] or leaf[0]] += count
        for name in {f"{f} ({m})" for f, m in names}:
            incl_f[name] += count

    def share(counter: Counter[str]) -> list[tuple[str, float]]:
        return (
            [(k, round(100 * v / total, 1)) for k, v in counter.most_common(top)] if total else []
        )

    return {
        "samples": total,
        "by_stage": share(stages),
        "self_by_function": share(self_f),
        "inclusive_by_function": share(incl_f),
        "self_by_module": share(self_m),
        "file": str(path),
    }


# ---------------------------------------------------------------------- HPA-shaped load


def hpa_paths(plan: dict[str, Any]) -> list[str]:
    out = []
    for t in plan["hpa_targets"]:
        metric = "kube_running_pod_resource_usage"
        if t["type"] == "pods":
            selector = t["selector"].replace("=", "%3D")
            out.append(
                f"{API}/namespaces/{t['namespace']}/pods/*/{metric}"
                f"?labelSelector={selector}&metricLabelSelector=resource%3Dcpu"
            )
        else:
            out.append(
                f"{API}/namespaces/{t['namespace']}/{t['resource']}/{t['name']}/{metric}"
                "?metricLabelSelector=resource%3Dcpu"
            )
    return out


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, int]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
        return status, len(body)
    size = 0
    while True:  # chunked
        size_line = await reader.readuntil(b"\r\n")
        chunk = int(size_line.strip(), 16)
        await reader.readexactly(chunk + 2)
        size += chunk
        if chunk == 0:
            return status, size


async def fixed_rate(  # noqa: PLR0915
    host: str,
    port: int,
    context: ssl.SSLContext,
    paths: list[str],
    *,
    rate: float,
    duration: float,
    connections: int = 32,
    drain: float = 20.0,
) -> dict[str, Any]:
    """Open-loop load: request i is due at start + i/rate whatever came before; latency is
    measured from that due time (so queueing behind a slow answer counts), beside the
    service time (from the request's write). Keep-alive connections from a pool."""
    pool: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    for _ in range(connections):
        pool.put_nowait(await asyncio.open_connection(host, port, ssl=context))
    latencies: list[float] = []
    service: list[float] = []
    statuses: Counter[int] = Counter()
    errors: Counter[str] = Counter()
    loop = asyncio.get_running_loop()
    total = int(rate * duration)
    start = loop.time() + 0.1
    tasks = []

    async def one(i: int, path: str) -> None:
        due = start + i / rate
        reader, writer = await pool.get()
        sent = loop.time()
        try:
            writer.write(
                f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n"
                "Accept: application/json\r\n\r\n".encode()
            )
            status, _ = await _read_response(reader)
        except asyncio.CancelledError:
            writer.close()
            raise
        except Exception as err:
            errors[type(err).__name__] += 1
            writer.close()
            reader, writer = await asyncio.open_connection(host, port, ssl=context)
        else:
            done = loop.time()
            statuses[status] += 1
            latencies.append(done - due)
            service.append(done - sent)
        pool.put_nowait((reader, writer))

    for i in range(total):
        delay = start + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, paths[i % len(paths)])))
    # A server that cannot keep up gets `drain` seconds more; what is still waiting then is
    # counted as unfinished, its latency as the wait so far (a lower bound).
    _, pending = await asyncio.wait(tasks, timeout=drain)
    unfinished = len(pending)
    if pending:
        cancelled_at = loop.time()
        for index, task in enumerate(tasks):
            if task in pending:
                task.cancel()
                latencies.append(cancelled_at - (start + index / rate))
        await asyncio.gather(*pending, return_exceptions=True)
    elapsed = loop.time() - start
    while not pool.empty():
        _, writer = pool.get_nowait()
        writer.close()

    def pct(values: list[float], p: float) -> float | None:
        if not values:
            return None
        values = sorted(values)
        return round(1000 * values[min(len(values) - 1, int(p / 100 * len(values)))], 2)

    return {
        "requests": total,
        "elapsed_s": round(elapsed, 1),
        "achieved_rps": round(len(service) / elapsed, 1),
        "unfinished": unfinished,
        "p50_ms": pct(latencies, 50),
        "p90_ms": pct(latencies, 90),
        "p99_ms": pct(latencies, 99),
        "max_ms": pct(latencies, 100),
        "service_p50_ms": pct(service, 50),
        "service_p99_ms": pct(service, 99),
        "statuses": dict(statuses),
        "errors": dict(errors),
    }


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def run_wrk(url: str, seconds: float, connections: int = 16) -> dict[str, Any]:
    if shutil.which("wrk") is None:
        return {"error": "wrk not installed (apt-get install wrk)"}
    output = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency",
         "-H", f"Authorization: Bearer {TOKEN}", url],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    out: dict[str, Any] = {}
    match = re.search(r"Requests/sec:\s+([\d.]+)", output)
    out["rps"] = float(match.group(1)) if match else None
    for p in ("50", "90", "99"):
        m = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)", output, re.MULTILINE)
        out[f"p{p}_ms"] = round(float(m.group(1)) * _UNITS[m.group(2)], 2) if m else None
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    out["non_2xx"] = int(m.group(1)) if m else 0
    m = re.search(r"(\d+) requests in", output)
    out["requests"] = int(m.group(1)) if m else 0
    return out


# ---------------------------------------------------------------------- one scale


def shape_for(args: argparse.Namespace, pods: int) -> dict[str, int]:
    from tests.fakes.envelope_world import scale_shape

    default = scale_shape(pods)
    shape = {
        "pods": pods,
        "nodes": args.nodes or default.nodes,
        "namespaces": args.namespaces or default.namespaces,
        "workloads": args.workloads or default.workloads,
    }
    if args.big_namespace_pods is not None:
        shape["big_namespace_pods"] = args.big_namespace_pods
    return shape


def tree_path(args: argparse.Namespace) -> str | None:
    """`--tree`: the server imports the package from this tree (an older commit extracted
    with `git archive <commit> custom_metrics_server | tar -x -C TREE`), for before/after
    runs of the whole envelope; `--compare` alternates trees within `--ingest-only`."""
    return str(args.tree) if args.tree else None


def world_flags(args: argparse.Namespace) -> tuple[str, ...]:
    return ("--gzip",) if args.gzip else ()


def wait_rounds(server: Server, rounds: float, timeout: float) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        figures = scrape_figures(server.metrics())
        if figures["rounds"] >= rounds:
            return figures
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {figures['rounds']} scrape rounds after {timeout}s")
        time.sleep(0.5)


def window_rounds(
    server: Server, rounds: int, timeout: float, world: World | None = None
) -> dict[str, Any]:
    """Like `window`, but from the end of one scrape round to the end of the `rounds`-th
    after it: the window holds whole rounds only, so two windows differ by what else ran in
    them, even when rounds overrun the interval."""

    def count() -> float:
        return scrape_figures(server.metrics())["rounds"]

    deadline = time.monotonic() + timeout
    first = count()
    while (now := count()) == first:
        if time.monotonic() > deadline:
            raise RuntimeError("no scrape round ended")
        time.sleep(1.0)  # /metrics costs the server too
    before_m = scrape_figures(server.metrics())
    world0 = world.stats() if world is not None else None
    cpu0, t0 = server.cpu(), time.monotonic()
    while count() < now + rounds:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{rounds} scrape rounds did not end in {timeout:g}s")
        time.sleep(1.0)  # /metrics costs the server too
    cpu1, t1 = server.cpu(), time.monotonic()
    world1 = world.stats() if world is not None else None
    after_m = scrape_figures(server.metrics())
    out: dict[str, Any] = {"cpu_s": cpu1 - cpu0, "wall_s": t1 - t0, "load": load()}
    if world0 is not None and world1 is not None:
        out["events"] = world1["events_sent"] - world0["events_sent"]
        out["world_cpu_s"] = world1["cpu_seconds"] - world0["cpu_seconds"]
    for key, value in after_m.items():
        out[key if key == "last_round_s" else f"d_{key}"] = value - (
            0.0 if key == "last_round_s" else before_m.get(key, 0.0)
        )
    return out


def run_scale(args: argparse.Namespace, pods: int, outdir: Path) -> dict[str, Any]:  # noqa: PLR0915 - one phase after another
    shape = shape_for(args, pods)
    interval = args.interval
    result: dict[str, Any] = {"shape": shape, "interval_s": interval, "loads": {}}
    profiler = Profiler(args.profile, outdir)
    profiles: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="envelope-") as tmp:
        workdir = Path(tmp)
        log(f"{pods:,} pods: generating the world {shape}")
        world = World(workdir, shape, extra=world_flags(args))
        server: Server | None = None
        try:
            plan = world.plan
            result["world"] = {k: v for k, v in plan.items() if k != "hpa_targets"}
            result["world"]["start_s"] = round(world.load_seconds, 1)
            log(f"world ready in {world.load_seconds:.1f}s at {world.url}; starting the server")
            result["loads"]["before_ingest"] = load()
            server = Server(
                workdir,
                world.kubeconfig,
                world.auth,
                interval,
                args.server_arg,
                pythonpath=tree_path(args),
            )
            if args.profile:
                time.sleep(0.3)
                profiler.start(server.pid, f"{pods}-ingest")
            ready_at = server.wait_ready(timeout=600)
            cpu_ready = server.cpu()
            profiles["ingest"] = profiler.stop()
            stats = world.stats()
            first_list = stats["clients"].get("ZmFrZQ==", {}).get("first_request")
            result["ingest"] = {
                "spawn_to_ready_s": round(ready_at - server.spawned, 2),
                "banner_to_ready_s": round(ready_at - server.banner_at, 2),
                "first_request_to_ready_s": (
                    round(server.spawned_wall + (ready_at - server.spawned) - first_list, 2)
                    if first_list
                    else None
                ),
                "cpu_s": round(cpu_ready, 2),
                "rss_mib": round(server.rss(), 1),
                "load": load(),
                "api_traffic": stats["clients"],
                "world_cpu_s": stats["cpu_seconds"],
            }
            log(
                f"ready: {result['ingest']['spawn_to_ready_s']}s, CPU {cpu_ready:.1f}s, RSS {server.rss():.0f} MiB"
            )
            server.memory(result, "ingest")
            # (c) scrape rounds: the first two give every pod usage; then a quiet window.
            wait_rounds(server, 2, timeout=6 * interval + 120)
            server.memory(result, "two_rounds")
            if args.serving_only:
                # (f) alone: the event stream on, one scrape interval as the baseline that
                # `cpu_per_request_ms` removes, then the HPA load (and wrk unless 0 s).
                world.stream(args.event_rate)
                time.sleep(5)
                events = window_rounds(server, 1, timeout=4 * interval + 120, world=world)
                events["cpu_share"] = events["cpu_s"] / events["wall_s"]
                result["events"] = events
                server.memory(result, "events")
                serve_phases(
                    args,
                    result=result,
                    server=server,
                    world=world,
                    events=events,
                    profiler=profiler,
                    profiles=profiles,
                    pods=pods,
                )
                return result
            rounds_window = args.rounds * interval
            log(f"scrape-only window: {rounds_window:g}s")
            if args.profile:
                profiler.start(server.pid, f"{pods}-scrapes")
            quiet = window_rounds(server, args.rounds, timeout=4 * rounds_window + 120, world=world)
            profiles["scrapes"] = profiler.stop()
            rounds = max(1.0, quiet["d_rounds"])
            quiet["cpu_per_round_s"] = quiet["cpu_s"] / rounds
            # Rounds that overrun defer nodes to the next one: per node scraped is the figure.
            scraped = sum(v for k, v in quiet.items() if k.startswith("d_scrapes_"))
            quiet["cpu_per_scrape_ms"] = 1000 * quiet["cpu_s"] / max(1.0, scraped)
            quiet["cpu_per_full_round_s"] = quiet["cpu_per_scrape_ms"] * shape["nodes"] / 1000
            quiet["cpu_share"] = quiet["cpu_s"] / quiet["wall_s"]
            result["scrapes"] = quiet
            result["rss_after_rounds_mib"] = round(server.rss(), 1)
            server.memory(result, "scrapes")
            log(
                f"scrapes: {quiet['cpu_per_round_s']:.2f}s CPU a round, last round {quiet['last_round_s']:.2f}s wall, RSS {result['rss_after_rounds_mib']} MiB"
            )
            # (e) /metrics/resources
            baseline_rate = quiet["cpu_s"] / quiet["wall_s"]
            expositions = []
            for _ in range(3):
                cpu0, t0 = server.cpu(), time.monotonic()
                response = server.http.get("/metrics/resources")
                t1 = time.monotonic()
                cpu1 = server.cpu()
                expositions.append(
                    {
                        "status": response.status_code,
                        "bytes": len(response.content),
                        "series": response.content.count(b"\n") - response.content.count(b"\n#"),
                        "wall_s": round(t1 - t0, 3),
                        # all the server did meanwhile (an upper bound; scrape rounds run too)
                        "cpu_raw_s": round(cpu1 - cpu0, 3),
                        "cpu_s": round(cpu1 - cpu0 - baseline_rate * (t1 - t0), 3),
                    }
                )
                time.sleep(1)
            result["resources"] = {
                "runs": expositions,
                "cpu_s": min(e["cpu_s"] for e in expositions),
                "cpu_raw_s": min(e["cpu_raw_s"] for e in expositions),
                "wall_s": min(e["wall_s"] for e in expositions),
                "bytes": expositions[-1]["bytes"],
                "rss_after_mib": round(server.rss(), 1),
                "load": load(),
            }
            server.memory(result, "resources")
            log(
                f"/metrics/resources: {result['resources']['cpu_s']}s CPU, {result['resources']['bytes']:,} bytes"
            )
            # (b) events
            world.stream(args.event_rate)
            time.sleep(5)
            if args.profile:
                profiler.start(server.pid, f"{pods}-events")
            events = window_rounds(
                server, args.rounds, timeout=4 * rounds_window + 120, world=world
            )
            profiles["events"] = profiler.stop()
            events["event_rate"] = events["events"] / events["wall_s"]
            events["cpu_share"] = events["cpu_s"] / events["wall_s"]
            events["events_cpu_share"] = events["cpu_share"] - quiet["cpu_share"]
            events["cpu_per_event_us"] = (
                1e6
                * (events["cpu_s"] - quiet["cpu_s"] * events["wall_s"] / quiet["wall_s"])
                / max(1, events["events"])
            )
            events["world_cpu_share"] = events["world_cpu_s"] / events["wall_s"]
            result["events"] = events
            server.memory(result, "events")
            log(
                f"events: {events['event_rate']:.0f}/s, total {events['cpu_share']:.1%} of a core, events alone {events['events_cpu_share']:.1%}"
            )
            serve_phases(
                args,
                result=result,
                server=server,
                world=world,
                events=events,
                profiler=profiler,
                profiles=profiles,
                pods=pods,
            )
        finally:
            if server is not None:
                server.close()
            world.close()
            for name in ("server.log", "world.log"):
                with contextlib.suppress(OSError):
                    shutil.copy(workdir / name, outdir / f"{pods}-{name}")
    return result


def generator_runner(loop: str) -> Any:
    """How the HPA load generator runs its coroutine: on uvloop (the default when installed:
    its TLS is C, so the generator takes less of the two cores the server shares with it and
    reads each answer sooner) or on the standard library's loop (`--generator-loop asyncio`,
    how runs before 2026-11-26 08:00 measured)."""
    if loop == "uvloop":
        try:
            import uvloop
        except ImportError:
            return asyncio.run
        return uvloop.run
    return asyncio.run


def serve_phases(  # noqa: PLR0915 - the (f) phase, one step after another
    args: argparse.Namespace,
    *,
    result: dict[str, Any],
    server: Server,
    world: World,
    events: dict[str, Any],
    profiler: Profiler,
    profiles: dict[str, Any],
    pods: int,
) -> None:
    """(f) serving while events and scrapes run, then `wrk` (unless `--wrk-seconds 0`)."""
    plan = world.plan
    # (f) serving while events and scrapes run
    paths = hpa_paths(plan)
    run = generator_runner(args.generator_loop)
    if args.hpa_warmup:  # one unmeasured pass: warm authorization and answer caches
        run(
            fixed_rate(
                server.host,
                server.port,
                server.ssl,
                paths,
                rate=args.hpa_rate,
                duration=args.hpa_warmup,
            )
        )
    stats0 = world.stats()
    metrics0 = scrape_figures(server.metrics())
    cpu0, world_cpu0 = server.cpu(), stats0["cpu_seconds"]
    generator_cpu0 = time.process_time()
    if args.profile:
        profiler.start(server.pid, f"{pods}-serving")
    serving = run(
        fixed_rate(
            server.host,
            server.port,
            server.ssl,
            paths,
            rate=args.hpa_rate,
            duration=args.window,
        )
    )
    profiles["serving"] = profiler.stop()
    serving["generator_loop"] = args.generator_loop
    serving["generator_cpu_share"] = round(
        (time.process_time() - generator_cpu0) / serving["elapsed_s"], 3
    )
    serving["server_cpu_s"] = round(server.cpu() - cpu0, 2)
    serving["server_cpu_share"] = round(serving["server_cpu_s"] / serving["elapsed_s"], 3)
    # CPU per request above the scrape + event baseline of the events window
    serving["cpu_per_request_ms"] = round(
        1000
        * (serving["server_cpu_s"] - events["cpu_share"] * serving["elapsed_s"])
        / max(1, sum(serving["statuses"].values())),
        2,
    )
    serving["load"] = load()
    stats1 = world.stats()
    metrics1 = scrape_figures(server.metrics())
    lag_samples = metrics1["lag_count"] - metrics0["lag_count"]
    serving["loop_lag"] = {  # the server's own event-loop lag samples (every 0.25 s)
        "samples": lag_samples,
        "mean_ms": round(
            1000 * (metrics1["lag_sum"] - metrics0["lag_sum"]) / max(1.0, lag_samples), 1
        ),
        "over_25ms": lag_samples - (metrics1["lag_le_25ms"] - metrics0["lag_le_25ms"]),
        "over_50ms": lag_samples - (metrics1["lag_le_50ms"] - metrics0["lag_le_50ms"]),
        "over_100ms": lag_samples - (metrics1["lag_le_100ms"] - metrics0["lag_le_100ms"]),
        "over_1s": lag_samples - (metrics1["lag_le_1s"] - metrics0["lag_le_1s"]),
    }
    serving["gc_pauses"] = {  # collections by generation: count and total ms
        f"gen{g}": {
            "count": metrics1[f"gc{g}_count"] - metrics0[f"gc{g}_count"],
            "total_ms": round(1000 * (metrics1[f"gc{g}_sum"] - metrics0[f"gc{g}_sum"]), 1),
        }
        for g in range(3)
    }
    # Where the latency was spent: in the server (from the request head to the answer) and,
    # within that, waiting for the SubjectAccessReviews.
    serving["server_side"] = histogram_quantiles(metrics0, metrics1, "request")
    serving["review_wait"] = histogram_quantiles(metrics0, metrics1, "review")
    serving["scrape_rounds_overrun"] = metrics1["overruns"] - metrics0["overruns"]
    if stats0.get("auth") and stats1.get("auth"):
        serving["access_reviews"] = (
            stats1["auth"]["access_reviews"] - stats0["auth"]["access_reviews"]
        )
        serving["token_reviews"] = stats1["auth"]["token_reviews"] - stats0["auth"]["token_reviews"]
        serving["auth_cpu_share"] = round(
            (stats1["auth"]["cpu_seconds"] - stats0["auth"]["cpu_seconds"]) / serving["elapsed_s"],
            3,
        )
    serving["world_cpu_share"] = round(
        (stats1["cpu_seconds"] - world_cpu0) / serving["elapsed_s"], 3
    )
    result["hpa"] = serving
    server.memory(result, "hpa")
    log(
        f"HPA load: {serving['achieved_rps']} req/s, p50 {serving['p50_ms']} ms, p99 {serving['p99_ms']} ms, {serving['statuses']}"
    )
    big = plan["big_namespace"]
    if args.wrk_seconds <= 0:
        world.stream(0)
        result["rss_end_mib"] = round(server.rss(), 1)
        result["profiles"] = {k: v for k, v in profiles.items() if v}
        quiet_pause(args, server, result)
        return
    wrk_url = f"{server.url}{API}/namespaces/{big}/pods/*/kube_running_pod_resource_usage?metricLabelSelector=resource%3Dcpu"
    check = server.http.get(wrk_url.removeprefix(server.url))
    cpu0 = server.cpu()
    if args.profile:
        profiler.start(server.pid, f"{pods}-wrk")
    wrk = run_wrk(wrk_url, args.wrk_seconds)
    profiles["wrk"] = profiler.stop()
    wrk["server_cpu_s"] = round(server.cpu() - cpu0, 2)
    wrk["items"] = (
        len(check.json().get("items", [])) if check.status_code == 200 else check.status_code
    )
    wrk["bytes"] = len(check.content)
    wrk["load"] = load()
    result["wrk"] = wrk
    server.memory(result, "wrk")
    log(f"wrk pods/* over {wrk['items']} pods: {wrk.get('rps')} req/s, p99 {wrk.get('p99_ms')} ms")
    world.stream(0)
    result["rss_end_mib"] = round(server.rss(), 1)
    result["server_metrics_end"] = scrape_figures(server.metrics())
    result["profiles"] = {k: v for k, v in profiles.items() if v}
    quiet_pause(args, server, result)


def quiet_pause(args: argparse.Namespace, server: Server, result: dict[str, Any]) -> None:
    """The memory once the load is off (no events, no queries; scrape rounds go on) for
    `--quiet-pause` seconds: what stays is held, what goes was transient."""
    if args.quiet_pause > 0:
        time.sleep(args.quiet_pause)
        server.memory(result, "quiet")
    if args.malloc_trim:
        malloc_trim(server.pid)
        server.memory(result, "malloc_trim")


def malloc_trim(pid: int) -> None:
    """`malloc_trim(0)` inside the server (through gdb, which stops it for ~1 s): what the
    RSS falls by is memory glibc held free, not objects: fragmentation, not a leak."""
    if shutil.which("gdb") is None:
        log("gdb not found: no malloc_trim reading")
        return
    subprocess.run(
        ["gdb", "-p", str(pid), "-batch", "-ex", "call (int) malloc_trim(0)"],
        capture_output=True,
        timeout=120,
        check=False,
    )


# ---------------------------------------------------------------------- events alone


def run_events_only(args: argparse.Namespace, pods: int) -> dict[str, Any]:
    """The watch-event cost without scrape rounds around it: `--metric-resolution 1h` (its
    one round spreads over 30 minutes: a trickle of scrapes), the server's CPU idle and under
    the event stream over the same length of time. On a loaded machine the rounds' CPU varies more than the events
    cost, so this is the clean figure for (b)."""
    shape = shape_for(args, pods)
    seconds = args.rounds * args.interval
    out: dict[str, Any] = {"shape": shape, "seconds": seconds}
    with tempfile.TemporaryDirectory(prefix="envelope-events-") as tmp:
        workdir = Path(tmp)
        world = World(workdir, shape, extra=world_flags(args))
        server: Server | None = None
        try:
            server = Server(
                workdir,
                world.kubeconfig,
                world.auth,
                3600.0,
                args.server_arg,
                pythonpath=tree_path(args),
            )
            server.wait_ready(timeout=600)
            server.memory(out, "ingest")
            # The one round of a 1 h interval spreads its starts over 30 minutes: a trickle of
            # scrapes (nodes / 1,800 s), the same in both windows.
            time.sleep(10)
            idle: dict[str, Any] = {}
            for name, rate in (("idle", 0.0), ("events", args.event_rate)):
                world.stream(rate)
                time.sleep(3 if rate else 0)
                before = world.stats()
                cpu0, t0 = server.cpu(), time.monotonic()
                time.sleep(seconds)
                cpu1, t1 = server.cpu(), time.monotonic()
                after = world.stats()
                figures = {
                    "cpu_s": round(cpu1 - cpu0, 2),
                    "wall_s": round(t1 - t0, 1),
                    "events": after["events_sent"] - before["events_sent"],
                    "world_cpu_s": round(after["cpu_seconds"] - before["cpu_seconds"], 2),
                    "load": load(),
                }
                out[name] = figures
                server.memory(out, name)
                if name == "idle":
                    idle = figures
            world.stream(0)
            events = out["events"]
            extra = events["cpu_s"] - idle["cpu_s"] * events["wall_s"] / idle["wall_s"]
            out["event_rate"] = round(events["events"] / events["wall_s"], 1)
            out["events_core_share"] = round(extra / events["wall_s"], 4)
            out["cpu_per_event_us"] = round(1e6 * extra / max(1, events["events"]), 1)
            out["rss_mib"] = round(server.rss(), 1)
            quiet_pause(args, server, out)
        finally:
            if server is not None:
                server.close()
            world.close()
    log(
        f"events alone at {pods:,} pods: {out['event_rate']}/s cost "
        f"{100 * out['events_core_share']:.1f} % of a core ({out['cpu_per_event_us']} µs an event)"
    )
    return out


# ---------------------------------------------------------------------- ingest alone


def run_ingest(args: argparse.Namespace, pods: int) -> dict[str, Any]:
    """(a) and (d) alone: spawn -> `/readyz` 200 (CPU, RSS, the fake's first LIST -> ready),
    then RSS after two scrape rounds; one world, `--repeat` servers one after the other, and
    with `--compare TREE` alternating with a server running the package from TREE (an
    extracted older commit: `git archive <commit> custom_metrics_server | tar -x -C TREE`), so
    old and new are measured in one run under the same load."""
    shape = shape_for(args, pods)
    variants = ["new", "base"] if args.compare else ["new"]
    out: dict[str, Any] = {"shape": shape, "runs": []}
    with tempfile.TemporaryDirectory(prefix="envelope-ingest-") as tmp:
        workdir = Path(tmp)
        world = World(workdir, shape, extra=world_flags(args))
        try:
            for i in range(args.repeat):
                for variant in variants if i % 2 == 0 else variants[::-1]:
                    world.ask("reset")
                    world_cpu = world.stats()["cpu_seconds"]
                    run_dir = workdir / f"{variant}-{i}"
                    run_dir.mkdir()
                    server = Server(
                        run_dir,
                        world.kubeconfig,
                        world.auth,
                        args.interval,
                        args.server_arg,
                        pythonpath=str(args.compare) if variant == "base" else None,
                    )
                    try:
                        load_before = load()
                        ready_at = server.wait_ready(timeout=600)
                        cpu = server.cpu()
                        rss_ready = server.rss()
                        everything = world.stats()
                        stats = everything["clients"].get("ZmFrZQ==", {})
                        first = stats.get("first_request")
                        kinds = stats.get("kinds", {})
                        run = {
                            "variant": variant,
                            "first_request_to_ready_s": round(
                                server.spawned_wall + (ready_at - server.spawned) - first, 2
                            )
                            if first
                            else None,
                            "spawn_to_ready_s": round(ready_at - server.spawned, 2),
                            "cpu_s": round(cpu, 2),
                            "rss_ready_mib": round(rss_ready, 1),
                            "proxy_before_ready": kinds.get("proxy", {}).get("requests", 0),
                            "list_requests": kinds.get("list", {}).get("requests", 0),
                            # the fake's CPU meanwhile: near the wall time, the fake was the
                            # bottleneck (it serves every page from one process)
                            "world_cpu_s": round(everything["cpu_seconds"] - world_cpu, 2),
                            "load": f"{load_before} -> {load()}",
                        }
                        wait_rounds(server, 2, timeout=6 * args.interval + 120)
                        run["rss_after_rounds_mib"] = round(server.rss(), 1)
                        run["cpu_after_rounds_s"] = round(server.cpu(), 2)
                    finally:
                        server.close()
                    log(f"ingest {pods:,} pods, {variant}: {run}")
                    out["runs"].append(run)
        finally:
            world.close()
    return out


def ingest_table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| pods | code | first LIST -> ready (s) | CPU to ready (s) | RSS ready (MiB) | "
        "RSS after 2 rounds (MiB) | scrapes before ready | load |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines.extend(
        f"| {r['shape']['pods']:,} | {run['variant']} | {run['first_request_to_ready_s']}"
        f" | {run['cpu_s']} | {run['rss_ready_mib']} | {run['rss_after_rounds_mib']} | "
        f"{run['proxy_before_ready']} | {run['load']} |"
        for r in results
        for run in r["runs"]
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------- scale-out


def run_replicas(args: argparse.Namespace, pods: int, replicas: int) -> dict[str, Any]:
    """N servers against one world: the API server's and the kubelets' side of each."""
    shape = shape_for(args, pods)
    interval = args.interval
    out: dict[str, Any] = {"shape": shape, "replicas": replicas, "interval_s": interval}
    with tempfile.TemporaryDirectory(prefix="envelope-replicas-") as tmp:
        workdir = Path(tmp)
        world = World(workdir, shape, replicas=replicas, extra=world_flags(args))
        servers: list[Server] = []
        try:
            for i in range(replicas):
                (workdir / f"r{i}").mkdir()
                servers.append(
                    Server(
                        workdir / f"r{i}",
                        workdir / f"kubeconfig-{i}",
                        world.auth,
                        interval,
                        args.server_arg,
                    )
                )
            for s in servers:
                s.wait_ready(timeout=600)
            ingest = world.stats()["clients"]
            out["ingest"] = {k: v for k, v in ingest.items() if k.startswith("replica-")}
            out["rss_ready_mib"] = [round(s.rss(), 1) for s in servers]
            log(f"{replicas} replicas ready; RSS {out['rss_ready_mib']}")
            for s in servers:
                wait_rounds(s, 2, timeout=6 * interval + 120)
            world.stream(args.event_rate)
            time.sleep(3)
            world.ask("reset")
            world_cpu0 = world.stats()["cpu_seconds"]
            t0 = time.monotonic()
            cpus0 = [s.cpu() for s in servers]
            time.sleep(args.rounds * interval)
            elapsed = time.monotonic() - t0
            steady = world.stats()
            world.stream(0)
            out["steady"] = {
                "seconds": round(elapsed, 1),
                "event_rate": args.event_rate,
                "clients": {k: v for k, v in steady["clients"].items() if k.startswith("replica-")},
                "world_cpu_s": steady["cpu_seconds"],
                "server_cpu_share": [
                    round((s.cpu() - c) / elapsed, 3) for s, c in zip(servers, cpus0, strict=True)
                ],
                "load": load(),
            }
            out["rss_end_mib"] = [round(s.rss(), 1) for s in servers]
            out["scrapes_end"] = [scrape_figures(s.metrics()) for s in servers]
            out["world_cpu_share_steady"] = round((steady["cpu_seconds"] - world_cpu0) / elapsed, 3)
        finally:
            for s in servers:
                s.close()
            world.close()
    return out


# ---------------------------------------------------------------------- in-process breakdown


def breakdown(pods: int, shape_args: dict[str, int]) -> dict[str, Any]:  # noqa: PLR0915
    """In this process: what the records, label index, usage store and exposition cost
    (tracemalloc by file), and the CPU of parsing and storing one scrape round."""
    import gc
    import tracemalloc

    import orjson

    from custom_metrics_server.backends.kubernetes.state_exposition import (
        render_state_exposition,
        stream_state_exposition,
    )
    from custom_metrics_server.cluster_state.records import (
        NAMESPACES,
        NODES,
        PODS,
        WATCHED,
        ClusterState,
    )
    from custom_metrics_server.domain import GroupResource
    from custom_metrics_server.kubelet_format.any_layout import read_any_layout
    from custom_metrics_server.kubelet_format.rows import read_usage_rows
    from custom_metrics_server.runtime.heap import (
        STEADY_GEN0_THRESHOLD,
        STEADY_GEN1_THRESHOLD,
        promote_survivors,
    )
    from custom_metrics_server.usage.store import UsageStore
    from tests.fakes.envelope_world import (
        KubeletFarm,
        WorldShape,
        make_node,
        make_pod,
        namespace_name,
        plan_world,
        workload_objects,
    )

    shape = WorldShape(**shape_args)
    plan = plan_world(shape)
    farm = KubeletFarm(plan)
    now = time.time()
    bodies = {name: farm.body(name, now) for name in farm.nodes}
    later = {name: farm.body(name, now + 15) for name in farm.nodes}
    out: dict[str, Any] = {"kubelet_body_bytes": statistics.mean(len(b) for b in bodies.values())}

    # CPU: parse and store one round (all nodes), best of 3. The scraper's reader in steady
    # state (every node's layout known from its last scrape: every round but the first), its
    # first round (layouts unknown), and its line reader (read_any_layout, the path of a body
    # in another layout) beside.
    # The server's steady GC (runtime.heap.steady_gc: its heap frozen once settled, young
    # threshold 2,000, survivors of a middle collection frozen): with the interpreter's
    # defaults the bodies and rows held here made full collections that doubled the parse
    # figure (0.38 against 0.15 s at 150k), a cost the server never pays.
    gc.collect()
    gc.freeze()
    gc.set_threshold(STEADY_GEN0_THRESHOLD, STEADY_GEN1_THRESHOLD, gc.get_threshold()[2])
    gc.callbacks.append(promote_survivors)
    parse_times, first_times, full_times, store_times = [], [], [], []
    for _ in range(3):
        warm = UsageStore()
        for name, body in bodies.items():
            warm.apply_rows(name, read_usage_rows(body, default_time=now), now)
        t0 = time.process_time()
        first = {name: read_usage_rows(body, default_time=now) for name, body in bodies.items()}
        first_times.append(time.process_time() - t0)
        t0 = time.process_time()
        parsed = {
            name: read_usage_rows(body, default_time=now + 15, known=warm.known(name))
            for name, body in later.items()
        }
        parse_times.append(time.process_time() - t0)
        t0 = time.process_time()
        for name, rows in parsed.items():
            warm.apply_rows(name, rows, now + 15)
        store_times.append(time.process_time() - t0)
        t0 = time.process_time()
        for body in bodies.values():
            read_any_layout(body, default_time=now)
        full_times.append(time.process_time() - t0)
    out["parse_round_cpu_s"] = round(min(parse_times), 3)
    out["parse_first_round_cpu_s"] = round(min(first_times), 3)
    out["parse_line_reader_round_cpu_s"] = round(min(full_times), 3)
    out["store_round_cpu_s"] = round(min(store_times), 3)
    gc.callbacks.remove(promote_survivors)
    del parsed, first, warm
    gc.collect()

    def fresh(obj: dict[str, Any]) -> dict[str, Any]:
        decoded: dict[str, Any] = orjson.loads(orjson.dumps(obj))
        return decoded

    by_gr: dict[GroupResource, list[dict[str, Any]]] = defaultdict(list)
    for resource, obj in workload_objects(plan):
        name, _, group = resource.partition(".")
        by_gr[GroupResource(group, name)].append(obj)

    def feed(state: ClusterState, gr: GroupResource, objs: Any) -> None:
        sink = state.sink(gr)
        sink.list_started()
        for obj in objs:
            sink.listed(fresh(obj))
        sink.list_finished()

    def snap() -> tracemalloc.Snapshot:
        gc.collect()
        return tracemalloc.take_snapshot()

    def by_file(
        after: tracemalloc.Snapshot, before: tracemalloc.Snapshot, top: int = 12
    ) -> list[tuple[str, float]]:
        stats = after.compare_to(before, "filename")
        return [
            (_short(s.traceback[0].filename), round(s.size_diff / 2**20, 2))
            for s in stats[:top]
            if abs(s.size_diff) > 256 * 1024
        ]

    def by_line(
        after: tracemalloc.Snapshot, before: tracemalloc.Snapshot, top: int = 12
    ) -> list[tuple[str, float]]:
        stats = after.compare_to(before, "lineno")
        return [
            (
                f"{_short(s.traceback[0].filename)}:{s.traceback[0].lineno}",
                round(s.size_diff / 2**20, 2),
            )
            for s in stats[:top]
        ]

    tracemalloc.start(1)
    s0 = snap()
    state = ClusterState()
    feed(
        state,
        NAMESPACES,
        (
            {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": namespace_name(i)}}
            for i in range(shape.namespaces)
        ),
    )
    feed(state, NODES, (make_node(i) for i in range(shape.nodes)))
    for gr in WATCHED:
        if gr not in (PODS, NODES, NAMESPACES):
            feed(state, gr, by_gr.get(gr, ()))
    s1 = snap()
    feed(state, PODS, (make_pod(plan, i) for i in range(len(plan.pods))))
    s2 = snap()
    store = UsageStore(pod_key=state.pod_key)  # as the server: the records' name strings
    for round_bodies, at in ((bodies, now), (later, now + 15)):
        for name, body in round_bodies.items():
            rows = read_usage_rows(body, default_time=at, known=store.known(name))
            store.apply_rows(name, rows, at)
    s3 = snap()
    tracemalloc.reset_peak()
    before_render = tracemalloc.get_traced_memory()[0]
    size = sum(map(len, stream_state_exposition(state)))  # what the server sends
    peak = tracemalloc.get_traced_memory()[1] - before_render
    tracemalloc.stop()
    renders = []
    for _ in range(3):  # without tracemalloc: the CPU of one /metrics/resources body
        t0 = time.process_time()
        for _chunk in stream_state_exposition(state):
            pass
        renders.append(time.process_time() - t0)
    out["resources_render_cpu_s"] = round(min(renders), 3)
    t0 = time.process_time()
    render_state_exposition(state)  # the whole-body renderer, for comparison
    out["resources_whole_body_cpu_s"] = round(time.process_time() - t0, 3)
    out["memory_mib"] = {
        "nodes_namespaces_workloads": round(
            sum(s.size_diff for s in s1.compare_to(s0, "filename")) / 2**20, 1
        ),
        "pods": round(sum(s.size_diff for s in s2.compare_to(s1, "filename")) / 2**20, 1),
        "usage_store_two_rounds": round(
            sum(s.size_diff for s in s3.compare_to(s2, "filename")) / 2**20, 1
        ),
        "resources_render_peak": round(peak / 2**20, 1),
        "resources_body": round(size / 2**20, 1),
    }
    out["pods_by_file_mib"] = by_file(s2, s1)
    out["pods_by_line_mib"] = by_line(s2, s1)
    out["usage_by_line_mib"] = by_line(s3, s2, top=6)
    out["per_pod_bytes"] = round(out["memory_mib"]["pods"] * 2**20 / max(1, len(plan.pods)))
    out["usage_per_pod_bytes"] = round(
        out["memory_mib"]["usage_store_two_rounds"] * 2**20 / max(1, len(plan.pods))
    )
    return out


def breakdown_subprocess(args: argparse.Namespace, pods: int) -> dict[str, Any]:
    from tests.fakes.envelope_world import WorldShape

    shape = shape_for(args, pods)
    shape_json = json.dumps({**WorldShape(**shape).__dict__})
    output = subprocess.run(
        [sys.executable, __file__, "--breakdown-only", shape_json],
        capture_output=True, text=True, check=True, cwd=ROOT,
    ).stdout  # fmt: skip
    result: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return result


# ---------------------------------------------------------------------- reporting


def mark(value: float | None, target: float) -> str:
    if value is None:
        return "n/a"
    return "ok" if value <= target else "MISSED"


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def full_round(r: dict[str, Any]) -> float | None:
    """CPU of one round over every node: per node scraped in the window x nodes."""
    quiet = r.get("scrapes") or {}
    scraped = sum(v for k, v in quiet.items() if k.startswith("d_scrapes_"))
    if not scraped:
        return None
    return float(quiet["cpu_s"]) / scraped * r["shape"]["nodes"]


def table(results: list[dict[str, Any]]) -> str:
    head = ["figure", "target"] + [f"{r['shape']['pods']:,} pods" for r in results]
    rows: list[list[str]] = []

    def row(name: str, target: str, values: list[str]) -> None:
        rows.append([name, target, *values])

    def get(r: dict[str, Any], *path: str) -> Any:
        for p in path:
            if not isinstance(r, dict) or p not in r:
                return None
            r = r[p]
        return r

    row(
        "nodes / namespaces / workloads",
        "",
        [
            f"{r['shape']['nodes']:,} / {r['shape']['namespaces']:,} / {r['shape']['workloads']:,}"
            for r in results
        ],
    )
    row(
        "(a) ingest: spawn -> /readyz 200 (s)",
        "≤ 6",
        [
            f"{fmt(get(r, 'ingest', 'spawn_to_ready_s'))} ({mark(get(r, 'ingest', 'spawn_to_ready_s'), 6)})"
            for r in results
        ],
    )
    row(
        "(a) ingest: first LIST -> ready (s)",
        "",
        [fmt(get(r, "ingest", "first_request_to_ready_s")) for r in results],
    )
    row("(a) server CPU to ready (s)", "", [fmt(get(r, "ingest", "cpu_s")) for r in results])
    row(
        "(b) 1,000 events/s: share of a core (events alone)",
        "≤ 10 %",
        [
            f"{100 * get(r, 'events', 'events_cpu_share'):.1f} % ({mark(get(r, 'events', 'events_cpu_share'), 0.10)})"
            if get(r, "events", "events_cpu_share") is not None
            else "n/a"
            for r in results
        ],
    )
    row(
        "(b) CPU per event (µs)",
        "",
        [fmt(get(r, "events", "cpu_per_event_us"), 1) for r in results],
    )
    row(
        "(c) scrape round CPU, all nodes (s)",
        "≤ 3",
        [f"{fmt(full_round(r))} ({mark(full_round(r), 3)})" for r in results],
    )
    row(
        "(c) parse of one round (steady state), in process (s)",
        "≤ 0.2",
        [
            f"{fmt(get(r, 'breakdown', 'parse_round_cpu_s'), 3)} ({mark(get(r, 'breakdown', 'parse_round_cpu_s'), 0.2)})"
            for r in results
        ],
    )
    row(
        "(c) parse: first round (layouts unknown) / line reader (s)",
        "",
        [
            f"{fmt(get(r, 'breakdown', 'parse_first_round_cpu_s'), 3)} / "
            f"{fmt(get(r, 'breakdown', 'parse_line_reader_round_cpu_s'), 3)}"
            for r in results
        ],
    )
    row(
        "(c) usage store of one round, in process (s)",
        "",
        [fmt(get(r, "breakdown", "store_round_cpu_s"), 3) for r in results],
    )
    row("(c) last round wall (s)", "", [fmt(get(r, "scrapes", "last_round_s")) for r in results])
    row(
        "(c) rounds overrun / nodes deferred in the window",
        "0",
        [
            f"{fmt(get(r, 'scrapes', 'd_overruns'), 0)} / {fmt(get(r, 'scrapes', 'd_deferred'), 0)}"
            for r in results
        ],
    )
    row("(d) RSS after ingest (MiB)", "", [fmt(get(r, "ingest", "rss_mib"), 0) for r in results])
    row(
        "(d) RSS after scrape rounds (MiB)",
        "≤ 450",
        [
            f"{fmt(r.get('rss_after_rounds_mib'), 0)} ({mark(r.get('rss_after_rounds_mib'), 450)})"
            for r in results
        ],
    )
    row(
        "(d) RSS at the end (MiB)",
        "≤ 450",
        [f"{fmt(r.get('rss_end_mib'), 0)} ({mark(r.get('rss_end_mib'), 450)})" for r in results],
    )
    phases = list(dict.fromkeys(p for r in results for p in r.get("memory", {})))
    for phase in phases:
        row(
            f"(d) after {phase}: VmRSS / RssAnon (MiB)",
            "≤ 450",
            [
                f"{fmt(get(r, 'memory', phase, 'VmRSS'), 0)} / {fmt(get(r, 'memory', phase, 'RssAnon'), 0)}"
                for r in results
            ],
        )
    row(
        "(d) peak RSS, VmHWM (MiB)",
        "",
        [fmt(get(r, "memory", phases[-1], "VmHWM"), 0) if phases else "n/a" for r in results],
    )
    row(
        "(d) pod records + indexes, tracemalloc (MiB)",
        "",
        [fmt(get(r, "breakdown", "memory_mib", "pods"), 1) for r in results],
    )
    row(
        "(d) usage store, tracemalloc (MiB)",
        "",
        [fmt(get(r, "breakdown", "memory_mib", "usage_store_two_rounds"), 1) for r in results],
    )
    row(
        "(e) /metrics/resources CPU: in process / live, all server CPU (s)",
        "≤ 1",
        [
            f"{fmt(get(r, 'breakdown', 'resources_render_cpu_s'))} / "
            f"{fmt(get(r, 'resources', 'cpu_raw_s') or get(r, 'resources', 'cpu_s'))} "
            f"({mark(get(r, 'breakdown', 'resources_render_cpu_s') or get(r, 'resources', 'cpu_s'), 1)})"
            for r in results
        ],
    )
    row(
        "(e) /metrics/resources size (MB)",
        "",
        [fmt((get(r, "resources", "bytes") or 0) / 1e6, 1) for r in results],
    )
    row(
        "(f) HPA 333 req/s: p50 / p99 (ms)",
        "p99 ≤ 20",
        [
            f"{fmt(get(r, 'hpa', 'p50_ms'))} / {fmt(get(r, 'hpa', 'p99_ms'))} ({mark(get(r, 'hpa', 'p99_ms'), 20)})"
            for r in results
        ],
    )
    row(
        "(f) HPA server CPU share", "", [fmt(get(r, "hpa", "server_cpu_share"), 3) for r in results]
    )
    row(
        "(f) wrk -c16 pods/* over the big namespace: req/s, p99 (ms)",
        "p99 ≤ 30",
        [
            f"{fmt(get(r, 'wrk', 'rps'), 0)}, {fmt(get(r, 'wrk', 'p99_ms'))} ({mark(get(r, 'wrk', 'p99_ms'), 30)}; {get(r, 'wrk', 'items')} items)"
            for r in results
        ],
    )
    row(
        "load average (ingest / events / HPA / wrk)",
        "",
        [
            f"{get(r, 'ingest', 'load')} / {get(r, 'events', 'load')} / {get(r, 'hpa', 'load')} / {get(r, 'wrk', 'load')}"
            for r in results
        ],
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def profiles_text(results: list[dict[str, Any]], top: int = 8) -> str:
    """The py-spy summaries: where each phase's samples were (self time by module, and the
    heaviest inclusive frames below the event loop)."""
    out: list[str] = []
    skip = (
        "asyncio/runners.py",
        "runpy",
        "__main__.py",
        "cli.py",
        "uvicorn/server.py",
        "_compat.py",
    )
    for r in results:
        for phase, summary in (r.get("profiles") or {}).items():
            if not summary or not summary.get("samples"):
                continue
            out.append(f"\n{r['shape']['pods']:,} pods, {phase}: {summary['samples']} samples")
            if summary.get("by_stage"):
                out.append(
                    "  by stage: " + ", ".join(f"{m} {v}%" for m, v in summary["by_stage"][:10])
                )
            out.append(
                "  self by module: "
                + ", ".join(f"{m} {v}%" for m, v in summary["self_by_module"][:top])
            )
            heavy = [
                (f, v) for f, v in summary["inclusive_by_function"] if not any(x in f for x in skip)
            ]
            out.append("  inclusive: " + ", ".join(f"{f} {v}%" for f, v in heavy[:top]))
    return "\n".join(out)


def replicas_table(result: dict[str, Any]) -> str:
    lines = [
        f"Scale-out: {result['replicas']} replicas, {result['shape']['pods']:,} pods on {result['shape']['nodes']:,} nodes, "
        f"interval {result['interval_s']:g}s, {result['steady']['event_rate']:g} events/s",
        "",
        "| replica | ingest requests | ingest MB | steady req/min | steady watch MB/min | steady proxy req/min | scrapes/node/interval | RSS MiB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    seconds = result["steady"]["seconds"]
    for i in range(result["replicas"]):
        name = f"replica-{i}"
        ingest = result["ingest"].get(name, {})
        steady = result["steady"]["clients"].get(name, {})
        kinds = steady.get("kinds", {})
        watch_mb = kinds.get("watch", {}).get("bytes", 0) / 1e6 * 60 / seconds
        proxy = kinds.get("proxy", {}).get("requests", 0)
        per_node = proxy / max(1, result["shape"]["nodes"]) / (seconds / result["interval_s"])
        lines.append(
            f"| {i} | {ingest.get('requests', 0):,} | {ingest.get('bytes', 0) / 1e6:,.1f} | "
            f"{steady.get('requests', 0) * 60 / seconds:,.0f} | {watch_mb:,.1f} | {proxy * 60 / seconds:,.0f} | "
            f"{per_node:.2f} | {result['rss_end_mib'][i]} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------- main


def main() -> int:  # noqa: PLR0915
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="10k", help="10k, 50k, 150k or all")
    parser.add_argument("--pods", type=int)
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--namespaces", type=int)
    parser.add_argument("--workloads", type=int)
    parser.add_argument("--big-namespace-pods", type=int)
    parser.add_argument("--interval", type=float, default=15.0, help="--metric-resolution (s)")
    parser.add_argument("--rounds", type=int, default=4, help="scrape intervals per window")
    parser.add_argument("--window", type=float, default=60.0, help="HPA load seconds")
    parser.add_argument("--wrk-seconds", type=float, default=20.0)
    parser.add_argument("--event-rate", type=float, default=1000.0)
    parser.add_argument("--hpa-rate", type=float, default=333.0)
    parser.add_argument(
        "--hpa-warmup",
        type=float,
        default=0.0,
        help="seconds of unmeasured HPA load first (with a long authorization cache TTL, "
        "--server-arg=--authorization-webhook-cache-authorized-ttl=10m, the measured run "
        "then sees warm caches)",
    )
    parser.add_argument("--replicas", type=int, default=0, help="scale-out run with N replicas")
    parser.add_argument(
        "--serving-only",
        action="store_true",
        help="(f) alone: ingest, two rounds, the event stream, then the HPA load and wrk "
        "(skip wrk with --wrk-seconds 0); no scrape-only, /metrics/resources or events window",
    )
    parser.add_argument(
        "--events-only",
        action="store_true",
        help="(b) alone: the event stream's CPU with no scrape rounds around it",
    )
    parser.add_argument(
        "--breakdown", action="store_true", help="in-process memory/parse breakdown"
    )
    parser.add_argument("--profile", action="store_true", help="py-spy each phase")
    parser.add_argument(
        "--generator-loop",
        choices=("uvloop", "asyncio"),
        default="uvloop",
        help="the HPA load generator's event loop (uvloop when installed)",
    )
    parser.add_argument(
        "--gzip", action="store_true", help="the fake gzips list pages and kubelet answers"
    )
    parser.add_argument(
        "--ingest-only",
        action="store_true",
        help="(a) and RSS alone: start the server --repeat times against one world",
    )
    parser.add_argument("--repeat", type=int, default=1, help="servers per --ingest-only run")
    parser.add_argument(
        "--compare",
        type=Path,
        help="--ingest-only: alternate with a server importing the package from this tree",
    )
    parser.add_argument(
        "--tree",
        type=Path,
        help="run the server from the package in this tree (PYTHONPATH): the old code of a "
        "before/after pair of whole runs",
    )
    parser.add_argument(
        "--quiet-pause",
        type=float,
        default=20.0,
        help="seconds with no events and no queries before the last memory reading",
    )
    parser.add_argument(
        "--malloc-trim",
        action="store_true",
        help="after the quiet reading, call malloc_trim(0) in the server through gdb and read "
        "the memory again (what glibc held free)",
    )
    parser.add_argument("--smoke", action="store_true", help="~30 s at small scale (CI)")
    parser.add_argument("--server-arg", action="append", default=[], help="extra serve flag")
    parser.add_argument("--breakdown-only", help=argparse.SUPPRESS)
    parser.add_argument(
        "--report", nargs="+", type=Path, help="print the tables of earlier JSON results, merged"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    if args.breakdown_only:
        shape = json.loads(args.breakdown_only)
        print(json.dumps(breakdown(shape["pods"], shape)))
        return 0
    if args.report:
        merged: list[dict[str, Any]] = []
        replicas: list[dict[str, Any]] = []
        for path in args.report:
            loaded = json.loads(path.read_text())
            merged += loaded.get("results", [])
            replicas += loaded.get("replicas", [])
        merged.sort(key=lambda r: r["shape"]["pods"])
        for r in merged:  # summaries of older runs: recomputed from the raw stacks if kept
            for phase, summary in (r.get("profiles") or {}).items():
                if summary and "by_stage" not in summary and Path(summary["file"]).exists():
                    r["profiles"][phase] = summarise_stacks(Path(summary["file"]))
        if merged:
            print(table(merged))
            print(profiles_text(merged))
        for r in replicas:
            print("\n" + replicas_table(r))
        for path in args.report:
            for r in json.loads(path.read_text()).get("events_only", []):
                print(
                    f"events alone, {r['shape']['pods']:,} pods: {r['event_rate']}/s cost "
                    f"{100 * r['events_core_share']:.1f} % of a core, {r['cpu_per_event_us']} µs "
                    f"an event (load {r['events']['load']})"
                )
        return 0
    if args.smoke:
        args.pods = args.pods or 1200
        args.interval, args.rounds, args.window, args.wrk_seconds = 2.0, 2, 3.0, 2.0
        args.quiet_pause = min(args.quiet_pause, 2.0)
        args.event_rate, args.hpa_rate = min(args.event_rate, 200.0), min(args.hpa_rate, 100.0)
        args.breakdown = True
        args.big_namespace_pods = args.big_namespace_pods or 300
    pod_counts = (
        [args.pods]
        if args.pods
        else (
            list(SCALES.values())
            if args.scale == "all"
            else [SCALES[s] for s in args.scale.split(",")]
        )
    )
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    document: dict[str, Any] = {
        "machine": machine(),
        "started": stamp,
        "load_start": load(),
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    path = args.out / f"envelope-{'smoke-' if args.smoke else ''}{stamp}.json"
    if args.ingest_only:
        results = [run_ingest(args, pods) for pods in pod_counts]
        for r in results:
            if args.breakdown:
                log("in-process breakdown")
                r["breakdown"] = breakdown_subprocess(args, r["shape"]["pods"])
        document["ingest_only"] = results
        text = ingest_table(results)
        for r in results:
            if "breakdown" in r:
                text += "\n\n" + json.dumps(r["breakdown"], indent=1)
    elif args.events_only:
        results = [run_events_only(args, pods) for pods in pod_counts]
        document["events_only"] = results
        text = "\n".join(
            f"{r['shape']['pods']:,} pods: {r['event_rate']} events/s cost "
            f"{100 * r['events_core_share']:.1f} % of a core, {r['cpu_per_event_us']} µs an event "
            f"(load {r['events']['load']}); VmRSS / RssAnon MiB after "
            + ", ".join(
                f"{phase} {m['VmRSS']:.0f} / {m['RssAnon']:.0f}"
                for phase, m in r.get("memory", {}).items()
            )
            for r in results
        )
    elif args.replicas:
        results = [run_replicas(args, pods, args.replicas) for pods in pod_counts]
        document["replicas"] = results
        text = "\n\n".join(replicas_table(r) for r in results)
    else:
        results = []
        for pods in pod_counts:
            result = run_scale(args, pods, args.out)
            if args.breakdown:
                log("in-process breakdown")
                result["breakdown"] = breakdown_subprocess(args, pods)
            results.append(result)
            document["results"] = results  # written after every scale: a late failure keeps them
            path.write_text(json.dumps(document, indent=1, default=str))
        document["results"] = results
        text = table(results) + "\n" + profiles_text(results)
    document["load_end"] = load()
    path.write_text(json.dumps(document, indent=1, default=str))
    print(
        f"\nMachine: {document['machine']}; load {document['load_start']} -> {document['load_end']}\n"
    )
    print(text)
    print(f"\nJSON: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    if args.smoke:
        failures = []
        for r in results:
            if "hpa" in r and set(r["hpa"]["statuses"]) != {200}:
                failures.append(f"HPA queries answered {r['hpa']['statuses']} {r['hpa']['errors']}")
            if "wrk" in r and (r["wrk"].get("non_2xx") or not r["wrk"].get("requests")):
                failures.append(f"wrk: {r['wrk']}")
        if failures:
            print("smoke FAILED: " + "; ".join(failures), file=sys.stderr)
            return 1
    return 0


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # run the finally blocks: no server or world left behind


if __name__ == "__main__":
    random.seed(17)
    signal.signal(signal.SIGTERM, _terminate)
    sys.exit(main())
