"""The `http` source (backends/definitions/http_json.py): which addresses a GET may go to (pure,
from a Service and its EndpointSlices) and the fetch itself against real HTTP servers on
loopback sockets started by the test: the value found, a redirect refused, a body over the cap,
a server past the deadline, not a number, no credentials sent, and an address outside the
Service's slices never connected to."""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from custom_metrics_server.backends.definitions.http_json import (
    Target,
    choose,
    fetch_value,
    ready_targets,
    value_at,
)

# -- choosing an address (pure) -------------------------------------------------------------------


def service(ports: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "scheduler", "namespace": "shop"},
        "spec": {"ports": ports or [{"name": "http", "port": 80, "targetPort": 8080}]},
    }


def endpoint_slice(
    endpoints: list[dict[str, Any]],
    *,
    name: str = "scheduler",
    namespace: str = "shop",
    address_type: str = "IPv4",
    ports: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{name}-abcde",
            "namespace": namespace,
            "labels": {"kubernetes.io/service-name": name},
        },
        "addressType": address_type,
        "ports": ports
        if ports is not None
        else [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints,
    }


def ready(*addresses: str, **conditions: bool) -> dict[str, Any]:
    return {"addresses": list(addresses), "conditions": {"ready": True, **conditions}}


def test_only_ready_endpoints_of_the_service_s_own_slices() -> None:
    slices = [
        endpoint_slice(
            [
                ready("10.0.0.2"),
                ready("10.0.0.1"),
                {"addresses": ["10.0.0.3"]},  # no conditions: ready, as the API reads it
                {"addresses": ["10.0.0.4"], "conditions": {"ready": False}},
                ready("10.0.0.5", terminating=True),
            ]
        ),
        endpoint_slice([ready("10.9.9.9")], name="other"),  # another Service's
        endpoint_slice([ready("10.8.8.8")], namespace="evil"),  # the same name elsewhere
        endpoint_slice([{"addresses": ["evil.example.com"]}], address_type="FQDN"),
        endpoint_slice([ready("10.7.7.7")], ports=[{"name": "admin", "port": 9000}]),
        endpoint_slice([ready("127.0.0.1", "169.254.169.254", "0.0.0.0", "224.0.0.1")]),
        endpoint_slice([ready("fd00::1")], address_type="IPv6"),
    ]
    targets = ready_targets(service(), slices, "http")
    assert targets == [
        Target("10.0.0.1", 8080),
        Target("10.0.0.2", 8080),
        Target("10.0.0.3", 8080),
        Target("fd00::1", 8080),
    ]
    # By the Service port's number, the same slice port (the target port, 8080).
    assert ready_targets(service(), slices, 80) == targets
    assert [choose(targets, turn).address for turn in range(5)] == [
        "10.0.0.1",
        "10.0.0.2",
        "10.0.0.3",
        "fd00::1",
        "10.0.0.1",
    ]


def test_no_ready_endpoint_or_no_such_port_is_a_reason() -> None:
    assert ready_targets(service(), [], "http") == (
        "the Service shop/scheduler has no ready endpoint at port 'http'"
    )
    reason = ready_targets(service(), [endpoint_slice([ready("10.0.0.1")])], "metrics")
    assert reason == "the Service shop/scheduler has no port 'metrics'"
    unnamed = service([{"port": 80, "targetPort": 8080}])
    slices = [endpoint_slice([ready("10.0.0.1")], ports=[{"port": 8080}])]
    assert ready_targets(unnamed, slices, 80) == [Target("10.0.0.1", 8080)]


VALUES = [
    ({"queues": [{"pending": 7}]}, "queues.0.pending", 7.0),
    ({"a": {"b": 2.5}}, "a.b", 2.5),
    ({"a": {"b": " 12 "}}, "a.b", 12.0),
    ({"a": {"b": "12x"}}, "a.b", "a.b is '12x', not a number"),
    ({"a": {"b": True}}, "a.b", "a.b is a bool, not a number"),
    ({"a": {"b": None}}, "a.b", "a.b is null, not a number"),
    ({"a": {"b": "NaN"}}, "a.b", "a.b is 'NaN', not a number"),
    ({"a": [1]}, "a", "a is an array, not a number"),
    ({"a": [1]}, "a.1", "a has 1 items, no item 1"),
    ({"a": {}}, "a.b", "no 'b' in a"),
    ([5], "0", 5.0),
    ({"0": 3}, "0", 3.0),
]


@pytest.mark.parametrize(("document", "path", "expected"), VALUES)
def test_value_paths(document: object, path: str, expected: float | str) -> None:
    assert value_at(document, path) == expected


# -- the fetch, against real HTTP servers ---------------------------------------------------------

Handler = Callable[[asyncio.StreamWriter], Awaitable[None]]


@dataclass
class Server:
    """An HTTP/1.1 server on a loopback port; every request's head is kept."""

    handlers: dict[str, Handler]
    heads: list[str] = field(default_factory=list)
    connections: int = 0
    port: int = 0
    server: asyncio.Server | None = None

    async def start(self, host: str = "127.0.0.1") -> None:
        self.server = await asyncio.start_server(self._serve, host, 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            self.heads.append(head)
            path = head.split(" ", 2)[1]
            await self.handlers[path](writer)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


def answer(status: str, body: bytes, extra: str = "") -> Handler:
    async def handle(writer: asyncio.StreamWriter) -> None:
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )

    return handle


async def dribble(writer: asyncio.StreamWriter) -> None:
    """A byte of the head every 0.2 s: never silent for the pool's timeout, never done."""
    for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n":
        writer.write(bytes([byte]))
        await writer.drain()
        await asyncio.sleep(0.2)


HANDLERS: dict[str, Handler] = {
    "/stats?format=json": answer("200 OK", b'{"queues": [{"pending": 42}]}'),
    "/moved": answer("302 Found", b"{}", "Location: http://169.254.169.254/latest\r\n"),
    "/big": answer("200 OK", b'{"pad": "' + b"x" * 5000 + b'", "v": 1}'),
    "/text": answer("200 OK", b'{"queues": [{"pending": "many"}]}'),
    "/html": answer("200 OK", b"<html>"),
    "/error": answer("503 Service Unavailable", b"{}"),
    "/slow": dribble,
    # 2 MB of zeros in about 2 KB: the cap counts the decoded body.
    "/bomb": answer(
        "200 OK",
        gzip.compress(b'{"v": 1, "pad": "' + b"0" * 2_000_000 + b'"}'),
        "Content-Encoding: gzip\r\n",
    ),
    "/gzip": answer("200 OK", gzip.compress(b'{"v": 3}'), "Content-Encoding: gzip\r\n"),
}


@pytest.fixture
async def servers() -> AsyncIterator[tuple[Server, Server]]:
    """The Service's endpoint, and a server at an address outside its slices."""
    inside, outside = Server(HANDLERS), Server(HANDLERS)
    await inside.start()
    await outside.start()
    yield inside, outside
    for item in (inside, outside):
        assert item.server is not None
        item.server.close()
        await item.server.wait_closed()


def slices_for(inside: Server, outside: Server) -> list[dict[str, Any]]:
    """Slices in which only `inside` is a ready endpoint of the Service; `outside` appears as
    not ready, terminating, in another Service's slice and in another namespace's."""
    port = [{"name": "http", "port": inside.port, "protocol": "TCP"}]
    other_port = [{"name": "http", "port": outside.port, "protocol": "TCP"}]
    return [
        endpoint_slice([ready("127.0.0.1")], ports=port),
        endpoint_slice([ready("127.0.0.1", ready=False)], ports=other_port),
        endpoint_slice([ready("127.0.0.1", terminating=True)], ports=other_port),
        endpoint_slice([ready("127.0.0.1")], name="other", ports=other_port),
        endpoint_slice([ready("127.0.0.1")], namespace="evil", ports=other_port),
    ]


async def fetch(
    target: Target, path: str, value_path: str = "queues.0.pending", **kw: Any
) -> float | str:
    return await fetch_value(
        target, service="scheduler", namespace="shop", path=path, value_path=value_path, **kw
    )


async def test_the_value_is_read_from_the_only_ready_endpoint(
    servers: tuple[Server, Server],
) -> None:
    inside, outside = servers
    targets = ready_targets(service(), slices_for(inside, outside), "http", allow_loopback=True)
    assert targets == [Target("127.0.0.1", inside.port)]
    for turn in range(3):
        assert await fetch(choose(targets, turn), "/stats?format=json") == 42.0
    assert outside.connections == 0
    assert inside.connections == 3
    head = inside.heads[0]
    assert head.startswith("GET /stats?format=json HTTP/1.1\r\n")
    assert f"Host: scheduler.shop.svc:{inside.port}\r\n" in head
    assert "authorization" not in head.lower()
    assert "cookie" not in head.lower()
    # Without the test's permission, a loopback endpoint is not an address at all.
    assert isinstance(ready_targets(service(), slices_for(inside, outside), "http"), str)


async def test_failures_are_reasons(servers: tuple[Server, Server]) -> None:
    inside, _ = servers
    target = Target("127.0.0.1", inside.port)
    where = f"127.0.0.1:{inside.port}"
    assert await fetch(target, "/moved") == (
        f"{where} answered 302 Found: redirects are not followed"
    )
    assert await fetch(target, "/big", "v", max_body=1000) == (
        f"{where} answered a body over 1000 bytes"
    )
    assert await fetch(target, "/big", "v") == 1.0  # the same body under the default cap
    assert await fetch(target, "/bomb", "v") == f"{where} answered a body over 1048576 bytes"
    assert await fetch(target, "/gzip", "v") == 3.0
    assert await fetch(target, "/text") == "queues.0.pending is 'many', not a number"
    assert str(await fetch(target, "/html")).startswith(f"{where} answered a body that is not JSON")
    assert await fetch(target, "/error") == f"{where} answered 503 Service Unavailable"
    assert sum(head.startswith("GET /moved ") for head in inside.heads) == 1


async def test_a_slow_server_is_cut_at_the_deadline(servers: tuple[Server, Server]) -> None:
    """The server sends a byte every 0.2 s for 8 s: never silent long enough for the pool's
    own timeout, so only the whole-exchange deadline (1 s) ends it. The bound (6 s) sits
    between a loaded machine's few hundred milliseconds past the deadline and the 8 s the
    server would take."""
    inside, _ = servers
    started = time.monotonic()
    reason = await fetch(Target("127.0.0.1", inside.port), "/slow", deadline=1.0)
    assert reason == f"127.0.0.1:{inside.port} did not answer within 1s"
    assert time.monotonic() - started < 6.0


async def test_nothing_listening_and_bad_requests_are_reasons(
    servers: tuple[Server, Server],
) -> None:
    inside, _ = servers
    target = Target("127.0.0.1", inside.port)
    for path in ("stats", "//evil.example.com/x", "/a b", "/a\r\nAuthorization: x", "/#x", "/é"):
        reason = await fetch(target, path)
        assert isinstance(reason, str)
        assert "not an absolute path" in reason
    assert (
        await fetch_value(target, service="Bad_Name", namespace="shop", path="/", value_path="a")
        == "shop/Bad_Name is not a Service's name"
    )
    assert inside.connections == 0
    closed = Server(HANDLERS)
    await closed.start()
    assert closed.server is not None
    closed.server.close()
    await closed.server.wait_closed()
    reason = await fetch(Target("127.0.0.1", closed.port), "/stats?format=json")
    assert isinstance(reason, str)
    assert reason.startswith(f"127.0.0.1:{closed.port} could not be read")


def host_address() -> str | None:
    """This host's address that is not loopback (loopback is never proxied, so a proxy test
    needs another), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: a UDP connect picks a route
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if ipaddress.ip_address(address).is_loopback else address


async def test_an_endpoint_is_called_directly_whatever_the_environment_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    address = host_address()
    if address is None:
        pytest.skip("this host has no address but loopback")
    endpoint, proxy = Server(HANDLERS), Server(HANDLERS)
    await endpoint.start(address)
    await proxy.start()
    try:
        for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
            monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.port}")
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        assert await fetch(Target(address, endpoint.port), "/stats?format=json") == 42.0
        assert (endpoint.connections, proxy.connections) == (1, 0)
    finally:
        for item in (endpoint, proxy):
            assert item.server is not None
            item.server.close()
            await item.server.wait_closed()
