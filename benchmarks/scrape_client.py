"""What one kubelet scrape's HTTP request costs the server, and what it could cost (issue 17).

At 150,000 pods the scrape round's CPU is 3.2 ms a node, about half of it in the HTTP request
through the API server's node proxy (`KubeClient.get_bytes`: httpx, httpcore, anyio). This
measures that request alone, in one process, against the fake world's node proxy
(`tests/fakes/envelope_world.py` in its own process, 41 KB kubelet bodies), in variants run
alternately so that the machine's load affects them alike:

* `httpx`: the server's client as it is (`KubeClient.get_bytes`, the scraper's own pool),
  with the `httpx` logger at INFO, as `serve` had it before 2da71db (a line per request);
* `httpx+quiet`: the same with the `httpx` logger at WARNING (`serve` since 2da71db);
* `raw`: a minimal keep-alive HTTP/1.1 client over asyncio streams (one write, a head parse,
  a content-length body): a lower bound for a lean client;
* `fetcher`: the scraper's `KubeletFetcher.fetch` as `serve` runs it (the lean keep-alive
  pool of `http_client/http11.py` since the issue-17 scrape work; httpx before);
* `scrape`: `KubeletScraper.scrape_node`, the whole of one node's scrape: the fetch, the
  parse and the usage store (`--no-scrape` leaves it out).

Whether `sniffio` is importable is reported: httpcore tries `import sniffio` on every
`current_async_library()` call, several per request, and before 0fd9d53 it was not installed
(anyio 4.16 no longer depends on it): the failed import searched `sys.path` each time, 0.4 ms
per request (2,022 against 1,596 µs with a temporary sniffio on `sys.path`, load 6-8).

CPU per request is this process's `time.process_time()` over N requests, `--concurrency` in
flight (32, the scraper's default); best of `--repeat` rounds. Event loop: uvloop, as `serve`.

    python benchmarks/scrape_client.py               # 2,000 requests per variant, 5 rounds
    python benchmarks/scrape_client.py --smoke
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from custom_metrics_server.kube.client import KubeClient  # noqa: E402
from custom_metrics_server.kube.config import Connection  # noqa: E402
from custom_metrics_server.scraping.kubelet_client import KubeletFetcher  # noqa: E402
from custom_metrics_server.scraping.kubelet_scraper import KubeletScraper  # noqa: E402
from custom_metrics_server.usage.store import UsageStore  # noqa: E402


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


async def raw_client(host: str, port: int, token: str, paths: list[str], concurrency: int) -> int:
    """Keep-alive HTTP/1.1 GETs over `concurrency` connections; returns bytes read."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    for path in paths:
        queue.put_nowait(path)
    total = 0

    async def worker() -> None:
        nonlocal total
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while not queue.empty():
                path = queue.get_nowait()
                writer.write(
                    f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                    f"Authorization: Bearer {token}\r\nAccept: text/plain\r\n\r\n".encode()
                )
                head = await reader.readuntil(b"\r\n\r\n")
                start = head.lower().find(b"content-length:") + 15
                length = int(head[start : head.find(b"\r\n", start)])
                body = await reader.readexactly(length)
                total += len(body)
        finally:
            writer.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return total


async def httpx_client(client: KubeClient, paths: list[str], concurrency: int) -> int:
    semaphore = asyncio.Semaphore(concurrency)
    total = 0

    async def one(path: str) -> None:
        nonlocal total
        async with semaphore:
            body = await client.get_bytes(path, deadline=10.0, limit=16 << 20)
            total += len(body)

    await asyncio.gather(*(one(p) for p in paths))
    return total


async def fetcher_client(fetcher: KubeletFetcher, names: list[str], concurrency: int) -> int:
    semaphore = asyncio.Semaphore(concurrency)
    total = 0

    async def one(name: str) -> None:
        nonlocal total
        async with semaphore:
            body = await fetcher.fetch(name, 10.0)
            total += len(body)

    await asyncio.gather(*(one(n) for n in names))
    return total


async def scrape_nodes(scraper: KubeletScraper, names: list[str], concurrency: int) -> int:
    semaphore = asyncio.Semaphore(concurrency)
    answered = 0

    async def one(name: str) -> None:
        nonlocal answered
        async with semaphore:
            ok = await scraper.scrape_node(name, deadline=10.0)
            answered += ok

    await asyncio.gather(*(one(n) for n in names))
    assert answered == len(names), (
        f"{len(names) - answered} scrapes failed: {scraper.nodes.failures}"
    )
    return answered


async def measure(run: Callable[[], Awaitable[int]]) -> tuple[float, int]:
    started = time.process_time()
    size = await run()
    return time.process_time() - started, size


async def main_async(args: argparse.Namespace, url: str, nodes: int) -> dict[str, Any]:
    host, port_text = url.removeprefix("http://").rsplit(":", 1)
    port = int(port_text)
    token = "ZmFrZQ=="  # the world's kubeconfig token (base64 "fake")
    paths = [
        f"/api/v1/nodes/node-{i % nodes:05d}/proxy/metrics/resource" for i in range(args.requests)
    ]
    names = [f"node-{i % nodes:05d}" for i in range(args.requests)]
    client = KubeClient(Connection(host=url, token=token), timeout=10.0, max_connections=32)
    fetcher = KubeletFetcher(client, timeout=10.0, concurrency=args.concurrency)
    store = UsageStore()
    scraper = KubeletScraper(
        client, nodes=list, store=store, timeout=10.0, concurrency=args.concurrency
    )
    httpx_logger = logging.getLogger("httpx")
    variants: dict[str, Callable[[], Awaitable[int]]] = {
        "httpx": lambda: httpx_client(client, paths, args.concurrency),
        "httpx+quiet": lambda: httpx_client(client, paths, args.concurrency),
        "raw": lambda: raw_client(host, port, token, paths, args.concurrency),
        "fetcher": lambda: fetcher_client(fetcher, names, args.concurrency),
    }
    if not args.no_scrape:
        variants["scrape"] = lambda: scrape_nodes(scraper, names, args.concurrency)
    if args.only:
        variants = {k: v for k, v in variants.items() if k in args.only.split(",")}
    best: dict[str, float] = {}
    body_bytes = 0
    await httpx_client(client, paths[:200], args.concurrency)  # warm the pool
    await fetcher_client(fetcher, names[:200], args.concurrency)
    if not args.no_scrape:
        await scrape_nodes(scraper, names[:200], args.concurrency)
    for _ in range(args.repeat):
        for name, run in variants.items():
            # `serve` keeps the httpx logger at WARNING (2da71db); `httpx` shows it at INFO.
            httpx_logger.setLevel(logging.INFO if name == "httpx" else logging.WARNING)
            cpu, size = await measure(run)
            per = 1e6 * cpu / len(paths)
            best[name] = min(best.get(name, per), per)
            assert size > 0
            if name != "scrape":
                body_bytes = size // len(paths)
    await client.aclose()
    await fetcher.aclose()
    await scraper.__aexit__(None, None, None)
    try:
        import sniffio  # noqa: F401

        has_sniffio = True
    except ImportError:
        has_sniffio = False
    return {
        "us_per_request": {k: round(v, 1) for k, v in best.items()},
        "body_bytes": body_bytes,
        "sniffio_importable": has_sniffio,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--no-scrape", action="store_true", help="leave out the whole scrape")
    parser.add_argument("--only", default="", help="comma-separated variants to run")
    args = parser.parse_args()
    if args.smoke:
        args.requests, args.repeat = 200, 1
    # The server logs at INFO on stderr; so does this process (the cost of the log lines).
    sink = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    logging.basicConfig(stream=sink, level=logging.INFO)
    import uvloop

    with tempfile.TemporaryDirectory(prefix="scrape-client-") as tmp:
        workdir = Path(tmp)
        world = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.envelope_world", "--pods", "3000",
             f"--kubeconfig={workdir / 'kubeconfig'}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
        )  # fmt: skip
        try:
            assert world.stdout is not None
            line = world.stdout.readline()
            url = line.split()[1]
            before = load()
            result = uvloop.run(main_async(args, url, 100))
        finally:
            assert world.stdin is not None
            with contextlib.suppress(OSError):
                world.stdin.write("quit\n")
                world.stdin.close()
            world.wait(timeout=20)
    result["load"] = [before, load()]
    print(json.dumps(result))
    print("\n| variant | µs of CPU per scrape request (`scrape`: per node scraped) |\n|---|---|")
    for name, value in result["us_per_request"].items():
        print(f"| {name} | {value:,.0f} |")
    print(
        f"\n{result['body_bytes']:,} bytes a body; load {result['load'][0]} -> {result['load'][1]}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
