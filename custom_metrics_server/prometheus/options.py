"""Command-line flags of the Prometheus backend, named as prometheus-adapter names them, so a
prometheus-adapter Deployment's `args:` work with only the image changed (docs/prometheus.md
lists each flag and what differs). `plugins.flags` turns them into the backend's settings and
`plugins.builtin.prometheus` makes the backend.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Final

from custom_metrics_server.machinery.durations import parse_prometheus_duration

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
