"""Command-line flags of the Prometheus backend, named as prometheus-adapter names them, so a
prometheus-adapter Deployment's `args:` work with only the image changed (docs/prometheus.md
lists each flag and what differs).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Final

from custom_metrics_server.machinery.durations import parse_prometheus_duration
from custom_metrics_server.prometheus.backend import PrometheusBackend, PrometheusSettings
from custom_metrics_server.prometheus.rules import DEFAULT_SERVER, ConfigError, ServerConfig
from custom_metrics_server.sdk.backend import ClusterView

logger = logging.getLogger(__name__)

IN_CLUSTER_TOKEN: Final = "/var/run/secrets/kubernetes.io/serviceaccount/token"  # noqa: S105 - a path
IN_CLUSTER_CA: Final = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"


def _duration(text: str) -> float:
    try:
        return parse_prometheus_duration(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _header(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected Key=Value, not {text!r}")
    return key.strip(), value


def add_prometheus_flags(parser: argparse.ArgumentParser) -> None:
    """prometheus-adapter's flags (and the handful of ours) on the `serve` command."""
    group = parser.add_argument_group("Prometheus backend (prometheus-adapter compatible)")
    group.add_argument(
        "--prometheus-url",
        default=None,
        help="URL of the default Prometheus-compatible server (enables the backend)",
    )
    group.add_argument(
        "--config",
        type=Path,
        default=None,
        help="prometheus-adapter rules file (rules, externalRules, resourceRules; reloaded "
        "when it changes)",
    )
    group.add_argument(
        "--metrics-relist-interval",
        type=_duration,
        default=60.0,
        help="how often series are listed from Prometheus (default 1m)",
    )
    group.add_argument(
        "--metrics-max-age",
        type=_duration,
        default=None,
        help="how far back a listing looks for series (default: the relist interval)",
    )
    group.add_argument("--prometheus-ca-file", default=None, help="CA of Prometheus' certificate")
    group.add_argument(
        "--prometheus-token-file", default=None, help="bearer token file (re-read when it changes)"
    )
    group.add_argument(
        "--prometheus-header",
        type=_header,
        action="append",
        default=[],
        help="Key=Value header on every request to Prometheus (repeatable; e.g. a tenant)",
    )
    group.add_argument(
        "--prometheus-verb",
        choices=("GET", "POST"),
        default="GET",
        help="HTTP method of queries (long ones are POSTed anyway)",
    )
    group.add_argument("--prometheus-client-tls-cert-file", default=None)
    group.add_argument("--prometheus-client-tls-key-file", default=None)
    group.add_argument(
        "--prometheus-auth-incluster",
        action="store_true",
        help="authenticate to Prometheus with this pod's service account token and CA",
    )
    group.add_argument(
        "--prometheus-auth-config",
        default=None,
        help="(prometheus-adapter) kubeconfig-style auth file: not supported, refused",
    )
    group.add_argument(
        "--prometheus-query-timeout",
        type=_duration,
        default=10.0,
        help="deadline of one Prometheus call, retries included by the backend deadline",
    )
    group.add_argument(
        "--config-reload-interval",
        type=_duration,
        default=5.0,
        help="how often --config is checked for changes (0: never)",
    )
    group.add_argument(
        "--resource-metrics-source",
        choices=("kubelet", "prometheus"),
        default="kubelet",
        help="where metrics.k8s.io usage comes from: the kubelet scrape, or the config's "
        "resourceRules (refreshed every --metric-resolution)",
    )
    # Accepted so prometheus-adapter argument lists keep working; they have no effect here.
    group.add_argument("--rate-interval", default=None, help=argparse.SUPPRESS)
    group.add_argument("--logtostderr", default=None, help=argparse.SUPPRESS)
    group.add_argument("--disable-http2", default=None, help=argparse.SUPPRESS)
    # The serving context is always TLS 1.2+ with AEAD suites (tls.py); these are accepted so
    # prometheus-adapter's manifests keep working, and cannot widen that set.
    group.add_argument("--tls-cipher-suites", default=None, help=argparse.SUPPRESS)
    group.add_argument("--tls-min-version", default=None, help=argparse.SUPPRESS)


def enabled(args: argparse.Namespace) -> bool:
    """Whether the flags ask for the Prometheus backend."""
    return bool(args.prometheus_url or args.config)


def build_backend(args: argparse.Namespace, cluster: ClusterView) -> PrometheusBackend:
    """The backend the flags describe, with its configuration loaded (ConfigError if bad)."""
    if args.prometheus_auth_config:
        raise ConfigError(
            "--prometheus-auth-config is not supported; use --prometheus-token-file, "
            "--prometheus-ca-file and --prometheus-client-tls-cert-file/-key-file"
        )
    if args.rate_interval is not None:
        logger.warning("--rate-interval is ignored (prometheus-adapter dropped it too)")
    token_file = args.prometheus_token_file
    ca_file = args.prometheus_ca_file
    if args.prometheus_auth_incluster:
        token_file = token_file or IN_CLUSTER_TOKEN
        ca_file = ca_file or IN_CLUSTER_CA
    default = None
    if args.prometheus_url:
        if not args.prometheus_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"--prometheus-url must be http:// or https://, not {args.prometheus_url!r}"
            )
        default = ServerConfig(
            name=DEFAULT_SERVER,
            url=args.prometheus_url,
            ca_file=ca_file,
            token_file=token_file,
            headers=tuple(args.prometheus_header),
            client_cert_file=args.prometheus_client_tls_cert_file,
            client_key_file=args.prometheus_client_tls_key_file,
        )
    backend = PrometheusBackend(
        cluster,
        PrometheusSettings(
            config_path=args.config,
            default_server=default,
            relist_interval=args.metrics_relist_interval,
            max_age=args.metrics_max_age,
            query_timeout=args.prometheus_query_timeout,
            verb=args.prometheus_verb,
            reload_interval=args.config_reload_interval,
            resource_usage_interval=(
                args.metric_resolution if args.resource_metrics_source == "prometheus" else 0.0
            ),
        ),
    )
    backend.load_config()
    if args.resource_metrics_source == "prometheus" and backend.config.resource_rules is None:
        raise ConfigError("--resource-metrics-source=prometheus needs resourceRules in --config")
    return backend
