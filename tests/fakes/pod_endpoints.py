"""Pods' `/metrics` endpoints for tests and benchmarks: real HTTP/1.1 servers on 127.0.0.1, one
listening port per pod, in a background thread with its own event loop (safe to use from sync
and async tests, and from a server process's point of view a set of real pods).

    with PodEndpoints() as pods:
        port = pods.add("shop/web-0", lambda scrape: b"requests_total 5\\n")
        pods.set_status("shop/web-0", 500)      # answers 500 from now on
        pods.scrapes("shop/web-0")              # requests answered so far

A pod's body is a function of how many times it has been asked (0 for the first request), so a
counter can move by a known amount per scrape; `paths` limits what answers 200 (others 404).
Keep-alive as a real exporter does (Go's net/http), `Content-Length` framing.

Run as a program it serves `--pods` pods (`bench/pod-<i>`) with `go_app_body` bodies of
`--series` lines and, with `--api`, a fake API server holding them as Running pods (pod IP
127.0.0.1, their port as the container port named `metrics`, label `app=bench`, owned by the
ReplicaSet `bench-rs-<i % 10>` of the Deployment `bench-<i % 10>`); it prints one line of JSON
(`{"ports": [...], "api": url}`) once listening, then serves until stdin closes
(benchmarks/pod_metrics.py runs it in its own process so its CPU is not counted).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

Body = Callable[[int], bytes]


@dataclass
class _Pod:
    body: Body
    status: int = 200
    delay: float = 0.0
    paths: tuple[str, ...] = ("/metrics",)
    scrapes: int = 0
    server: asyncio.base_events.Server | None = None
    port: int = 0
    connections: set[asyncio.StreamWriter] = field(default_factory=set)


class PodEndpoints:
    """Fake pods' metrics endpoints (see the module)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self._pods: dict[str, _Pod] = {}
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _call(self, coroutine: object) -> object:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(30)  # type: ignore[arg-type]

    def add(self, key: str, body: Body | bytes, **options: object) -> int:
        """Start serving pod `key` ("ns/name"); returns its port."""
        pod = _Pod(body if callable(body) else (lambda _, fixed=body: fixed), **options)  # type: ignore[arg-type]
        with self._lock:
            self._pods[key] = pod

        async def listen() -> int:
            async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                await self._serve(pod, reader, writer)

            pod.server = await asyncio.start_server(serve, self.host, 0, backlog=512)
            pod.port = pod.server.sockets[0].getsockname()[1]
            return pod.port

        return self._call(listen())  # type: ignore[return-value]

    def add_many(self, bodies: dict[str, Body]) -> dict[str, int]:
        """Start many pods at once; their ports by key."""
        return {key: self.add(key, body) for key, body in bodies.items()}

    def set_status(self, key: str, status: int) -> None:
        """What the pod answers from now on (200 serves its body)."""
        self._pods[key].status = status

    def set_delay(self, key: str, delay: float) -> None:
        """Seconds the pod waits before answering."""
        self._pods[key].delay = delay

    def set_body(self, key: str, body: Body | bytes) -> None:
        """The pod's body from now on."""
        self._pods[key].body = body if callable(body) else (lambda _, fixed=body: fixed)  # type: ignore[misc]

    def scrapes(self, key: str) -> int:
        """Requests the pod answered with its body."""
        return self._pods[key].scrapes

    def port(self, key: str) -> int:
        """The pod's port."""
        return self._pods[key].port

    def stop(self, key: str) -> None:
        """Stop listening for `key` and cut its connections (the pod is gone)."""
        pod = self._pods[key]

        async def stop() -> None:
            if pod.server is not None:
                pod.server.close()
            for writer in list(pod.connections):
                writer.transport.abort()

        self._call(stop())

    async def _serve(
        self, pod: _Pod, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        pod.connections.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].decode("latin-1")
                close = b"connection: close" in head.lower()
                if pod.delay:
                    await asyncio.sleep(pod.delay)
                if pod.status != 200:
                    status, body = pod.status, b"failing on purpose\n"
                elif path.split("?")[0] not in pod.paths:
                    status, body = 404, b"404 page not found\n"
                else:
                    status, body = 200, pod.body(pod.scrapes)
                    pod.scrapes += 1
                writer.write(
                    f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
                    "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                    f"Content-Length: {len(body)}\r\n"
                    f"{'Connection: close' + chr(13) + chr(10) if close else ''}\r\n".encode()
                    + body
                )
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            pod.connections.discard(writer)
            writer.close()

    def close(self) -> None:
        """Stop every pod and the thread."""

        async def stop_all() -> None:
            for pod in self._pods.values():
                if pod.server is not None:
                    pod.server.close()
                for writer in list(pod.connections):
                    writer.transport.abort()
            for pod in self._pods.values():
                if pod.server is not None:
                    await pod.server.wait_closed()
            await asyncio.sleep(0)

        with contextlib.suppress(RuntimeError):
            self._call(stop_all())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()


def main() -> None:
    """Serve `--pods` pods (see the module)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--series", type=int, default=200)
    parser.add_argument("--api", action="store_true")
    options = parser.parse_args()
    from tests.fakes.kube_apiserver import FakeKubeApiServer  # noqa: PLC0415
    from tests.fakes.pod_exposition import go_app_body  # noqa: PLC0415

    endpoints = PodEndpoints()
    ports = [
        endpoints.add(
            f"bench/pod-{index}",
            lambda scrape, index=index: go_app_body(index, scrape, options.series),
        )
        for index in range(options.pods)
    ]
    api = None
    if options.api:
        api = FakeKubeApiServer()
        api.apply_many("replicasets.apps", [bench_replicaset(i) for i in range(10)])
        api.apply_many(
            "pods", [bench_pod(index, port) for index, port in enumerate(ports)], copies=False
        )
        api.start()
    print(json.dumps({"ports": ports, "api": api.url if api else None}), flush=True)
    sys.stdin.read()
    if api is not None:
        api.close()
    endpoints.close()


def bench_pod(index: int, port: int) -> dict[str, object]:
    """The Pod object of benchmark pod `index` (see the module)."""
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": f"pod-{index}",
            "namespace": "bench",
            "labels": {"app": "bench"},
            "ownerReferences": [
                {"kind": "ReplicaSet", "name": f"bench-rs-{index % 10}", "controller": True}
            ],
        },
        "spec": {
            "containers": [{"name": "app", "ports": [{"name": "metrics", "containerPort": port}]}]
        },
        "status": {"phase": "Running", "podIP": "127.0.0.1"},
    }


def bench_replicaset(index: int) -> dict[str, object]:
    """The ReplicaSet `bench-rs-<index>` of the Deployment `bench-<index>`."""
    return {
        "metadata": {
            "name": f"bench-rs-{index}",
            "namespace": "bench",
            "ownerReferences": [
                {"kind": "Deployment", "name": f"bench-{index}", "controller": True}
            ],
        }
    }


if __name__ == "__main__":
    main()
