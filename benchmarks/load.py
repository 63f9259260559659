"""Load and soak harness: N concurrent TLS keep-alive clients against `serve --demo`.

    python benchmarks/load.py --clients 200 --duration 300          # the soak of issue 6
    python benchmarks/load.py --clients 50 --duration 30            # the CI smoke
    python benchmarks/load.py --clients 20 --duration 20 --slowloris 500 --drip 1 --server-arg=--header-read-timeout=5s

Starts the demo server itself (or attaches to `--url` with `--cafile` and `--pid`). Each client
is a raw asyncio TLS connection (no HTTP library: the harness must not be the bottleneck) that
sends one request at a time from a fixed mix: a single pod's metric, a `pods/*` list with a
label selector, an external metric, a KEP-1748 resource-model list and discovery documents.
It reports throughput, p50/p99/p99.9 latency, errors by status code and transport errors, and
the server's RSS sampled every second from /proc/PID/statm; RSS "grew" when the last third of
the run peaks more than max(5 MiB, 5 %) above the middle third.

`--slowloris N` also opens N connections that send a request head one byte at a time (one
byte per `--drip` seconds, never finishing it); normal clients must keep succeeding, and the
report says how many dripping connections the server closed.

Exit status 1 on any non-2xx answer or transport error (or RSS growth with `--fail-on-growth`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import ssl
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2"
MIX_WEIGHTS = {
    "single": 4,
    "list": 2,
    "external": 2,
    "resource": 1,
    "discovery": 1,
}


@dataclass
class Stats:
    latencies: list[float] = field(default_factory=list)
    codes: Counter[int] = field(default_factory=Counter)
    by_kind: Counter[str] = field(default_factory=Counter)
    transport_errors: Counter[str] = field(default_factory=Counter)
    rss: list[tuple[float, int]] = field(default_factory=list)
    slowloris_closed: int = 0
    slowloris_open: int = 0


def requests_for(pod: str) -> dict[str, list[str]]:
    return {
        "single": [f"{CUSTOM}/namespaces/default/pods/{pod}/http_requests_per_second"],
        "list": [
            f"{CUSTOM}/namespaces/default/pods/*/http_requests_per_second?labelSelector=app%3Dweb"
        ],
        "external": ["/apis/external.metrics.k8s.io/v1beta1/namespaces/default/queue_depth"],
        "resource": [
            f"{CUSTOM}/namespaces/default/pods/*/kube_pod_resource_request"
            "?labelSelector=app%3Dweb&metricLabelSelector=resource%3Dcpu"
        ],
        "discovery": ["/apis", CUSTOM, "/apis/external.metrics.k8s.io/v1beta1"],
    }


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    code = int(lines[0].split(" ", 2)[1])
    length = 0
    close = False
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "connection" and value.strip().lower() == "close":
            close = True
    body = await reader.readexactly(length) if length else b""
    return code, body, close


async def _connect(
    host: str, port: int, context: ssl.SSLContext
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(host, port, ssl=context, server_hostname="localhost")


async def client(
    *,
    host: str,
    port: int,
    context: ssl.SSLContext,
    mix: list[tuple[str, str]],
    stop_at: float,
    stats: Stats,
    seed: int,
) -> None:
    rng = random.Random(seed)
    writer: asyncio.StreamWriter | None = None
    reader: asyncio.StreamReader | None = None
    while time.monotonic() < stop_at:
        kind, path = rng.choice(mix)
        try:
            if writer is None or reader is None:
                reader, writer = await _connect(host, port, context)
            started = time.perf_counter()
            writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: */*\r\n\r\n".encode())
            code, _, close = await asyncio.wait_for(_read_response(reader), timeout=30)
            stats.latencies.append(time.perf_counter() - started)
            stats.codes[code] += 1
            stats.by_kind[kind] += 1
            if close:
                writer.close()
                writer = reader = None
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError, IndexError) as err:
            stats.transport_errors[type(err).__name__] += 1
            if writer is not None:
                writer.close()
            writer = reader = None
            await asyncio.sleep(0.05)
    if writer is not None:
        writer.close()


async def slowloris(
    *, host: str, port: int, context: ssl.SSLContext, stop_at: float, drip: float, stats: Stats
) -> None:
    """One connection that never finishes its request head."""
    try:
        reader, writer = await _connect(host, port, context)
    except OSError:
        stats.transport_errors["slowloris-connect"] += 1
        return
    stats.slowloris_open += 1
    head = b"GET /apis HTTP/1.1\r\nHost: localhost\r\nX-Drip: " + b"a" * 100_000
    try:
        for byte in head:
            if time.monotonic() >= stop_at:
                break
            writer.write(bytes([byte]))
            await writer.drain()
            with contextlib.suppress(TimeoutError):
                if await asyncio.wait_for(reader.read(1024), timeout=drip) == b"":
                    stats.slowloris_closed += 1  # the server gave up on us
                    return
    except OSError:
        stats.slowloris_closed += 1
        return
    finally:
        stats.slowloris_open -= 1
        writer.close()


def resident_bytes(pid: int) -> int:
    """The second field of /proc/PID/statm is the resident set, in pages."""
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def sample_rss(pid: int, stop_at: float, stats: Stats) -> None:
    started = time.monotonic()
    while time.monotonic() < stop_at:
        with contextlib.suppress(OSError):
            stats.rss.append((time.monotonic() - started, resident_bytes(pid)))
        await asyncio.sleep(1)


def percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, int(fraction * len(sorted_values)))
    return sorted_values[index]


def rss_growth(samples: list[tuple[float, int]]) -> tuple[int, int, bool]:
    """(peak of the middle third, peak of the last third, grew?) in bytes."""
    if len(samples) < 6:
        return 0, 0, False
    third = len(samples) // 3
    middle = max(rss for _, rss in samples[third : 2 * third])
    last = max(rss for _, rss in samples[2 * third :])
    return middle, last, last - middle > max(5 << 20, middle // 20)


def start_demo(
    workdir: Path, pods: int, extra: list[str]
) -> tuple[subprocess.Popen[str], str, Path]:
    cert_dir = workdir / "certs"
    command = [
        sys.executable,
        "-m",
        "custom_metrics_server",
        "serve",
        "--demo",
        "--secure-port",
        "0",
        "--cert-dir",
        str(cert_dir),
        "--demo-pods",
        str(pods),
        *extra,
    ]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=(workdir / "server.log").open("w"),
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    deadline = time.monotonic() + 30
    for line in process.stdout:
        found = re.search(r" on (https://\S+)", line)
        if found:
            return process, found.group(1), cert_dir / "apiserver.crt"
        if time.monotonic() > deadline:
            break
    process.kill()
    raise SystemExit(f"the demo server did not start; see {workdir / 'server.log'}")


async def wait_ready(host: str, port: int, context: ssl.SSLContext) -> str:
    """Wait for /readyz, then return the name of a web pod (for the single-object request)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            reader, writer = await _connect(host, port, context)
            writer.write(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
            code, _, _ = await _read_response(reader)
            if code == 200:
                path = requests_for("")["list"][0]
                writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                code, body, _ = await _read_response(reader)
                writer.close()
                found = re.search(rb'"name":"([^"]+)"', body)
                if code == 200 and found:
                    return found.group(1).decode()
            writer.close()
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("the server never became ready")
        await asyncio.sleep(0.2)


async def run(args: argparse.Namespace, url: str, cafile: Path, pid: int | None) -> Stats:
    host, port = url.removeprefix("https://").rsplit(":", 1)
    host = host.strip("[]")
    context = ssl.create_default_context(cafile=str(cafile))
    pod = await wait_ready(host, int(port), context)
    paths = requests_for(pod)
    mix = [(kind, path) for kind, weight in MIX_WEIGHTS.items() for path in paths[kind] * weight]
    stats = Stats()
    stop_at = time.monotonic() + args.duration
    tasks = [
        asyncio.create_task(
            client(
                host=host,
                port=int(port),
                context=context,
                mix=mix,
                stop_at=stop_at,
                stats=stats,
                seed=seed,
            )
        )
        for seed in range(args.clients)
    ]
    tasks += [
        asyncio.create_task(
            slowloris(
                host=host,
                port=int(port),
                context=context,
                stop_at=stop_at,
                drip=args.drip,
                stats=stats,
            )
        )
        for _ in range(args.slowloris)
    ]
    if pid is not None:
        tasks.append(asyncio.create_task(sample_rss(pid, stop_at, stats)))
    await asyncio.gather(*tasks)
    return stats


def report(args: argparse.Namespace, stats: Stats) -> int:
    latencies = sorted(stats.latencies)
    total = len(latencies)
    failed = sum(count for code, count in stats.codes.items() if not 200 <= code < 300)
    transport = sum(stats.transport_errors.values())
    print(f"clients {args.clients}, duration {args.duration:g}s, slowloris {args.slowloris}")
    print(f"requests {total}  throughput {total / args.duration:,.0f} req/s")
    print(
        "latency ms  p50 {:.2f}  p99 {:.2f}  p99.9 {:.2f}  max {:.2f}".format(
            *(1000 * percentile(latencies, f) for f in (0.5, 0.99, 0.999, 1.0))
        )
    )
    print(f"by kind {dict(stats.by_kind)}")
    print(f"status codes {dict(sorted(stats.codes.items()))}  non-2xx {failed}")
    print(f"transport errors {dict(stats.transport_errors)}")
    if args.slowloris:
        print(f"slowloris connections closed by the server: {stats.slowloris_closed}")
    grew = False
    if stats.rss:
        mib = [rss / (1 << 20) for _, rss in stats.rss]
        step = max(1, len(mib) // 12)
        print("rss MiB over time " + " ".join(f"{value:.0f}" for value in mib[::step]))
        middle, last, grew = rss_growth(stats.rss)
        print(
            f"rss peak middle third {middle / (1 << 20):.1f} MiB, last third "
            f"{last / (1 << 20):.1f} MiB: {'GREW' if grew else 'flat'}"
        )
    if failed or transport or total == 0:
        print("FAIL: errors")
        return 1
    if grew and args.fail_on_growth:
        print("FAIL: RSS grew")
        return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--duration", type=float, default=30.0, help="seconds")
    parser.add_argument("--pods", type=int, default=1000, help="pods in the demo cluster")
    parser.add_argument("--slowloris", type=int, default=0, help="dripping connections")
    parser.add_argument("--drip", type=float, default=10.0, help="seconds between dripped bytes")
    parser.add_argument("--url", help="attach to this server instead of starting the demo")
    parser.add_argument("--cafile", type=Path, help="CA of --url")
    parser.add_argument("--pid", type=int, help="server process of --url (for RSS)")
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="extra flag for the demo server (repeatable), e.g. --server-arg=--header-read-timeout=5s",
    )
    parser.add_argument("--fail-on-growth", action="store_true", help="exit 1 if RSS grew")
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency of the server
        pass
    if args.url:
        if args.cafile is None:
            parser.error("--url needs --cafile")
        return report(args, asyncio.run(run(args, args.url, args.cafile, args.pid)))
    with tempfile.TemporaryDirectory() as workdir:
        process, url, cafile = start_demo(Path(workdir), args.pods, args.server_arg)
        try:
            stats = asyncio.run(run(args, url, cafile, process.pid))
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
    return report(args, stats)


if __name__ == "__main__":
    sys.exit(main())
