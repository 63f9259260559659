"""`custom-metrics-server explain URL`: why a metric request answers what it answers.

Asks the server for the explanation of `URL` (a path of the custom or external metrics API, as
the HPA or `kubectl get --raw` sends it) by adding `explain=1` to its query, through
kube-apiserver as a kubeconfig says (the aggregator forwards the parameter; the request is
authorized exactly as the metric itself), or straight to the server with `--server`. Prints the
explanation as text (or the JSON document with `-o json`).

Exit codes, by the outcome of the plain request:

* 0: it answers values;
* 1: it answers none (404, or an empty list);
* 3: it fails (400, 5xx, ...);
* 4: no explanation was had (unreachable, 401/403, a server without `?explain`);
* 2: bad flags or kubeconfig.
"""

from __future__ import annotations

import argparse
import http.client
import json
import ssl
import sys
from typing import Any, Final
from urllib.parse import urlencode, urlsplit
from urllib.request import getproxies, proxy_bypass

from custom_metrics_server.api.explanation import KIND, render_text
from custom_metrics_server.kube.config import Connection, KubeConfigError, load_connection
from custom_metrics_server.runtime.tls import client_context

__all__ = ["add_parser", "run"]

EXIT_VALUES: Final = 0
EXIT_NO_VALUES: Final = 1
EXIT_USAGE: Final = 2
EXIT_FAILS: Final = 3
EXIT_UNEXPLAINED: Final = 4


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `explain` command's flags (kubectl's names)."""
    parser = commands.add_parser(
        "explain",
        help="explain how the server answers a metric request",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "url",
        help="the request's path and query, e.g. "
        "'/apis/custom.metrics.k8s.io/v1beta2/namespaces/shop/pods/*/http_requests"
        "?labelSelector=app%%3Dweb'",
    )
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"
    )
    parser.add_argument("--context", help="kubeconfig context to use")
    parser.add_argument(
        "--server",
        help="ask this server directly (https://host:port) instead of the kubeconfig's "
        "kube-apiserver; the kubeconfig's credentials are still sent",
    )
    parser.add_argument(
        "--certificate-authority", help="CA file to verify --server (default: the kubeconfig's)"
    )
    parser.add_argument(
        "--insecure-skip-tls-verify",
        action="store_true",
        help="do not verify the server's certificate (never in production)",
    )
    parser.add_argument("--token", help="bearer token (default: the kubeconfig's)")
    parser.add_argument(
        "-o", "--output", choices=("text", "json"), default="text", help="text (default) or json"
    )
    parser.add_argument(
        "--request-timeout", type=float, default=30.0, help="seconds to wait (default 30)"
    )


def explain_url(url: str) -> str:
    """`url`'s path and query with `explain=1` added (a full URL's scheme and host dropped)."""
    parts = urlsplit(url)
    path = parts.path or "/"
    query = parts.query
    query = f"{query}&{urlencode({'explain': '1'})}" if query else "explain=1"
    return f"{path}?{query}"


def outcome_exit(document: dict[str, Any]) -> int:
    """The exit code of an explanation, by its outcome (see the module)."""
    outcome = document.get("outcome", {})
    code = outcome.get("code")
    if code == 200:
        return EXIT_VALUES if outcome.get("items") else EXIT_NO_VALUES
    if code == 404:
        return EXIT_NO_VALUES
    return EXIT_FAILS


def _connection(args: argparse.Namespace) -> Connection | None:
    try:
        return load_connection(args.kubeconfig, context=args.context)
    except KubeConfigError:
        if args.server and not args.kubeconfig:
            return None  # a server without credentials (a demo server)
        raise


def _ssl_context(args: argparse.Namespace, connection: Connection | None) -> ssl.SSLContext:
    if args.server and (args.certificate_authority or args.insecure_skip_tls_verify):
        return client_context(
            args.certificate_authority,
            insecure=args.insecure_skip_tls_verify,
            cert_file=connection.cert_file if connection and connection.key_file else None,
            key_file=connection.key_file if connection else None,
        )
    if connection is not None:
        if args.insecure_skip_tls_verify:
            connection.verify = False
        return connection.ssl_context()
    return ssl.create_default_context()


def _get(
    url: str, headers: dict[str, str], context: ssl.SSLContext, timeout: float
) -> tuple[int, bytes]:
    """One GET of `url` (the command's only call: the standard library's client, verifying
    the URL's host name over https, through an environment proxy as kubectl would: CONNECT
    for https), its status and body."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url}")
    https = parts.scheme == "https"
    host, port, target = parts.hostname, parts.port, f"{parts.path}?{parts.query}"
    proxies = getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    tunnel = None
    if proxy and not proxy_bypass(host):
        via = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if https:
            tunnel = (host, port or 443)
        else:
            target = url  # a plain proxy takes the whole URL
        host, port = via.hostname or "", via.port or 80
    connection: http.client.HTTPConnection = (
        http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
        if https
        else http.client.HTTPConnection(host, port, timeout=timeout)
    )
    if tunnel is not None:
        connection.set_tunnel(*tunnel)
    try:
        connection.request("GET", target, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def run(args: argparse.Namespace) -> int:
    """Ask for the explanation and print it; the exit code says what the request gets."""
    try:
        connection = _connection(args)
    except KubeConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    base = args.server or (connection.host if connection is not None else None)
    if not base:
        print("error: no server: give --server or a kubeconfig", file=sys.stderr)
        return EXIT_USAGE
    headers = {"Accept": "application/json", "User-Agent": "custom-metrics-server-explain"}
    token = args.token or (connection.bearer_token() if connection is not None else None)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    target = base.rstrip("/") + explain_url(args.url)
    try:
        status, body = _get(target, headers, _ssl_context(args, connection), args.request_timeout)
    except (http.client.HTTPException, OSError, ValueError) as err:
        print(f"error: GET {target}: {type(err).__name__}: {err}", file=sys.stderr)
        return EXIT_UNEXPLAINED
    try:
        document = json.loads(body)
    except ValueError:
        document = None
    if not isinstance(document, dict) or document.get("kind") != KIND:
        if isinstance(document, dict) and document.get("kind") == "Status":
            print(
                f"error: the server answered {status} "
                f"{document.get('reason', '')}: {document.get('message', '')}",
                file=sys.stderr,
            )
        else:
            print(
                f"error: the server answered {status} without an explanation "
                "(is it a custom-metrics-server with ?explain support?)",
                file=sys.stderr,
            )
        return EXIT_UNEXPLAINED
    if args.output == "json":
        print(json.dumps(document, indent=2))
    else:
        print(render_text(document), end="")
    return outcome_exit(document)
