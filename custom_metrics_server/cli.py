"""Command line: `custom-metrics-server serve ...` with Kubernetes-style flags.

Parses flags, sets up logging and TLS, builds the app and runs uvicorn (httptools, uvloop,
no access log, no proxy headers: see docs/performance.md). No request logic lives here.

Start-up failures end the process with one line (`runtime.startup`): `serve` turns what its
own steps raise into a `StartupError` (`_startup_error`) and reports it last, exit status 2
for flags and files that cannot work, 3 for a dependency that refused at start-up.
"""

from __future__ import annotations

import argparse
import base64
import functools
import ipaddress
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import uvicorn
import yaml

from custom_metrics_server import __version__
from custom_metrics_server.api.core_api import DemoCoreApi
from custom_metrics_server.backends.memory import load_fixture
from custom_metrics_server.backends.simulated import DemoSettings, SimulatedCluster
from custom_metrics_server.compute.kubernetes import KubernetesBackend, KubernetesSettings
from custom_metrics_server.compute.metrics import (
    ResourceMetricsBackend,
    render_state_exposition,
)
from custom_metrics_server.compute.metrics_api import ResourceMetricsApi
from custom_metrics_server.compute.scraper import DEFAULT_CONCURRENCY
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kube.config import KubeConfigError, load_connection
from custom_metrics_server.node_agent import command as node_agent
from custom_metrics_server.prometheus.options import (
    add_prometheus_flags,
)
from custom_metrics_server.prometheus.options import (
    build_backend as build_prometheus_backend,
)
from custom_metrics_server.prometheus.options import enabled as prometheus_enabled
from custom_metrics_server.prometheus.rules import ConfigError
from custom_metrics_server.runtime.heap import tune_gc
from custom_metrics_server.runtime.logs import configure_logging
from custom_metrics_server.runtime.serving import TLS_HANDSHAKE_TIMEOUT, TlsServer
from custom_metrics_server.runtime.startup import (
    CONFIGURATION,
    StartupError,
    report_startup_failure,
)
from custom_metrics_server.sdk.backend import ClusterView, MetricsBackend
from custom_metrics_server.security.options import (
    add_security_flags,
    build_security,
)
from custom_metrics_server.security.options import duration as parse_duration
from custom_metrics_server.security.tls_peer import HEADER_READ_TIMEOUT, with_header_read_timeout
from custom_metrics_server.server.app import AppSettings, create_app

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
        default=Path("apiserver.local.config/certificates"),
        help="where the self-signed certificate is kept when no certificate is given",
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
    kube = serve.add_argument_group("Kubernetes backend (without --demo)")
    kube.add_argument(
        "--kubeconfig",
        default=None,
        help="kubeconfig of the cluster (default: $KUBECONFIG, ~/.kube/config, in-cluster)",
    )
    kube.add_argument(
        "--kubelet-source",
        choices=["proxy", "direct"],
        default="proxy",
        help="scrape kubelets through the API server's node proxy or directly",
    )
    kube.add_argument(
        "--kubelet-port", type=int, default=10250, help="kubelet port for --kubelet-source=direct"
    )
    kube.add_argument(
        "--kubelet-certificate-authority",
        default=None,
        help="CA of the kubelets' serving certificates (--kubelet-source=direct)",
    )
    kube.add_argument(
        "--kubelet-insecure-tls",
        action="store_true",
        help="do not verify kubelet serving certificates (--kubelet-source=direct; test only)",
    )
    kube.add_argument(
        "--usage-source",
        choices=["kubelet", "node-agent"],
        default="kubelet",
        help="read usage from the kubelets' /metrics/resource or from node agents "
        "(`node-agent` DaemonSet, see docs/node-agent.md)",
    )
    kube.add_argument(
        "--node-agent-namespace",
        default=os.environ.get("POD_NAMESPACE", "custom-metrics"),
        help="namespace of the node agent pods (default $POD_NAMESPACE or custom-metrics)",
    )
    kube.add_argument(
        "--node-agent-selector",
        default="app.kubernetes.io/name=custom-metrics-node-agent",
        help="label selector of the node agent pods",
    )
    kube.add_argument(
        "--node-agent-port", type=int, default=10443, help="HTTPS port of the node agents"
    )
    kube.add_argument(
        "--node-agent-certificate-authority",
        default=None,
        help="CA of the node agents' serving certificates (default: system CAs)",
    )
    kube.add_argument(
        "--node-agent-insecure-tls",
        action="store_true",
        help="do not verify node agent serving certificates (self-signed agents)",
    )
    kube.add_argument(
        "--metric-resolution",
        type=parse_duration,
        default=15.0,
        help="kubelet scrape interval (default 15s)",
    )
    kube.add_argument(
        "--kubelet-request-timeout",
        type=parse_duration,
        default=10.0,
        help="deadline of one kubelet scrape (default 10s)",
    )
    kube.add_argument(
        "--kubelet-scrape-concurrency",
        type=int,
        default=DEFAULT_CONCURRENCY,
        help=f"kubelet scrapes in flight at once, over their own connections (default "
        f"{DEFAULT_CONCURRENCY}); nodes that keep failing take at most a quarter of them",
    )
    kube.add_argument(
        "--discovery-interval",
        type=parse_duration,
        default=600.0,
        help="API discovery refresh (default 10m; unknown resources refresh it at once)",
    )
    kube.add_argument(
        "--enable-metrics-api",
        action="store_true",
        help="also serve metrics.k8s.io/v1beta1 (kubectl top) from the kubelet usage this "
        "server scrapes anyway; needs the resource-metrics overlay's APIService (always on "
        "with --demo)",
    )
    kube.add_argument(
        "--leader-elect",
        action="store_true",
        help="serve /metrics/resources series only while holding a Lease",
    )
    kube.add_argument(
        "--leader-elect-resource-namespace",
        default=os.environ.get("POD_NAMESPACE", "custom-metrics"),
        help="namespace of the Lease (default $POD_NAMESPACE or custom-metrics)",
    )
    kube.add_argument(
        "--leader-elect-resource-name", default="custom-metrics-server", help="name of the Lease"
    )
    add_security_flags(serve)
    add_prometheus_flags(serve)
    demo = serve.add_argument_group("demo (embedded simulated cluster)")
    demo.add_argument(
        "--demo",
        action="store_true",
        help="serve the embedded simulated cluster on loopback, without delegated auth",
    )
    demo.add_argument(
        "--demo-file",
        type=Path,
        default=None,
        help="serve this YAML fixture instead of the simulated cluster (see docs/demo.md)",
    )
    demo.add_argument("--demo-pods", type=int, default=60, help="pods in the simulated cluster")
    demo.add_argument(
        "--demo-web-pods",
        type=int,
        default=None,
        help="replicas of default/web (default: a fifth of the pods)",
    )
    demo.add_argument("--demo-seed", type=int, default=42, help="seed of the generated cluster")
    demo.add_argument(
        "--demo-interval",
        type=parse_duration,
        default=15.0,
        help="how often values move (default 15s)",
    )
    demo.add_argument(
        "--write-kubeconfig",
        type=Path,
        default=None,
        help="where to write a kubeconfig for the demo (default <cert-dir>/kubeconfig)",
    )
    serve.add_argument(
        "-v", "--v", dest="verbosity", type=int, default=0, help="log verbosity (klog style)"
    )
    node_agent.add_parser(commands)
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


@dataclass
class _Served:
    """What `serve` runs: the cluster view, the backends and how to describe them."""

    cluster: ClusterView
    backends: list[MetricsBackend]
    what: str
    exposition: Callable[[], bytes] | None = None
    metrics_api: ResourceMetricsApi | None = None
    demo_core_api: DemoCoreApi | None = None


def _with_prometheus(args: argparse.Namespace, served: _Served) -> _Served:
    """Add the Prometheus backend when its flags are given; it reads the same cluster view.
    With `--resource-metrics-source=prometheus` it also feeds metrics.k8s.io."""
    if not prometheus_enabled(args):
        if args.resource_metrics_source == "prometheus":
            raise ConfigError("--resource-metrics-source=prometheus needs --prometheus-url")
        return served
    backend = build_prometheus_backend(args, served.cluster)
    served.backends.append(backend)
    served.what += " with Prometheus metrics"
    if args.resource_metrics_source == "prometheus":
        if served.metrics_api is None:
            raise ConfigError(
                "--resource-metrics-source=prometheus serves metrics.k8s.io: it needs "
                "--enable-metrics-api with the Kubernetes backend, or --demo"
            )
        served.metrics_api = ResourceMetricsApi(served.metrics_api.cluster, backend.resource_usage)
    return served


def _demo(args: argparse.Namespace) -> _Served:
    if args.demo_file:
        document = yaml.safe_load(args.demo_file.read_text())
        cluster, fixture = load_fixture(document or {}, now=time.time())
        return _Served(cluster, [fixture], f"the fixture {args.demo_file}")
    simulated = SimulatedCluster(
        DemoSettings(
            seed=args.demo_seed,
            pods=args.demo_pods,
            web_pods=args.demo_web_pods,
            interval=args.demo_interval,
        )
    )
    return _Served(
        simulated.cluster,
        [simulated, ResourceMetricsBackend(simulated.cluster, simulated.usage)],
        f"the simulated cluster ({args.demo_pods} pods)",
        functools.partial(render_state_exposition, simulated.cluster),
        ResourceMetricsApi(simulated.cluster, simulated.usage),
        DemoCoreApi({str(gr): objs for gr, objs in simulated.world.objects.items()}),
    )


def _kubernetes(args: argparse.Namespace) -> _Served:
    connection = load_connection(args.kubeconfig)
    backend = KubernetesBackend(
        KubeClient(connection),
        KubernetesSettings(
            kubelet_source=args.kubelet_source,
            kubelet_port=args.kubelet_port,
            kubelet_ca_file=args.kubelet_certificate_authority,
            kubelet_insecure_tls=args.kubelet_insecure_tls,
            scrape_interval=args.metric_resolution,
            scrape_timeout=args.kubelet_request_timeout,
            scrape_concurrency=args.kubelet_scrape_concurrency,
            discovery_interval=args.discovery_interval,
            leader_elect=args.leader_elect,
            lease_namespace=args.leader_elect_resource_namespace,
            lease_name=args.leader_elect_resource_name,
            usage_source=args.usage_source,
            node_agent_namespace=args.node_agent_namespace,
            node_agent_selector=args.node_agent_selector,
            node_agent_port=args.node_agent_port,
            node_agent_ca_file=args.node_agent_certificate_authority,
            node_agent_insecure_tls=args.node_agent_insecure_tls,
        ),
    )
    return _Served(
        backend.state,
        [backend],
        f"the cluster at {connection.host}",
        backend.resource_exposition,
        ResourceMetricsApi(backend.state, backend.usage_store) if args.enable_metrics_api else None,
    )


def _startup_error(err: Exception, args: argparse.Namespace) -> StartupError:
    """What a failure of building the backends means, as one start-up line (exit 2)."""
    if isinstance(err, StartupError):
        return err
    if isinstance(err, ConfigError):
        return StartupError(
            "invalid Prometheus backend configuration",
            status=str(err),
            fix="correct --config (prometheus-adapter's format, docs/prometheus.md) or the "
            "--prometheus-* and --resource-metrics-source flags",
            exit_code=CONFIGURATION,
        )
    if isinstance(err, KubeConfigError):
        given = args.kubeconfig or os.environ.get("KUBECONFIG")
        return StartupError(
            f"cannot load {'--kubeconfig ' + given if given else 'the Kubernetes connection'}",
            status=err.reason,
            fix="give --kubeconfig (or $KUBECONFIG) a valid kubeconfig file"
            if given
            else "run in a pod with a service account token, or give --kubeconfig",
            exit_code=CONFIGURATION,
        )
    reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
    if args.demo:
        return StartupError(
            f"cannot load --demo-file {args.demo_file}" if args.demo_file else "cannot start",
            status=reason,
            fix="correct the file (docs/demo.md)",
            exit_code=CONFIGURATION,
        )
    return StartupError(
        "cannot start the Kubernetes backend",
        status=reason,
        fix="correct its flags (docs/operations.md, Flags)",
        exit_code=CONFIGURATION,
    )


def serve(args: argparse.Namespace) -> int:
    """Run the server until SIGINT/SIGTERM; a start-up failure is one line (exit 2 or 3)."""
    configure_logging(args.verbosity)
    tune_gc()
    try:
        _serve(args)
    except StartupError as err:
        return report_startup_failure(err, logger)
    return 0


def _serve(args: argparse.Namespace) -> None:
    security = build_security(args, demo=args.demo)
    bind = args.bind_address or ("127.0.0.1" if args.demo else "0.0.0.0")  # noqa: S104
    if not security.delegated and not _loopback(bind):
        raise StartupError(
            f"--demo serves without authentication and binds loopback only, not {bind}",
            fix="drop --bind-address, or configure delegated authentication "
            "(--authentication-kubeconfig, docs/security.md)",
            exit_code=CONFIGURATION,
        )
    try:
        served = _with_prometheus(args, _demo(args) if args.demo else _kubernetes(args))
    except (ConfigError, OSError, yaml.YAMLError, ValueError, KubeConfigError) as err:
        raise _startup_error(err, args) from err
    settings = AppSettings(
        backend_timeout=args.backend_timeout,
        max_requests_inflight=args.max_requests_inflight,
        request_timeout=args.request_timeout,
        resource_exposition=served.exposition,
        metrics_api=served.metrics_api,
        demo_core_api=served.demo_core_api,
    )
    app = create_app(
        cluster=served.cluster, backends=served.backends, settings=settings, security=security
    )
    if not security.delegated:
        logger.warning(
            "--demo: delegated authentication and authorization are OFF; "
            "every caller on %s is allowed",
            bind,
        )
    kubeconfig = (args.write_kubeconfig or args.cert_dir / "kubeconfig").resolve()

    def on_bound(port: int) -> None:
        host = f"[{bind}]" if ":" in bind else bind
        url = f"https://{host}:{port}"
        lines = [f"custom-metrics-server v{__version__} serving {served.what} on {url}"]
        if args.demo:
            write_kubeconfig(kubeconfig, server=url, ca_pem=security.serving.ca_pem)
            pods = (
                "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/"
                "http_requests_per_second?labelSelector=app%3Dweb"
            )
            external = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/queue_depth"
            lines += [
                f"kubeconfig written to {kubeconfig}",
                "Try:",
                f"  kubectl --kubeconfig {kubeconfig} get --raw '{pods}'",
                f"  kubectl --kubeconfig {kubeconfig} get --raw '{external}'",
                f"  kubectl --kubeconfig {kubeconfig} top pods -A",
            ]
        print("\n".join(lines) + "\n", flush=True)

    config = uvicorn.Config(
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
    TlsServer(
        config,
        on_bound,
        on_shutdown=app.begin_shutdown,
        shutdown_delay=args.shutdown_delay_duration,
        tls_handshake_timeout=args.tls_handshake_timeout,
        startup_error=lambda: app.startup_error,
    ).run()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `custom-metrics-server` console script."""
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args)
    if args.command == "node-agent":
        return node_agent.run(args)
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
