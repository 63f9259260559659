"""Node agent benchmark: one CRI stats round-trip and one kubelet exposition for N containers.

A fake CRI runtime (tests/fakes/cri_runtime.py: a real grpc.aio server on a unix socket) holds
N running containers (two per pod, with pod-level stats), and this measures, each repeated:

1. ``RuntimeClient.pods()``: ListPodSandbox + ListContainers + ListPodSandboxStats over gRPC,
   decoding and the join (server and client share this process and its event loop, so the
   figure includes the server's work too: an upper bound for the client's);
2. ``render_resource_metrics``: the kubelet-format body from the joined summary;
3. the whole ``/metrics/resource`` request against the real ``node-agent`` process over HTTPS
   (keep-alive client; ``--stats-cache-duration 0`` so every request asks the runtime).

Usage: ``python benchmarks/node_agent.py [--containers 500] [--repeat 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from custom_metrics_server.kubelet_format.rows import read_usage_rows  # noqa: E402
from custom_metrics_server.kubelet_format.summary import (  # noqa: E402
    ContainerStats,
    CpuStats,
    MemoryStats,
    PodStats,
    Summary,
    SwapStats,
)
from custom_metrics_server.kubelet_format.writer import render_resource_metrics  # noqa: E402
from custom_metrics_server.node_agent.runtime import RuntimeClient  # noqa: E402
from tests.fakes.cri_runtime import FakeCriRuntime, world_from_summary  # noqa: E402


def summary(containers: int) -> Summary:
    now = time.time_ns()
    pods = []
    for index in range(containers // 2):
        members = tuple(
            ContainerStats(
                name,
                now - 3_600_000_000_000,
                CpuStats(10_000_000_000 + index * 1_000_003, now - index * 1_000_000),
                MemoryStats(50_000_000 + index * 4096, now - index * 1_000_000),
                SwapStats(0, 1 << 30, now),
            )
            for name in ("app", "sidecar")
        )
        pods.append(
            PodStats(
                f"namespace-{index % 20}",
                f"workload-{index:04d}-7d9f8c6b5-x{index % 97:02d}q",
                CpuStats(20_000_000_000 + index, now),
                MemoryStats(100_000_000 + index, now),
                None,
                members,
            )
        )
    return Summary(None, tuple(pods))


async def timed(repeat: int, call: Callable[[], Awaitable[object]]) -> list[float]:
    await call()  # warm-up
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return samples


def line(name: str, samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p95 = ms[int(len(ms) * 0.95) - 1]
    return f"{name:<48} median {statistics.median(ms):7.2f} ms   p95 {p95:7.2f} ms   (n={len(ms)})"


def start_agent(endpoint: str, work: Path) -> tuple[subprocess.Popen[str], str]:
    command = [
        sys.executable,
        "-m",
        "custom_metrics_server",
        "node-agent",
        "--cri-endpoint",
        endpoint,
        "--secure-port",
        "0",
        "--bind-address",
        "127.0.0.1",
        "--cert-dir",
        str(work / "certs"),
        "--stats-cache-duration",
        "0",
        "--node-stats",
        "host",
    ]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    banner = process.stdout.readline()
    return process, banner.split(" serving ", 1)[1].split("/metrics/resource")[0]


async def agent_requests(endpoint: str, repeat: int, work: Path) -> list[float]:
    process, url = await asyncio.to_thread(start_agent, endpoint, work)
    context = ssl.create_default_context(cafile=str(work / "certs" / "apiserver.crt"))
    try:
        async with httpx.AsyncClient(base_url=url, verify=context, timeout=30) as client:

            async def get() -> None:
                response = await client.get("/metrics/resource")
                response.raise_for_status()

            return await timed(repeat, get)
    finally:
        process.terminate()
        process.wait(timeout=15)
        if process.stdout is not None:
            process.stdout.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--containers", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    stats = summary(args.containers)
    body = render_resource_metrics(stats)
    lines = body.count(b"\n")
    print(
        f"python {platform.python_version()}, {os.cpu_count()} CPUs; {args.containers} containers, "
        f"{len(stats.pods)} pods; body {len(body) / 1024:.0f} KiB, {lines} lines"
    )
    read_usage_rows(body, default_time=time.time())  # the server's reader reads it
    with tempfile.TemporaryDirectory(prefix="na-", dir="/tmp") as tmp:
        work = Path(tmp)
        async with FakeCriRuntime(work / "cri.sock", world_from_summary(stats)) as runtime:
            async with RuntimeClient(runtime.endpoint, timeout=10) as client:
                pods = await client.pods()
                assert sum(len(p.containers) for p in pods) == args.containers
                round_trip = await timed(args.repeat, client.pods)

                async def render() -> None:
                    render_resource_metrics(Summary(None, pods))

                rendering = await timed(args.repeat, render)

                async def both() -> None:
                    render_resource_metrics(Summary(None, await client.pods()))

                collection = await timed(args.repeat, both)
            over_https = await agent_requests(runtime.endpoint, args.repeat, work)
    print(line("CRI round-trip (3 RPCs, decode, join)", round_trip))
    print(line("kubelet exposition (render)", rendering))
    print(line("round-trip + render (in process)", collection))
    print(line("GET /metrics/resource, agent process, HTTPS", over_https))


if __name__ == "__main__":
    asyncio.run(main())
