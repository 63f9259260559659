"""A worker of `serve --workers N`: the whole server on the port shared with `SO_REUSEPORT`.

The command line builds the same application as for one process (its own backend instances
and auth caches) and hands it here with `--worker-link FD`, its end of the socket pair to the
main process (`workers.supervisor`). Once the port is bound the worker writes one line on the
link; it exits (SIGTERM to itself, so it drains as on a kubelet's SIGTERM) when the link reads
end-of-file, and with `PR_SET_PDEATHSIG` when the main process dies, even by SIGKILL.

Per request: exactly one process's path; nothing crosses the link.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
from typing import Final

import uvicorn

from custom_metrics_server.runtime.serving import TlsServer
from custom_metrics_server.server.app import Server

__all__ = ["die_with_parent", "serve_worker"]

logger = logging.getLogger("custom_metrics_server")

_PR_SET_PDEATHSIG: Final = 1
#: What a worker writes on its link once it listens.
_LISTENING: Final = b"listening\n"


def die_with_parent(parent: int) -> None:
    """SIGTERM when the main process dies (Linux); exit now if it already did."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def _main_gone(link: socket.socket) -> None:
    """The link is readable: the main process closed it (or wrote, which it never does)."""
    try:
        data = link.recv(64)
    except (BlockingIOError, InterruptedError):
        return
    except OSError:
        data = b""
    if data:
        return
    asyncio.get_running_loop().remove_reader(link.fileno())
    logger.warning("worker %d: the main process is gone; exiting", os.getpid())
    os.kill(os.getpid(), signal.SIGTERM)


def serve_worker(args: argparse.Namespace, config: uvicorn.Config, app: Server) -> None:
    """Serve `app` as a worker until SIGTERM or the main process is gone."""
    die_with_parent(os.getppid())
    link = socket.socket(fileno=args.worker_link)
    link.setblocking(False)

    def on_bound(_port: int) -> None:
        with contextlib.suppress(OSError):  # the main process is gone: the read says so
            link.send(_LISTENING)
        asyncio.get_running_loop().add_reader(link.fileno(), _main_gone, link)

    server = TlsServer(
        config,
        on_bound,
        on_shutdown=app.begin_shutdown,
        shutdown_delay=args.shutdown_delay_duration,
        tls_handshake_timeout=args.tls_handshake_timeout,
        startup_error=lambda: app.startup_error,
    )
    server.reuse_port = True
    with link:
        server.run()
