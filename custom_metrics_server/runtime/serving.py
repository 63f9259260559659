"""The HTTPS listener both commands run: uvicorn with the guards it lacks.

`TlsServer` binds its own listener with a TLS handshake timeout (uvicorn passes none, so
asyncio's 60 s applies), reports the bound port, and terminates gracefully as the generic
apiserver does. Both `serve` and `node-agent` use it, with the header-read timeout protocol
(`security.tls_peer`), so neither can be held open by slow or silent clients.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Final

import uvicorn

logger = logging.getLogger("custom_metrics_server")

#: uvicorn's exit status when start-up fails (not exported by uvicorn).
STARTUP_FAILURE: Final = 3
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
    ) -> None:
        super().__init__(config)
        self._on_bound = on_bound
        self._on_shutdown = on_shutdown
        self._shutdown_delay = shutdown_delay
        self._tls_handshake_timeout = tls_handshake_timeout
        self._exit_at: float | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's start-up for a host/port listener, plus `ssl_handshake_timeout`: uvicorn
        does not pass one, so asyncio's 60 s would let handshake-only connections (that the
        header-read timer, armed after the handshake, never sees) sit for a minute each."""
        assert sockets is None, "serve() binds its own listener"
        await self.lifespan.startup()
        if self.lifespan.should_exit:
            sys.exit(STARTUP_FAILURE)
        config = self.config

        def create_protocol(_loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config,
                server_state=self.server_state,
                app_state=self.lifespan.state,
                _loop=_loop,
            )

        try:
            server = await asyncio.get_running_loop().create_server(
                create_protocol,
                host=config.host,
                port=config.port,
                ssl=config.ssl,
                backlog=config.backlog,
                ssl_handshake_timeout=self._tls_handshake_timeout if config.ssl else None,
            )
        except OSError as err:
            logger.error("cannot listen on %s:%s: %s", config.host, config.port, err)
            await self.lifespan.shutdown()
            sys.exit(STARTUP_FAILURE)
        self.servers = [server]
        self.started = True
        self._on_bound(server.sockets[0].getsockname()[1])

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
