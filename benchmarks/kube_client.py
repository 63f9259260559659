"""CPU of the Kubernetes client per watch event line and per GET of a 500-pod list page: the
client as it was (httpx: `httpx.AsyncClient` with the bearer token set by an `httpx.Auth`,
`send(stream=True)` and `aiter_lines()` for watches, the code of `kube/client.py` before issue
28, reproduced below as `HttpxClient`) against `kube.client.KubeClient` (the lean pool,
`Http11Pool.request` and `Http11Pool.stream`).

A scripted API server in a child process (its own core and GIL, as kube-apiserver would be;
TLS; uvloop) answers `GET /api/v1/pods?limit=500` with a 500-pod `PodList` (realistic pods of
benchmarks/watch_events.py, ~2.3 KB each, no gzip) and a watch with N `MODIFIED` events, one
chunk each as kube-apiserver flushes them. This process's CPU (`time.process_time`) is the
client's alone: the request, TLS, framing, the lines or the body; not decoding the JSON (the
reflector's schema decoder does that the same way for both). Variants alternate in one
process (uvloop, as the server runs), best of `--rounds`.

    python benchmarks/kube_client.py            # ~30 s
    python benchmarks/kube_client.py --smoke    # a few seconds
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing
import os
import ssl
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Generator, Mapping
from multiprocessing.connection import Connection as Pipe
from pathlib import Path
from typing import Any

import httpx
import orjson
import trustme
import uvloop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from watch_events import make_pod  # noqa: E402

from custom_metrics_server.kube.client import USER_AGENT, KubeClient  # noqa: E402
from custom_metrics_server.kube.config import Connection  # noqa: E402

PAGE = 500
PODS = "/api/v1/pods"


# ---------------------------------------------------------------------- the server (child)


def serve(pipe: Pipe, cert_dir: str) -> None:
    """The scripted API server: a 500-pod page, and watches of `n` events."""
    pods = [orjson.dumps(make_pod(i, nodes=50, modified=True)) for i in range(PAGE)]
    page = (
        b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1000"},"items":['
        + b",".join(pods)
        + b"]}"
    )
    page_answer = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        % len(page)
        + page
    )
    lines = [b'{"type":"MODIFIED","object":' + pod + b"}\n" for pod in pods]
    chunks = [b"%x\r\n%s\r\n" % (len(line), line) for line in lines]
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(f"{cert_dir}/server.pem")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                target = head.split(b" ", 2)[1]
                if b"watch=true" not in target:
                    writer.write(page_answer)
                    await writer.drain()
                    continue
                count = int(target.rpartition(b"n=")[2].split(b"&")[0])
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                )
                for i in range(count):
                    writer.write(chunks[i % PAGE])
                    if i % 64 == 63:
                        await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
        pipe.send((server.sockets[0].getsockname()[1], len(page), sum(map(len, lines)) / PAGE))
        await asyncio.get_running_loop().run_in_executor(None, pipe.recv)

    uvloop.run(main())


# ---------------------------------------------------------------------- the clients


class _BearerAuth(httpx.Auth):
    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        token = self._connection.bearer_token()
        if token:
            request.headers["Authorization"] = f"Bearer {token}"
        yield request


class HttpxClient:
    """`KubeClient` as it was over httpx: its `get_raw`, `post_json_status` (the reviews':
    benchmarks/review_client.py) and `watch_lines`."""

    def __init__(self, connection: Connection) -> None:
        self._http = httpx.AsyncClient(
            base_url=connection.host,
            verify=connection.ssl_context(),
            timeout=10.0,
            auth=_BearerAuth(connection),
            headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
            follow_redirects=False,
            limits=httpx.Limits(max_connections=100, max_keepalive_connections=100),
        )

    async def get_raw(self, path: str, params: Mapping[str, str] | None = None) -> bytes:
        response = await self._http.send(self._http.build_request("GET", path, params=params))
        if response.status_code >= 300:
            raise RuntimeError(response.status_code)
        return response.content

    async def post_json_status(self, path: str, body: Any) -> tuple[int, Any]:
        request = self._http.build_request(
            "POST", path, content=orjson.dumps(body), headers={"Content-Type": "application/json"}
        )
        response = await self._http.send(request)
        if response.status_code >= 300:
            raise RuntimeError(response.status_code)
        return response.status_code, orjson.loads(response.content)

    async def watch_lines(
        self, path: str, params: Mapping[str, str], *, read_timeout: float
    ) -> AsyncIterator[str]:
        request = self._http.build_request(
            "GET", path, params=params, timeout=httpx.Timeout(10.0, read=read_timeout)
        )
        response = await self._http.send(request, stream=True)
        try:
            async for line in response.aiter_lines():
                if line:
                    yield line
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()


# ---------------------------------------------------------------------- measuring


async def cpu_per_page(client: Any, pages: int, size: int) -> float:
    gc.collect()
    start = time.process_time()
    for _ in range(pages):
        body = await client.get_raw(PODS, {"limit": str(PAGE)})
        assert len(body) == size
    return (time.process_time() - start) / pages


async def cpu_per_line(client: Any, events: int) -> float:
    gc.collect()
    count = 0
    start = time.process_time()
    async for _ in client.watch_lines(PODS, {"watch": "true", "n": str(events)}, read_timeout=30.0):
        count += 1
    seconds = time.process_time() - start
    assert count == events, count
    return seconds / events


async def compare(connection: Connection, size: int, args: argparse.Namespace) -> dict[str, Any]:
    clients: dict[str, Any] = {"httpx": HttpxClient(connection), "lean": KubeClient(connection)}
    best: dict[str, dict[str, float]] = {name: {} for name in clients}
    try:
        for client in clients.values():  # warm: connections, imports
            await cpu_per_page(client, 2, size)
            await cpu_per_line(client, 500)
        for _ in range(args.rounds):
            for name, client in clients.items():
                figures = best[name]
                for what, seconds in (
                    ("page", await cpu_per_page(client, args.pages, size)),
                    ("line", await cpu_per_line(client, args.events)),
                ):
                    figures[what] = min(figures.get(what, seconds), seconds)
    finally:
        for client in clients.values():
            await client.aclose()
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=40, help="list pages per variant and round")
    parser.add_argument("--events", type=int, default=20000, help="watch events per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="a few seconds")
    args = parser.parse_args()
    if args.smoke:
        args.pages, args.events, args.rounds = 5, 2000, 1
    load = lambda: " ".join(f"{x:.2f}" for x in os.getloadavg())  # noqa: E731
    print(f"load before: {load()}")
    with tempfile.TemporaryDirectory(prefix="kube-client-") as tmp:
        ca = trustme.CA()
        ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(f"{tmp}/server.pem")
        ca.cert_pem.write_to_path(f"{tmp}/ca.pem")
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        child = context.Process(target=serve, args=(theirs, tmp), daemon=True)
        child.start()
        port, size, line = ours.recv()
        connection = Connection(
            host=f"https://127.0.0.1:{port}", ca_file=f"{tmp}/ca.pem", token="benchmark"
        )
        try:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                best = runner.run(compare(connection, size, args))
        finally:
            ours.send("stop")
            child.join(10)
    print(f"load after: {load()}")
    print(
        f"CPU per GET of a {PAGE}-pod list page ({size / 1024:.0f} KiB, best of {args.rounds} x "
        f"{args.pages}): httpx {best['httpx']['page'] * 1e6:.0f} µs, "
        f"lean {best['lean']['page'] * 1e6:.0f} µs "
        f"({best['httpx']['page'] / best['lean']['page']:.1f}x)"
    )
    print(
        f"CPU per watch event line ({line / 1024:.1f} KiB, best of {args.rounds} x "
        f"{args.events}): httpx {best['httpx']['line'] * 1e6:.1f} µs, "
        f"lean {best['lean']['line'] * 1e6:.1f} µs "
        f"({best['httpx']['line'] / best['lean']['line']:.1f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
