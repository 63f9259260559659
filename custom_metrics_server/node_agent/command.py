"""``custom-metrics-server node-agent``: flags, TLS, and the uvicorn run.

:func:`add_parser` registers the subcommand on the main parser; :func:`run` starts it. No
request logic lives here.

Start-up failures are one line (`runtime.startup`), as for `serve`: an endpoint that is not a
unix socket, a socket path that does not exist, is not a socket or may not be opened, and
certificate files that cannot be read exit 2 with the fix; a port that cannot be bound exits 3.
A runtime that does not answer yet is not one: the agent serves, `/healthz` fails until it
answers (a restarting containerd must not crash-loop the DaemonSet), and one warning says so.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import ssl
import stat
from pathlib import Path
from typing import Any

import uvicorn

from custom_metrics_server import __version__
from custom_metrics_server.node_agent.collector import Collector
from custom_metrics_server.node_agent.host import HostReader
from custom_metrics_server.node_agent.runtime import RuntimeClient, grpc_target
from custom_metrics_server.node_agent.server import AgentApp
from custom_metrics_server.runtime.logs import configure_logging
from custom_metrics_server.runtime.serving import TlsServer
from custom_metrics_server.runtime.startup import (
    CONFIGURATION,
    StartupError,
    report_startup_failure,
)
from custom_metrics_server.runtime.tls import ReloadingServerContext, ensure_serving_certificate
from custom_metrics_server.scraping.failure import ScrapeFailure
from custom_metrics_server.security.options import duration as parse_duration
from custom_metrics_server.security.tls_peer import (
    HEADER_READ_TIMEOUT,
    TlsHttpToolsProtocol,
    with_header_read_timeout,
)

__all__ = ["DEFAULT_CRI_ENDPOINT", "DEFAULT_PORT", "add_parser", "run"]

logger = logging.getLogger("custom_metrics_server.node_agent")

DEFAULT_CRI_ENDPOINT = "unix:///run/containerd/containerd.sock"
DEFAULT_PORT = 10443


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Add ``node-agent`` to the subcommands ``commands`` (an argparse subparsers action)."""
    agent: argparse.ArgumentParser = commands.add_parser(
        "node-agent",
        help="serve the kubelet's /metrics/resource from the container runtime (CRI)",
    )
    agent.add_argument(
        "--cri-endpoint",
        default=DEFAULT_CRI_ENDPOINT,
        help="CRI socket, e.g. unix:///run/containerd/containerd.sock or "
        "unix:///var/run/crio/crio.sock (default: containerd's)",
    )
    agent.add_argument(
        "--cri-timeout",
        type=parse_duration,
        default=2.0,
        help="deadline of one CRI call (default 2s)",
    )
    agent.add_argument(
        "--stats-cache-duration",
        type=parse_duration,
        default=1.0,
        help="serve a collection again for this long instead of asking the runtime (default 1s)",
    )
    agent.add_argument(
        "--node-stats",
        choices=["host", "none"],
        default="host",
        help="node totals from the host's /proc and cgroup root, or none (default host)",
    )
    agent.add_argument(
        "--host-proc",
        type=Path,
        default=Path("/proc"),
        help="the host's /proc, for its meminfo (swap) and, without a cgroup root, its stat "
        "(default /proc; in a pod mount the host's /proc read-only, e.g. at /host/proc)",
    )
    agent.add_argument(
        "--host-cgroup-root",
        type=Path,
        default=Path("/sys/fs/cgroup"),
        help="the host's cgroup root; mount it from the host in a pod (default /sys/fs/cgroup)",
    )
    agent.add_argument(
        "--secure-port",
        type=int,
        default=DEFAULT_PORT,
        help=f"HTTPS port (0: any free port; default {DEFAULT_PORT})",
    )
    agent.add_argument(
        "--bind-address",
        default="0.0.0.0",  # noqa: S104 - an agent is scraped from other nodes
        help="address to listen on (default 0.0.0.0)",
    )
    agent.add_argument(
        "--cert-dir",
        type=Path,
        default=Path("/tmp/node-agent-certs"),  # noqa: S108
        help="where the self-signed certificate is kept when no certificate is given",
    )
    agent.add_argument("--tls-cert-file", type=Path, help="serving certificate (PEM)")
    agent.add_argument("--tls-private-key-file", type=Path, help="key of --tls-cert-file")
    agent.add_argument(
        "-v", "--v", dest="verbosity", type=int, default=0, help="log verbosity (klog style)"
    )
    return agent


async def _serve(args: argparse.Namespace, context: ReloadingServerContext) -> None:
    async with RuntimeClient(args.cri_endpoint, timeout=args.cri_timeout) as runtime:
        node = (
            HostReader(proc_root=args.host_proc, cgroup_root=args.host_cgroup_root)
            if args.node_stats == "host"
            else None
        )
        collector = Collector(runtime.pods, node, max_age=args.stats_cache_duration)
        if node is not None:
            logger.info("node totals from %s", node.source)
        try:
            version = await runtime.version()
        except ScrapeFailure as err:
            logger.warning(
                "the container runtime does not answer on %s yet (%s): serving anyway, "
                "/healthz fails until it answers",
                args.cri_endpoint,
                err.message,
            )
        else:
            logger.info(
                "container runtime %s %s (CRI %s) on %s",
                version.runtime_name,
                version.runtime_version,
                version.runtime_api_version,
                args.cri_endpoint,
            )
        host = f"[{args.bind_address}]" if ":" in args.bind_address else args.bind_address
        config = uvicorn.Config(
            AgentApp(collector, runtime),
            host=args.bind_address,
            port=args.secure_port,
            ssl_context_factory=lambda _config, _default: context.listening,
            # The agent listens on every node, unauthenticated: the same slowloris and
            # handshake guards as the API server.
            http=with_header_read_timeout(TlsHttpToolsProtocol, HEADER_READ_TIMEOUT),
            ws="none",
            lifespan="on",
            proxy_headers=False,
            server_header=False,
            access_log=False,
            log_config=None,
            timeout_graceful_shutdown=5,
        )
        banner = (
            f"custom-metrics-server v{__version__} node-agent serving "
            f"https://{host}:{{port}}/metrics/resource from {args.cri_endpoint}"
        )
        # SIGTERM (a DaemonSet rollout) drains and exits 0; a second signal exits at once.
        await TlsServer(config, lambda port: print(banner.format(port=port), flush=True)).serve()


_SOCKET_FIX = (
    "mount the runtime's socket there (a hostPath volume of type Socket) and point "
    "--cri-endpoint at it: containerd unix:///run/containerd/containerd.sock, CRI-O "
    "unix:///var/run/crio/crio.sock"
)


def check_cri_socket(endpoint: str) -> None:
    """Refuse, with one line and its fix, an endpoint the agent can never use: not a unix
    socket URL, no such path, not a socket, or a socket it may not open."""
    try:
        target = grpc_target(endpoint)
    except ValueError as err:
        raise StartupError(
            f"cannot use --cri-endpoint {endpoint}",
            status=str(err),
            fix="give the runtime's unix socket, e.g. unix:///run/containerd/containerd.sock",
            exit_code=CONFIGURATION,
        ) from err
    path = target.removeprefix("unix://")
    what = f"cannot use the CRI socket {path} (--cri-endpoint)"
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        raise StartupError(
            what,
            status=(err.strerror or str(err)).lower(),
            fix=_SOCKET_FIX,
            exit_code=CONFIGURATION,
        ) from err
    if not stat.S_ISSOCK(mode):
        raise StartupError(what, status="not a socket", fix=_SOCKET_FIX, exit_code=CONFIGURATION)
    if not os.access(path, os.R_OK | os.W_OK):
        raise StartupError(
            what,
            status="permission denied",
            fix="run as the socket's owner (containerd's is root:root 0660: runAsUser 0), or "
            "with its group in supplementalGroups (containerd [grpc] gid, CRI-O listen_gid)",
            exit_code=CONFIGURATION,
        )


def _certificate(args: argparse.Namespace) -> ReloadingServerContext:
    if bool(args.tls_cert_file) != bool(args.tls_private_key_file):
        raise StartupError(
            "--tls-cert-file and --tls-private-key-file go together",
            fix="give both, or neither (a self-signed certificate in --cert-dir)",
            exit_code=CONFIGURATION,
        )
    try:
        if args.tls_cert_file:
            cert_file, key_file = args.tls_cert_file, args.tls_private_key_file
        else:
            hosts = ["localhost", "127.0.0.1", socket.gethostname()]
            serving = ensure_serving_certificate(args.cert_dir, hosts)
            cert_file, key_file = serving.cert_file, serving.key_file
        return ReloadingServerContext(cert_file, key_file)
    except (OSError, ssl.SSLError, ValueError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        where = args.tls_cert_file or args.cert_dir
        raise StartupError(
            f"cannot load the serving certificate ({where})",
            status=reason,
            fix="give readable --tls-cert-file and --tls-private-key-file of one pair, or a "
            "writable --cert-dir",
            exit_code=CONFIGURATION,
        ) from err


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; a start-up failure is one line (exit 2, or 3 for a port
    that cannot be bound)."""
    configure_logging(args.verbosity)
    try:
        context = _certificate(args)
        check_cri_socket(args.cri_endpoint)
        asyncio.run(_serve(args, context))
    except StartupError as err:
        return report_startup_failure(err, logger)
    return 0
