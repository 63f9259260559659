"""A served request leaves no reference cycle behind: its objects are freed by reference
counting as it ends, not by the cyclic GC in batches that stall the loop (issue 17 item 5)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

from custom_metrics_server.server.chain import EXCHANGE, ShutdownState, Tracking, exchange_of
from custom_metrics_server.server.observability import ServerMetrics


class Cycle:
    """uvicorn's RequestResponseCycle in miniature: it holds the scope it passes to the app,
    and its `send` is a bound method (so the `send` the chain keeps holds the cycle)."""

    def __init__(self, scope: dict[str, Any]) -> None:
        self.scope = scope
        self.sent: list[dict[str, Any]] = []

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    async def receive(self) -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    exchange_of(scope).labels = ("g", "v", "r")
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


async def test_a_request_is_freed_by_reference_counting() -> None:
    tracking = Tracking(app, ServerMetrics(), ShutdownState())
    scope: dict[str, Any] = {"type": "http", "method": "GET", "path": "/apis/x"}
    cycle = Cycle(scope)
    gc.disable()
    try:
        await tracking(scope, cycle.receive, cycle.send)
        assert [m["type"] for m in cycle.sent] == ["http.response.start", "http.response.body"]
        assert EXCHANGE not in scope
        gone = weakref.ref(cycle)
        del cycle, scope
        assert gone() is None  # no collection ran: nothing held it in a cycle
    finally:
        gc.enable()
