"""A real forward proxy on a socket for the tests of environment proxies (the pool's, and its
callers'): CONNECT tunnels and absolute-form requests, relaying bytes both ways. It resolves
every name it is asked for to one origin on 127.0.0.1, as a proxy in front of a cluster
resolves names its clients cannot, so a call that reaches an origin named `*.test` went
through it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

PROXY_VARIABLES = (
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
)


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy variable of the machine's leaks into the test."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@dataclass
class ConnectProxy:
    """A forward proxy: CONNECT tunnels and absolute-form requests, every name it is asked for
    resolved to `origin_port` on 127.0.0.1 (or refused with `refuse`)."""

    origin_port: int = 0
    refuse: bytes | None = None
    heads: list[bytes] = field(default_factory=list)
    relayed: bytearray = field(default_factory=bytearray)  # client -> origin, as relayed
    server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.heads.append(head)
            if self.refuse is not None:
                writer.write(self.refuse)
                await writer.drain()
                return
            method, _, _ = head.split(b"\r\n", 1)[0].split(b" ", 2)
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.origin_port)
            if method == b"CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:  # absolute form: the origin gets the request as the client sent it
                up_writer.write(head)
            await asyncio.gather(
                self._pipe(reader, up_writer, record=True), self._pipe(up_reader, writer)
            )
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _pipe(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, record: bool = False
    ) -> None:
        try:
            while data := await source.read(65536):
                if record:
                    self.relayed += data
                sink.write(data)
                await sink.drain()
        finally:
            sink.close()


@pytest.fixture
async def proxy(clean_environment: None) -> AsyncIterator[ConnectProxy]:
    """A proxy on a free port (with no proxy variable of the machine's set)."""
    relay = ConnectProxy()
    relay.server = await asyncio.start_server(relay.handle, "127.0.0.1", 0)
    yield relay
    relay.server.close()
