"""The agent's HTTPS endpoints, a bare ASGI app (no framework: three GET routes).

* ``/metrics/resource``: the kubelet-format body (:class:`.Collector`);
* ``/healthz`` and ``/readyz`` (the same check; the DaemonSet's readiness probe): 200 ``ok``
  while the agent has figures to serve, i.e. the last collection (made now when the last
  body is older than ``--stats-cache-duration``) read the runtime's stats, else 503 with the
  runtime's answer: an agent serving ``resource_scrape_error 1`` is not ready, so its pod
  leaves the Ready set instead of looking healthy while it serves nothing. A sandbox left out
  of a collection (its own stats call failed) does not fail it: the others are served. The
  liveness probe reads ``/metrics``, which never asks the runtime (restarting the agent would
  not bring a stopped runtime back);
* ``/metrics``: the agent's own metrics (Prometheus text).

Anything else is 404, other methods 405. No authentication: the agent serves read-only usage
numbers, like the kubelet's read-only port; restrict who can reach it with a NetworkPolicy
(see docs/node-agent.md).
"""

from __future__ import annotations

from typing import Final

from prometheus_client import generate_latest

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
        elif path in ("/healthz", "/readyz"):
            await self._healthz(send)
        elif path == "/metrics":
            await _answer(send, 200, generate_latest(self.collector.registry))
        else:
            await _answer(send, 404, b"not found\n")

    async def _healthz(self, send: Send) -> None:
        failure = await self.collector.usable()
        if failure is not None:
            body = f"no figures to serve: container runtime: {failure.message}\n"
            await _answer(send, 503, body.encode())
            return
        await _answer(send, 200, b"ok")
