"""Command line: `custom-metrics-server serve ...` with Kubernetes-style flags.

Parses flags, sets up logging and TLS, loads the backends (`plugins`: the backends file, or the
one the backend flags describe), builds the app and runs uvicorn (httptools, uvloop, no access
log, no proxy headers: see docs/performance.md). No request logic lives here.

A start-up failure is one line, last (`runtime.startup`; `_startup_error`): exit status 2 for
flags and files that cannot work, 3 for a dependency that refused at start-up.
"""

from __future__ import annotations

import argparse
import base64
import ipaddress
import logging
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import uvicorn
import yaml

from custom_metrics_server import __version__, explain_command
from custom_metrics_server.kube.config import KubeConfigError
from custom_metrics_server.node_agent import command as node_agent
from custom_metrics_server.plugins.adapter import PluginError
from custom_metrics_server.plugins.banner import try_lines
from custom_metrics_server.plugins.config import BackendsConfigError
from custom_metrics_server.plugins.flags import (
    add_backend_flags,
    backends_from_flags,
    server_features,
)
from custom_metrics_server.plugins.loader import load_backends
from custom_metrics_server.prometheus.rules import ConfigError
from custom_metrics_server.runtime.asgi import ASGIApp
from custom_metrics_server.runtime.heap import tune_gc
from custom_metrics_server.runtime.limits import raise_open_files_limit
from custom_metrics_server.runtime.logs import configure_logging
from custom_metrics_server.runtime.serving import TLS_HANDSHAKE_TIMEOUT, TlsServer
from custom_metrics_server.runtime.startup import (
    CONFIGURATION,
    StartupError,
    report_startup_failure,
)
from custom_metrics_server.security.options import (
    DEFAULT_CERT_DIR,
    SecurityConfig,
    add_security_flags,
    build_security,
)
from custom_metrics_server.security.options import duration as parse_duration
from custom_metrics_server.security.tls_peer import HEADER_READ_TIMEOUT, with_header_read_timeout
from custom_metrics_server.server.app import AppSettings, BackendsFileSource, create_app
from custom_metrics_server.workers.plan import plan_workers
from custom_metrics_server.workers.supervisor import supervise
from custom_metrics_server.workers.worker import serve_worker

logger = logging.getLogger("custom_metrics_server")


def positive_duration(text: str) -> float:
    """A duration that must be above zero (asyncio refuses a zero handshake timeout)."""
    seconds = parse_duration(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be above zero, not {text!r}")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    """The flag set; names follow the Kubernetes aggregated API servers."""
    parser = argparse.ArgumentParser(prog="custom-metrics-server", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s v{__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the API server")
    serving = serve.add_argument_group("secure serving")
    serving.add_argument(
        "--secure-port", type=int, default=6443, help="HTTPS port (0: any free port)"
    )
    serving.add_argument(
        "--bind-address",
        default=None,
        help="address to listen on (default 0.0.0.0; 127.0.0.1 with --demo)",
    )
    serving.add_argument(
        "--cert-dir",
        type=Path,
        default=DEFAULT_CERT_DIR,
        help="where the self-signed certificate is kept when no certificate is given (default "
        f"{DEFAULT_CERT_DIR}; when it cannot be written, e.g. on a read-only root, the "
        "certificate is kept in memory for the run)",
    )
    serving.add_argument(
        "--tls-cert-file", type=Path, help="serving certificate (PEM, chain allowed)"
    )
    serving.add_argument("--tls-private-key-file", type=Path, help="key of --tls-cert-file")
    serving.add_argument(
        "--backend-timeout",
        type=parse_duration,
        default=10.0,
        help="deadline of one backend call (default 10s)",
    )
    serving.add_argument(
        "--max-requests-inflight",
        type=int,
        default=400,
        help="requests served at once; beyond it 429 with Retry-After: 1 (health probes "
        "exempt; 0: no limit; default 400)",
    )
    serving.add_argument(
        "--request-timeout",
        type=parse_duration,
        default=60.0,
        help="deadline of a whole request, then 504 Timeout (0: none; default 60s)",
    )
    serving.add_argument(
        "--header-read-timeout",
        type=parse_duration,
        default=HEADER_READ_TIMEOUT,
        help="close a connection whose request head is not complete in time (slowloris guard; "
        "0: none; default 32s, Go's ReadHeaderTimeout)",
    )
    serving.add_argument(
        "--tls-handshake-timeout",
        type=positive_duration,
        default=TLS_HANDSHAKE_TIMEOUT,
        help="close a connection whose TLS handshake is not done in time (handshake-only "
        "slowloris guard; default 10s, Go's TLSHandshakeTimeout; must be above zero)",
    )
    serving.add_argument(
        "--shutdown-delay-duration",
        type=parse_duration,
        default=0.0,
        help="after SIGTERM, keep serving this long with /readyz failing, then drain and exit "
        "(default 0s as upstream; see docs/operations.md)",
    )
    serving.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes serving the port (default 1); with N > 1 and every backend "
        "replicable, N workers serve it, each with its own backends; else one process serves "
        "and a warning says why (docs/operations.md, Workers)",
    )
    serving.add_argument(
        "--workers-replicate-watches",
        action="store_true",
        help="--workers N: run kubernetes and pod-metrics in each worker (N x watches and scrapes)",
    )
    # A worker's end of the socket pair to its main process (workers.supervisor).
    serving.add_argument("--worker-link", type=int, help=argparse.SUPPRESS)
    add_security_flags(serve)
    add_backend_flags(serve)
    serve.add_argument("-v", "--v", dest="verbosity", type=int, default=0, help="klog verbosity")
    node_agent.add_parser(commands)
    explain_command.add_parser(commands)
    return parser


def _loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def write_kubeconfig(path: Path, *, server: str, ca_pem: bytes) -> None:
    """A kubeconfig naming this server and trusting its CA; the token is ignored in demo mode."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "custom-metrics-server-demo",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        # kubectl prompts for a password when a user has no credential at all.
        "users": [{"name": "demo", "user": {"token": "demo-mode-has-no-authentication"}}],
        "contexts": [
            {"name": "demo", "context": {"cluster": "custom-metrics-server-demo", "user": "demo"}}
        ],
        "current-context": "demo",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def _demo_kubeconfig(args: argparse.Namespace) -> Path | None:
    """Where `--demo` writes its kubeconfig, checked before serving: a `--write-kubeconfig`
    that cannot be written is a start-up error (one line, exit 2); the default, beside the
    certificate in `--cert-dir`, is skipped with a warning (a read-only root)."""
    path: Path = (args.write_kubeconfig or args.cert_dir / "kubeconfig").resolve()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a"):
            pass
    except OSError as err:
        reason = err.strerror or str(err)
        if args.write_kubeconfig:
            raise StartupError(
                f"cannot write --write-kubeconfig {args.write_kubeconfig}",
                status=reason,
                fix="give --write-kubeconfig a writable path",
                exit_code=CONFIGURATION,
            ) from err
        logger.warning(
            "--demo: cannot write its kubeconfig to %s (%s): give --write-kubeconfig a "
            "writable path (or a writable --cert-dir)",
            path,
            reason,
        )
        return None
    return path


def _startup_error(err: Exception, args: argparse.Namespace) -> StartupError:
    """What a failure of loading the backends means, as one start-up line (exit 2). The
    loader keeps the cause of a single problem, so a kubeconfig or a rules file that cannot be
    read is named as such; several problems are one line, separated by semicolons."""
    cause = err.__cause__ if isinstance(err, PluginError) and err.__cause__ else err
    if isinstance(cause, StartupError):
        return cause
    if isinstance(cause, KubeConfigError):
        given = args.kubeconfig or os.environ.get("KUBECONFIG")
        return StartupError(
            f"cannot load {'--kubeconfig ' + given if given else 'the Kubernetes connection'}",
            status=cause.reason,
            fix="give --kubeconfig (or $KUBECONFIG) a valid kubeconfig file"
            if given
            else "run in a pod with a service account token, or give --kubeconfig",
            exit_code=CONFIGURATION,
        )
    if isinstance(cause, ConfigError) and not args.backends_config:
        return StartupError(
            "invalid Prometheus backend configuration",
            status=str(cause),
            fix="correct --config (prometheus-adapter's format, docs/prometheus.md) or the "
            "--prometheus-* and --resource-metrics-source flags",
            exit_code=CONFIGURATION,
        )
    if args.backends_config:
        fix = f"correct {args.backends_config} (docs/backends.md)"
    elif args.demo:
        fix = "correct --demo-file (docs/demo.md)" if args.demo_file else "correct the flags"
    else:
        fix = "correct the backend flags (docs/operations.md, Flags)"
    return StartupError(
        "cannot start", status="; ".join(str(err).splitlines()), fix=fix, exit_code=CONFIGURATION
    )


def serve(args: argparse.Namespace) -> int:
    """Run the server until SIGINT/SIGTERM; a start-up failure is one line (exit 2 or 3)."""
    configure_logging(args.verbosity)
    tune_gc()
    raise_open_files_limit()
    try:
        _serve(args)
    except StartupError as err:
        return report_startup_failure(err, logger)
    return 0


def _serve(args: argparse.Namespace) -> None:
    worker = args.worker_link is not None
    # Security flags fail before backends, but --workers N's plan says who shares the cert.
    planned = args.workers > 1 and not worker
    if not planned:
        security = build_security(args, demo=args.demo, processes=args.workers if worker else 1)
    try:
        backends, base_dir, digest = backends_from_flags(args)
        loaded = load_backends(backends, base_dir=base_dir, default_timeout=args.backend_timeout)
        metrics_api = server_features(args, loaded)
    except (BackendsConfigError, PluginError, ConfigError) as err:
        raise _startup_error(err, args) from err
    supervising = False
    if planned:
        plan = plan_workers(args.workers, loaded, replicate_watches=args.workers_replicate_watches)
        logger.log(plan.level, "%s", plan.line)
        supervising = plan.workers > 1
        security = build_security(args, demo=args.demo, processes=plan.workers)
    bind = args.bind_address or ("127.0.0.1" if args.demo else "0.0.0.0")  # noqa: S104
    if not security.delegated and not _loopback(bind):
        raise StartupError(
            f"--demo serves without authentication and binds loopback only, not {bind}",
            fix="drop --bind-address, or configure delegated authentication "
            "(--authentication-kubeconfig, docs/security.md)",
            exit_code=CONFIGURATION,
        )
    settings = AppSettings(
        backend_timeout=args.backend_timeout,
        max_requests_inflight=args.max_requests_inflight,
        request_timeout=args.request_timeout,
        resource_exposition=loaded.exposition,
        metrics_api=metrics_api,
        demo_core_api=loaded.demo_core_api if args.demo else None,
    )
    source = BackendsFileSource(
        loaded,
        path=args.backends_config,
        digest=digest,
        reload_interval=args.backends_config_reload_interval,
        replicated=worker,
        replicate_watches=args.workers_replicate_watches,
    )
    if not security.delegated and not worker:
        logger.warning(
            "--demo: delegated authentication and authorization are OFF; "
            "every caller on %s is allowed",
            bind,
        )
    kubeconfig = _demo_kubeconfig(args) if args.demo and not worker else None

    def on_bound(port: int) -> None:
        host = f"[{bind}]" if ":" in bind else bind
        url = f"https://{host}:{port}"
        lines = [f"custom-metrics-server v{__version__} serving {loaded.what()} on {url}"]
        if args.demo and kubeconfig is None:
            lines.append(
                "no kubeconfig written (see the warning above); the serving CA:\n"
                + security.serving.ca_pem.decode().strip()
            )
        elif kubeconfig is not None:
            write_kubeconfig(kubeconfig, server=url, ca_pem=security.serving.ca_pem)
            lines.append(f"kubeconfig written to {kubeconfig}")
            lines += try_lines(
                loaded, kubeconfig=kubeconfig, url=url, cert_file=security.serving.cert_file
            )
        print("\n".join(lines) + "\n", flush=True)

    if supervising:
        supervise(args, bind, on_bound)  # no backend starts in this process
        return
    app = create_app(
        cluster=loaded.cluster,
        backends=loaded.hosts,
        settings=settings,
        security=security,
        source=source,
    )
    config = _uvicorn_config(app, args, security, bind)
    if worker:
        serve_worker(args, config, app)
        return
    TlsServer(
        config,
        on_bound,
        on_shutdown=app.begin_shutdown,
        shutdown_delay=args.shutdown_delay_duration,
        tls_handshake_timeout=args.tls_handshake_timeout,
        startup_error=lambda: app.startup_error,
    ).run()


def _uvicorn_config(
    app: ASGIApp, args: argparse.Namespace, security: SecurityConfig, bind: str
) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=bind,
        port=args.secure_port,
        ssl_context_factory=security.ssl_context_factory,
        http=with_header_read_timeout(security.protocol_class, args.header_read_timeout),
        ws="none",
        loop="uvloop",
        lifespan="on",
        proxy_headers=False,
        server_header=False,
        access_log=False,
        log_config=None,
        # In-flight requests drain for at most the request deadline (upstream's bound too).
        timeout_graceful_shutdown=math.ceil(args.request_timeout) or None,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `custom-metrics-server` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    if args.command == "serve":
        return serve(args)
    if args.command == "node-agent":
        return node_agent.run(args)
    if args.command == "explain":
        return explain_command.run(args)
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
