"""The reviews' calls of `kube.client.KubeClient` (the webhooks' `post_json`) against the fake
API server over TLS and a raw socket server: answers, credentials, the request on the wire, and
the errors the webhooks' retry policy reads."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from custom_metrics_server.kube.client import KubeApiError, KubeClient
from custom_metrics_server.kube.config import Connection, load_connection
from custom_metrics_server.security.webhook import (
    SUBJECT_ACCESS_REVIEW_PATH,
    TOKEN_REVIEW_PATH,
    should_retry,
)
from tests.fakes.auth_webhooks import CLIENT_TOKEN, FakeAuthApiServer

SAR = {
    "apiVersion": "authorization.k8s.io/v1",
    "kind": "SubjectAccessReview",
    "spec": {
        "resourceAttributes": {"verb": "get", "resource": "pods", "subresource": "m"},
        "user": "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
    },
}


@pytest.fixture
def fake(tmp_path: Path) -> Any:
    with FakeAuthApiServer() as server:
        server.allow_all = True
        server.kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        yield server


async def test_answers_and_credentials(fake: Any) -> None:
    client = KubeClient(load_connection(str(fake.kubeconfig)), timeout=2.0)
    try:
        answers = [await client.post_json(SUBJECT_ACCESS_REVIEW_PATH, SAR) for _ in range(4)]
        fake.tokens["good"] = {"username": "tina", "groups": ["dev"]}
        token = await client.post_json(
            TOKEN_REVIEW_PATH,
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": "good"},
            },
        )
    finally:
        await client.aclose()
    assert answers == [{**answers[0], "status": {"allowed": True}}] * 4
    assert token["status"] == {
        "authenticated": True,
        "user": {"username": "tina", "groups": ["dev"]},
    }
    assert fake.access_reviews == [SAR] * 4
    assert fake.authorizations == [f"Bearer {CLIENT_TOKEN}"] * 5


async def test_a_rotated_token_file_is_sent(fake: Any, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first\n")
    connection = load_connection(str(fake.kubeconfig))
    connection.token, connection.token_file = None, str(token_file)
    client = KubeClient(connection, timeout=2.0)
    try:
        await client.post_json(SUBJECT_ACCESS_REVIEW_PATH, SAR)
        token_file.write_text("second\n")
        connection._token_cache = None  # the minute Connection keeps a token file's text
        await client.post_json(SUBJECT_ACCESS_REVIEW_PATH, SAR)
    finally:
        await client.aclose()
    assert fake.authorizations == ["Bearer first", "Bearer second"]


@pytest.mark.parametrize(
    ("code", "reason", "retried"),
    [
        (500, "InternalError", True),
        (429, "TooManyRequests", True),
        (503, "ServiceUnavailable", False),
    ],
)
async def test_error_statuses_are_kube_api_errors(
    fake: Any, code: int, reason: str, retried: bool
) -> None:
    client = KubeClient(load_connection(str(fake.kubeconfig)), timeout=2.0)
    fake.fail_status = code
    try:
        with pytest.raises(KubeApiError) as caught:
            await client.post_json(SUBJECT_ACCESS_REVIEW_PATH, SAR)
    finally:
        await client.aclose()
    error = caught.value
    assert (error.code, error.reason, error.message) == (code, reason, "injected failure")
    assert error.call == f"POST {fake.url}{SUBJECT_ACCESS_REVIEW_PATH}"
    assert should_retry(error) is retried


async def test_refused_is_not_retried_and_a_restart_is_survived(fake: Any) -> None:
    client = KubeClient(load_connection(str(fake.kubeconfig)), timeout=2.0)
    try:
        await client.post_json(SUBJECT_ACCESS_REVIEW_PATH, SAR)  # a kept-alive connection
        fake.down()
        with pytest.raises(KubeApiError) as caught:
            await client.post_json(SUBJECT_ACCESS_REVIEW_PATH, SAR)
        fake.up()
        again = await client.post_json(SUBJECT_ACCESS_REVIEW_PATH, SAR)
    finally:
        await client.aclose()
    assert caught.value.code == 0
    assert "ConnectError" in caught.value.message
    assert not should_retry(caught.value)
    assert again["status"] == {"allowed": True}


async def raw_server(
    answer: Callable[[bytes], bytes | None],
) -> tuple[asyncio.Server, list[bytes]]:
    """A plain-HTTP server on loopback: records each request (head and body) and writes
    `answer(request)`, or stays silent for None."""
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                request = head + await reader.readexactly(length)
                seen.append(request)
                reply = answer(request)
                if reply is None:
                    await asyncio.sleep(30)
                    return
                writer.write(reply)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0), seen


@pytest.fixture
async def silent() -> AsyncIterator[tuple[int, list[bytes]]]:
    server, seen = await raw_server(lambda request: None)
    async with server:
        yield server.sockets[0].getsockname()[1], seen


def raw_client(url: str, timeout: float = 2.0) -> KubeClient:
    return KubeClient(Connection(host=url, token="t0k"), timeout=timeout)


async def test_a_silent_server_times_out_and_is_retried(silent: tuple[int, list[bytes]]) -> None:
    port, seen = silent
    client = raw_client(f"http://127.0.0.1:{port}", timeout=0.2)
    try:
        with pytest.raises(KubeApiError) as caught:
            await client.post_json(SUBJECT_ACCESS_REVIEW_PATH, SAR)
    finally:
        await client.aclose()
    assert caught.value.code == 0
    assert "ReadTimeout" in caught.value.message
    assert should_retry(caught.value)
    assert len(seen) == 1


async def test_the_request_on_the_wire() -> None:
    body = b'{"status":{"allowed":true}}'
    reply = b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    server, seen = await raw_server(lambda request: reply)
    async with server:
        port = server.sockets[0].getsockname()[1]
        client = raw_client(f"http://127.0.0.1:{port}/under/")
        try:
            answer = await client.post_json(SUBJECT_ACCESS_REVIEW_PATH, {"a": 1})
        finally:
            await client.aclose()
    assert answer == {"status": {"allowed": True}}
    head, _, sent = seen[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /under" + SUBJECT_ACCESS_REVIEW_PATH.encode() + b" HTTP/1.1"
    assert f"Host: 127.0.0.1:{port}".encode() in lines
    assert b"Authorization: Bearer t0k" in lines
    assert b"Content-Type: application/json" in lines
    assert b"Content-Length: 7" in lines
    assert sent == b'{"a":1}'
