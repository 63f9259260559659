"""The worker-to-main forwarding protocol (`runtime/forward.py`) in one process, over a real
Unix socket: answers equal the application's own (status, headers, every body message), many
requests in flight share the one connection, a cancelled request cancels the application's
task on the other side, a lost main process fails the requests waiting on it, a worker's hello
reaches the main side, and a broken frame closes the connection instead of hanging.

`tests/test_workers.py` drives the same code through real `serve --workers` processes; these
tests reach the corners a process test cannot make happen on purpose."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from custom_metrics_server.runtime.asgi import Message, Receive, Scope, Send
from custom_metrics_server.runtime.forward import (
    ForwardClient,
    ForwardServer,
    MainUnavailable,
)


class App:
    """An ASGI application with a few behaviours chosen by path."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.scopes: list[Scope] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scopes.append(scope)
        request = await receive()
        assert request == {"type": "http.request", "body": b"", "more_body": False}
        path = scope["path"]
        if path == "/hang":
            self.started.set()
            try:
                await asyncio.get_running_loop().create_future()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        headers = [(b"content-type", b"application/json"), (b"x-echo", scope["query_string"])]
        if path == "/chunks":
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            for part in (b"one,", b"two,", b""):
                await send({"type": "http.response.body", "body": part, "more_body": bool(part)})
            return
        status = 404 if path == "/missing" else 200
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": path.encode() * 3})


def scope_for(path: str, query: bytes = b"") -> Scope:
    return {
        "type": "http",
        "method": "GET",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "headers": [(b"accept", b"application/json"), (b"x-remote-user", b"\xe9")],
        "server": ("10.0.0.1", 6443),
        "client": ("10.0.0.2", 51000),
    }


class Collected:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def __call__(self, message: Message) -> None:
        self.messages.append(message)


async def direct(app: App, scope: Scope) -> list[Message]:
    collected = Collected()
    sent = False

    async def receive() -> Message:
        nonlocal sent
        sent = True
        return {"type": "http.request", "body": b"", "more_body": False}

    await app(scope, receive, collected)
    assert sent
    return collected.messages


def normalised(messages: list[Message]) -> list[dict[str, Any]]:
    """The messages as the client sees them (headers as tuples, `more_body` explicit)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message["type"] == "http.response.start":
            out.append(
                {
                    "type": message["type"],
                    "status": message["status"],
                    "headers": [tuple(pair) for pair in message["headers"]],
                }
            )
        else:
            out.append(
                {
                    "type": message["type"],
                    "body": message.get("body", b""),
                    "more_body": bool(message.get("more_body", False)),
                }
            )
    return out


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[App, ForwardClient, list[str]]]:
    app = App()
    greeted: list[str] = []
    server = ForwardServer(app, greeted.append)
    listening = await server.start(str(tmp_path / "main.sock"))
    client = ForwardClient(str(tmp_path / "main.sock"))
    await client.connect()
    assert client.connected
    yield app, client, greeted
    if client._transport is not None:
        client._transport.transport.close()
        await asyncio.wait_for(client.lost.wait(), 5)
    listening.close()
    await listening.wait_closed()


@pytest.mark.parametrize(
    ("path", "query"),
    [("/apis/x", b""), ("/missing", b"a=1&b=%2A"), ("/chunks", b"pretty=1")],
)
async def test_a_forwarded_answer_is_the_applications_own(
    pair: tuple[App, ForwardClient, list[str]], path: str, query: bytes
) -> None:
    app, client, _ = pair
    expected = normalised(await direct(app, scope_for(path, query)))
    collected = Collected()
    await client.forward(scope_for(path, query), collected)
    assert normalised(collected.messages) == expected
    seen = app.scopes[-1]
    assert seen["path"] == path
    assert seen["query_string"] == query
    assert seen["server"] == ("10.0.0.1", 6443)
    assert seen["client"] == ("10.0.0.2", 51000)
    # Header bytes survive the text encoding (latin-1), non-ASCII included.
    assert (b"x-remote-user", b"\xe9") in seen["headers"]


async def test_many_requests_share_the_connection(
    pair: tuple[App, ForwardClient, list[str]],
) -> None:
    _, client, _ = pair

    async def one(number: int) -> bytes:
        collected = Collected()
        await client.forward(scope_for(f"/p{number}"), collected)
        return b"".join(m.get("body", b"") for m in collected.messages)

    bodies = await asyncio.gather(*(one(n) for n in range(200)))
    assert bodies == [f"/p{n}".encode() * 3 for n in range(200)]


async def test_a_cancelled_request_cancels_the_application_on_the_main_side(
    pair: tuple[App, ForwardClient, list[str]],
) -> None:
    app, client, _ = pair
    task = asyncio.ensure_future(client.forward(scope_for("/hang"), Collected()))
    await asyncio.wait_for(app.started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(app.cancelled.wait(), 5)
    # The connection still serves the next request.
    collected = Collected()
    await client.forward(scope_for("/after"), collected)
    assert collected.messages[0]["status"] == 200


async def test_a_lost_main_process_fails_the_waiting_requests(
    pair: tuple[App, ForwardClient, list[str]],
) -> None:
    app, client, _ = pair
    waiting = asyncio.ensure_future(client.forward(scope_for("/hang"), Collected()))
    await asyncio.wait_for(app.started.wait(), 5)
    assert client._transport is not None
    client._transport.transport.abort()  # as if the main process died
    with pytest.raises(MainUnavailable):
        await asyncio.wait_for(waiting, 5)
    await asyncio.wait_for(client.lost.wait(), 5)
    assert not client.connected
    with pytest.raises(MainUnavailable, match="not connected"):
        await client.forward(scope_for("/x"), Collected())
    await asyncio.wait_for(app.cancelled.wait(), 5)  # the main side let go of it too


async def test_a_hello_names_the_worker(pair: tuple[App, ForwardClient, list[str]]) -> None:
    _, client, greeted = pair
    client.hello("4242")
    collected = Collected()
    await client.forward(scope_for("/x"), collected)  # frames are handled in order
    assert greeted == ["4242"]


async def test_a_broken_frame_closes_the_connection(
    pair: tuple[App, ForwardClient, list[str]],
) -> None:
    _, client, _ = pair
    assert client._transport is not None
    # A length beyond any frame the protocol allows.
    client._transport.transport.write(b"\xff\xff\xff\xff" + b"\x00" * 5)
    await asyncio.wait_for(client.lost.wait(), 5)
    assert not client.connected
