"""`runtime.asgi.send_body`: one message for a small body, slices for a large one, and what a
client reads back is the body with its length either way."""

from __future__ import annotations

import pytest

from custom_metrics_server.runtime.asgi import BODY_SLICE, Message, send_body


async def sent(body: bytes) -> list[Message]:
    messages: list[Message] = []

    async def send(message: Message) -> None:
        messages.append(message)

    await send_body(send, 200, body, ((b"content-type", b"application/json"),))
    return messages


@pytest.mark.parametrize("size", [0, 1, 2 * BODY_SLICE])
async def test_a_small_body_goes_out_in_one_message(size: int) -> None:
    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    start, *rest = await sent(body)
    assert start["headers"][-1] == (b"content-length", str(size).encode())
    assert rest == [{"type": "http.response.body", "body": body}]


@pytest.mark.parametrize("size", [2 * BODY_SLICE + 1, 5 * BODY_SLICE, 840_020])
async def test_a_large_body_goes_out_in_slices_that_add_up_to_it(size: int) -> None:
    body = (bytes(range(256)) * (size // 256 + 1))[:size]
    start, *rest = await sent(body)
    assert start["type"] == "http.response.start"
    assert start["headers"] == [
        (b"content-type", b"application/json"),
        (b"content-length", str(size).encode()),
    ]
    assert len(rest) == -(-size // BODY_SLICE)
    assert all(len(message["body"]) <= BODY_SLICE for message in rest)
    assert [message["more_body"] for message in rest] == [True] * (len(rest) - 1) + [False]
    assert b"".join(message["body"] for message in rest) == body
