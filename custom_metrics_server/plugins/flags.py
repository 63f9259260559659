"""The backend flags of `serve`, and the backends file they mean.

`serve` runs the backends of a backends file: `--backends-config FILE`, or the file the flags
describe (`backends_from_flags`): `--demo` is one entry `simulated` (type `demo`) or, with
`--demo-file`, `memory` (type `fixture`); otherwise `kubernetes` (type `kubernetes`, from the
`--kubeconfig`, `--kubelet-*`, ... flags); `--prometheus-url`/`--config` add `prometheus`.

With `--backends-config`, the backend flags are an error (naming them): two descriptions of the
same backends could only disagree. What stays are the server's own flags: serving and security,
`--backend-timeout` (the default deadline), `--enable-metrics-api` and
`--resource-metrics-source` (what the server serves beside the metric APIs), and `--demo`, which
then only means demo serving (loopback, no delegated authentication, a kubeconfig written) of
the file's backends.

`server_features` picks, from what was loaded, what the server serves beside the metric APIs.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any, Final

from custom_metrics_server.metrics_api.responses import ResourceMetricsApi
from custom_metrics_server.plugins.config import (
    BackendsConfigError,
    BackendsFile,
    read_backends_file,
    validate_backends,
)
from custom_metrics_server.plugins.loader import Loaded
from custom_metrics_server.prometheus.options import add_prometheus_flags
from custom_metrics_server.prometheus.options import enabled as prometheus_enabled
from custom_metrics_server.prometheus.rules import ConfigError
from custom_metrics_server.scraping.kubelet_scraper import DEFAULT_CONCURRENCY
from custom_metrics_server.security.options import duration as parse_duration

__all__ = [
    "BACKEND_FLAGS",
    "add_backend_flags",
    "backends_from_flags",
    "server_features",
]

logger = logging.getLogger(__name__)

#: Where `add_backend_flags` records (option, dest, default) of every backend flag.
BACKEND_FLAGS: Final = "_backend_flags"
#: Flags of the backend groups that stay meaningful with --backends-config.
_SERVER_FLAGS: Final = frozenset(
    {"demo", "write_kubeconfig", "enable_metrics_api", "resource_metrics_source"}
)


def add_backend_flags(serve: argparse.ArgumentParser) -> None:
    """The backends file, Kubernetes, Prometheus and demo flags of `serve`."""
    before = len(serve._actions)
    backends = serve.add_argument_group("backends (docs/backends.md)")
    backends.add_argument(
        "--backends-config",
        type=Path,
        default=None,
        help="YAML file of the backends to run, their settings and routes (replaces the "
        "backend flags; reloaded when it changes)",
    )
    backends.add_argument(
        "--backends-config-reload-interval",
        type=parse_duration,
        default=5.0,
        help="how often --backends-config is checked for changes (0: never; default 5s)",
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
        "--node-agent-address",
        default=None,
        metavar="TEMPLATE",
        help="agents that run on the hosts, not as pods: each node's agent is at this host "
        "name or IP address, with {node} (the node's name) and {internal_ip} (its InternalIP) "
        "filled in, e.g. '{internal_ip}'; default: find the agent pods "
        "(--node-agent-namespace, --node-agent-selector)",
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
        help="also serve metrics.k8s.io v1 and v1beta1 (kubectl top) from the kubelet usage "
        "this server scrapes anyway; needs the resource-metrics component's APIServices "
        "(always on with --demo)",
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
    add_prometheus_flags(serve)
    demo = serve.add_argument_group("demo (embedded simulated cluster)")
    demo.add_argument(
        "--demo",
        action="store_true",
        help="serve the embedded simulated cluster on loopback, without delegated auth "
        "(with --backends-config: the file's backends, served that way)",
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
    added = serve._actions[before:]
    flags = tuple(
        (action.option_strings[0], action.dest, action.default)
        for action in added
        if action.option_strings
        and action.dest not in _SERVER_FLAGS
        and not action.dest.startswith("backends_config")
    )
    serve.set_defaults(**{BACKEND_FLAGS: flags})


def _kubernetes_settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "kubeconfig": args.kubeconfig,
        "kubeletSource": args.kubelet_source,
        "kubeletPort": args.kubelet_port,
        "kubeletCertificateAuthority": args.kubelet_certificate_authority,
        "kubeletInsecureTls": args.kubelet_insecure_tls,
        "usageSource": args.usage_source,
        "nodeAgentNamespace": args.node_agent_namespace,
        "nodeAgentSelector": args.node_agent_selector,
        "nodeAgentPort": args.node_agent_port,
        "nodeAgentAddress": args.node_agent_address,
        "nodeAgentCertificateAuthority": args.node_agent_certificate_authority,
        "nodeAgentInsecureTls": args.node_agent_insecure_tls,
        "metricResolution": args.metric_resolution,
        "kubeletRequestTimeout": args.kubelet_request_timeout,
        "kubeletScrapeConcurrency": args.kubelet_scrape_concurrency,
        "discoveryInterval": args.discovery_interval,
        "leaderElect": args.leader_elect,
        "leaderElectResourceNamespace": args.leader_elect_resource_namespace,
        "leaderElectResourceName": args.leader_elect_resource_name,
    }


def _prometheus_settings(args: argparse.Namespace) -> dict[str, Any]:
    if args.prometheus_auth_config:
        raise ConfigError(
            "--prometheus-auth-config is not supported; use --prometheus-token-file, "
            "--prometheus-ca-file and --prometheus-client-tls-cert-file/-key-file"
        )
    if args.rate_interval is not None:
        logger.warning("--rate-interval is ignored (prometheus-adapter dropped it too)")
    if args.prometheus_url and not args.prometheus_url.startswith(("http://", "https://")):
        raise ConfigError(
            f"--prometheus-url must be http:// or https://, not {args.prometheus_url!r}"
        )
    settings: dict[str, Any] = {
        "url": args.prometheus_url,
        "config": str(args.config) if args.config is not None else None,
        "metricsRelistInterval": args.metrics_relist_interval,
        "metricsMaxAge": args.metrics_max_age,
        "caFile": args.prometheus_ca_file,
        "tokenFile": args.prometheus_token_file,
        "headers": dict(args.prometheus_header),
        "verb": args.prometheus_verb,
        "clientCertFile": args.prometheus_client_tls_cert_file,
        "clientKeyFile": args.prometheus_client_tls_key_file,
        "authInCluster": args.prometheus_auth_incluster,
        "queryTimeout": args.prometheus_query_timeout,
        "configReloadInterval": args.config_reload_interval,
    }
    if args.resource_metrics_source == "prometheus":
        settings["resourceUsageInterval"] = args.metric_resolution
    return settings


def _given(args: argparse.Namespace) -> list[str]:
    """The backend flags given a value other than their default."""
    return [
        option
        for option, dest, default in getattr(args, BACKEND_FLAGS, ())
        if getattr(args, dest, default) != default
    ]


def backends_from_flags(args: argparse.Namespace) -> tuple[BackendsFile, Path, bytes | None]:
    """The backends file to serve, the directory its relative paths start from, and the
    digest of its bytes (None when the flags describe it). BackendsConfigError / ConfigError
    name the problem."""
    if args.backends_config is not None:
        given = _given(args)
        if given:
            raise BackendsConfigError(
                [
                    f"--backends-config describes the backends: drop {', '.join(given)} (their "
                    "settings go in the file; docs/backends.md)"
                ]
            )
        path: Path = args.backends_config
        config, digest = read_backends_file(path)
        return config, path.resolve().parent, digest
    entries: list[dict[str, Any]] = []
    if args.demo and args.demo_file is not None:
        entries.append(
            {"name": "memory", "type": "fixture", "settings": {"file": str(args.demo_file)}}
        )
    elif args.demo:
        demo = {"seed": args.demo_seed, "pods": args.demo_pods, "interval": args.demo_interval}
        if args.demo_web_pods is not None:
            demo["webPods"] = args.demo_web_pods
        entries.append({"name": "simulated", "type": "demo", "settings": demo})
    else:
        entries.append(
            {"name": "kubernetes", "type": "kubernetes", "settings": _kubernetes_settings(args)}
        )
    if prometheus_enabled(args):
        entries.append(
            {"name": "prometheus", "type": "prometheus", "settings": _prometheus_settings(args)}
        )
    elif args.resource_metrics_source == "prometheus":
        raise ConfigError("--resource-metrics-source=prometheus needs --prometheus-url")
    return validate_backends({"backends": entries}, source="the flags"), Path.cwd(), None


def server_features(args: argparse.Namespace, loaded: Loaded) -> ResourceMetricsApi | None:
    """The Resource Metrics API to serve, per `--enable-metrics-api` (always on with --demo)
    and `--resource-metrics-source`; ConfigError when they ask for what was not loaded."""
    metrics_api = loaded.metrics_api if (args.enable_metrics_api or args.demo) else None
    if args.resource_metrics_source == "prometheus":
        usage = loaded.resource_usage
        if usage is None:
            raise ConfigError(
                "--resource-metrics-source=prometheus needs a prometheus backend with "
                "resourceUsageInterval and resourceRules"
            )
        if metrics_api is None:
            raise ConfigError(
                "--resource-metrics-source=prometheus serves metrics.k8s.io: it needs "
                "--enable-metrics-api with the Kubernetes backend, or --demo"
            )
        metrics_api = ResourceMetricsApi(metrics_api.cluster, usage[1])
    return metrics_api
