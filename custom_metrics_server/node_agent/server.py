"""The agent's HTTPS endpoints, a bare ASGI app (no framework: three GET routes).

* ``/metrics/resource``: the kubelet-format body (:class:`.Collector`);
* ``/healthz``: 200 ``ok`` when the runtime answers ``Version`` within the CRI deadline,
  else 503 with the reason (the DaemonSet's liveness and readiness probes);
* ``/metrics``: the agent's own metrics (Prometheus text).

Anything else is 404, other methods 405. No authentication: the agent serves read-only usage
numbers, like the kubelet's read-only port; restrict who can reach it with a NetworkPolicy
(see docs/node-agent.md).
"""

from __future__ import annotations

from typing import Final

from prometheus_client import generate_latest

from custom_metrics_server.compute.scrape_failure import ScrapeFailure
from custom_metrics_server.node_agent.collector import Collector
from custom_metrics_server.node_agent.runtime import RuntimeClient
from custom_metrics_server.runtime.asgi import Receive, Scope, Send, send_body

__all__ = ["AgentApp"]

TEXT: Final = b"text/plain; version=0.0.4; charset=utf-8"


async def _answer(send: Send, status: int, body: bytes) -> None:
    await send_body(send, status, body, ((b"content-type", TEXT),))


class AgentApp:
    """The ASGI app of ``node-agent``."""

    def __init__(self, collector: Collector, runtime: RuntimeClient) -> None:
        self.collector = collector
        self.runtime = runtime

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        if scope["method"] not in ("GET", "HEAD"):
            await _answer(send, 405, b"method not allowed\n")
            return
        path = scope["path"]
        if path == "/metrics/resource":
            await _answer(send, 200, await self.collector.body())
        elif path == "/healthz":
            await self._healthz(send)
        elif path == "/metrics":
            await _answer(send, 200, generate_latest(self.collector.registry))
        else:
            await _answer(send, 404, b"not found\n")

    async def _healthz(self, send: Send) -> None:
        try:
            await self.runtime.version()
        except ScrapeFailure as err:
            self.collector.runtime_up.set(0)
            await _answer(send, 503, f"container runtime: {err.message}\n".encode())
            return
        self.collector.runtime_up.set(1)  # "the last CRI call succeeded": this one did
        await _answer(send, 200, b"ok")
