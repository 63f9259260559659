"""The HTTPS listener both commands run: uvicorn with the guards it lacks.

`TlsServer` binds its own listener with a TLS handshake timeout (uvicorn passes none, so
asyncio's 60 s applies), reports the bound port, and terminates gracefully as the generic
apiserver does. A start-up that fails (the application's lifespan, or a port that cannot be
bound) raises `runtime.startup.StartupError` out of `run()`/`serve()` for the command to report
in one line; uvicorn's own "Application startup failed" line is left out, since that report is
the line an operator needs. Both `serve` and `node-agent` use it, with the header-read timeout
protocol (`security.tls_peer`), so neither can be held open by slow or silent clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Final

import uvicorn

from custom_metrics_server.runtime.startup import StartupError, as_startup_error

logger = logging.getLogger("custom_metrics_server")

#: Go's net/http `TLSHandshakeTimeout` as the generic apiserver sets it (asyncio's is 60 s).
TLS_HANDSHAKE_TIMEOUT: Final = 10.0


class TlsServer(uvicorn.Server):
    """uvicorn, plus a TLS handshake timeout (`startup`), a banner once the socket is bound
    (the real port is known only then), and upstream's graceful termination
    (docs/operations.md, "Shutdown"):

    1. the first SIGTERM/SIGINT calls `on_shutdown` (the API server fails `/readyz` at once
       and marks responses `Connection: close`);
    2. requests are still served for `shutdown_delay` seconds (endpoints drop the pod meanwhile);
    3. then uvicorn's own graceful shutdown: listener closed, in-flight requests finish (at most
       `timeout_graceful_shutdown`), lifespan shutdown, exit status 0;
    4. a second signal forces the exit at once (and the process dies of that signal).
    """

    def __init__(
        self,
        config: uvicorn.Config,
        on_bound: Callable[[int], None],
        *,
        on_shutdown: Callable[[], None] | None = None,
        shutdown_delay: float = 0.0,
        tls_handshake_timeout: float = TLS_HANDSHAKE_TIMEOUT,
        startup_error: Callable[[], BaseException | None] | None = None,
    ) -> None:
        super().__init__(config)
        self._on_bound = on_bound
        self._startup_error = startup_error
        self._on_shutdown = on_shutdown
        self._shutdown_delay = shutdown_delay
        self._tls_handshake_timeout = tls_handshake_timeout
        self._exit_at: float | None = None
        #: set SO_REUSEPORT on the listener (worker processes sharing one port)
        self.reuse_port = False

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's start-up for a host/port listener, plus `ssl_handshake_timeout`: uvicorn
        does not pass one, so asyncio's 60 s would let handshake-only connections (that the
        header-read timer, armed after the handshake, never sees) sit for a minute each."""
        assert sockets is None, "serve() binds its own listener"
        with _without_uvicorn_startup_failure_line():
            await self.lifespan.startup()
        if self.lifespan.should_exit:
            failure = self._startup_error() if self._startup_error else None
            if failure is None:
                raise StartupError(
                    "the application did not start", fix="see the lines above this one"
                )
            raise as_startup_error(failure)
        config = self.config

        def create_protocol(_loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config,
                server_state=self.server_state,
                app_state=self.lifespan.state,
                _loop=_loop,
            )

        try:
            server = await self.listen(create_protocol)
        except OSError as err:
            await self.lifespan.shutdown()
            raise listen_error(config.host, config.port, err) from err
        except BaseException:
            await self.lifespan.shutdown()
            raise
        self.servers = [server]
        self.started = True
        self._on_bound(self.bound_port(server))

    async def listen(self, create_protocol: Callable[[], asyncio.Protocol]) -> asyncio.Server:
        """Open the listener (`reuse_port`: one of several processes on the same port, the
        kernel spreading connections over them: `serve --workers`)."""
        config = self.config
        return await asyncio.get_running_loop().create_server(
            create_protocol,
            host=config.host,
            port=config.port,
            ssl=config.ssl,
            backlog=config.backlog,
            ssl_handshake_timeout=self._tls_handshake_timeout if config.ssl else None,
            reuse_port=self.reuse_port or None,
        )

    def bound_port(self, server: asyncio.Server) -> int:
        """The port clients reach (the listener's, unless a subclass serves elsewhere)."""
        port: int = server.sockets[0].getsockname()[1]
        return port

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Runs as a signal handler: only flags here; `on_tick` acts on them.
        if self._exit_at is not None:
            logger.warning("second termination signal: exiting at once")
            self.force_exit = True
            self.should_exit = True
            self._captured_signals.append(sig)  # uvicorn re-raises it after its loop
            return
        logger.info(
            "termination signal: /readyz fails now, serving for %gs more", self._shutdown_delay
        )
        self._exit_at = time.monotonic() + self._shutdown_delay
        if self._on_shutdown is not None:
            self._on_shutdown()

    async def on_tick(self, counter: int) -> bool:
        if self._exit_at is not None and time.monotonic() >= self._exit_at:
            self.should_exit = True
        return await super().on_tick(counter)


def listen_error(host: str, port: int, err: OSError) -> StartupError:
    """What a failed bind means and what to change."""
    fixes = {
        errno.EADDRINUSE: "another process listens there: stop it, or pick another "
        "--secure-port or --bind-address",
        errno.EADDRNOTAVAIL: "--bind-address must be an address of this host (or 0.0.0.0)",
        errno.EACCES: "ports below 1024 need privileges the server does not take: pick a "
        "--secure-port of 1024 or more (the Service maps 443 to it)",
    }
    return StartupError(
        f"cannot listen on {host}:{port}",
        status=(os.strerror(err.errno) if err.errno else str(err)).lower(),
        fix=fixes.get(err.errno or 0, "check --bind-address and --secure-port"),
    )


class _DropStartupFailedLine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "Application startup failed. Exiting."


@contextlib.contextmanager
def _without_uvicorn_startup_failure_line() -> Iterator[None]:
    """uvicorn logs "Application startup failed. Exiting." after a failed lifespan; the
    command's own line (what failed, the call, the fix) replaces it."""
    uvicorn_logger = logging.getLogger("uvicorn.error")
    dropper = _DropStartupFailedLine()
    uvicorn_logger.addFilter(dropper)
    try:
        yield
    finally:
        uvicorn_logger.removeFilter(dropper)
