"""Command-line flags of delegated authentication/authorization, and `build_security`.

Flag names, types and defaults are k8s.io/apiserver's `DelegatingAuthenticationOptions`,
`DelegatingAuthorizationOptions` and `RequestHeaderAuthenticationOptions`. List flags behave
like pflag's string slices (comma-separated; repeating the flag appends; the first use replaces
the default); durations are Go durations (`10s`, `1m30s`) or seconds; booleans accept
`--flag`, `--flag=true|false`.

How `cli.py` wires it (the CLI owns the parser, the backend and uvicorn):

    serve = commands.add_parser("serve", ...)
    add_security_flags(serve)                         # after the serving flags
    ...
    security = build_security(args, demo=args.demo)   # raises SecurityConfigError: exit 2
    app = create_app(cluster=..., backends=[...], settings=..., security=security)
    config = uvicorn.Config(
        app, ..., http=security.protocol_class, ws="none",
        ssl_context_factory=security.ssl_context_factory,   # no ssl_certfile/keyfile needed
    )

`security.serving` is the serving certificate in use (its `ca_pem` goes into the demo
kubeconfig). `security.delegated` says whether authentication is on; in demo mode without any
of `--authentication-kubeconfig`, `--authorization-kubeconfig`, `--client-ca-file`,
`--requestheader-client-ca-file` everybody is `system:anonymous` and allowed. The app's
lifespan enters `security.lifespan()`: start-up checks that the delegated-auth identities may
create TokenReviews and SubjectAccessReviews (one SelfSubjectAccessReview each: a wrong
kubeconfig, refused credentials or a missing `system:auth-delegator` binding fail start-up
with one line, `runtime.startup`), reads the ConfigMap once (and fails start-up as upstream
does when that is forbidden), then follows it until shutdown.

It is one piece on purpose, as k8s.io/apiserver's options are (`AddFlags` beside `ApplyTo`):
each flag's name, default and meaning are read in `build_security`, so they change together.

Must not: parse `sys.argv` or start servers itself.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kube.startup import require_allowed
from custom_metrics_server.machinery.durations import go_duration_seconds
from custom_metrics_server.runtime.metric_vectors import CounterVec, HistogramVec
from custom_metrics_server.runtime.startup import CONFIGURATION, StartupError
from custom_metrics_server.runtime.tasks import BackgroundTasks
from custom_metrics_server.runtime.tls import (
    ReloadingServerContext,
    ServingCertificate,
    ensure_serving_certificate,
    in_memory_serving_certificate,
    trust_anchor,
)
from custom_metrics_server.security.authn import Authenticator, TokenAuthenticator
from custom_metrics_server.security.authz import DEFAULT_ALWAYS_ALLOW_PATHS, Authorizer
from custom_metrics_server.security.certs import CertificateError
from custom_metrics_server.security.extension_config import ExtensionConfigFollower
from custom_metrics_server.security.gate import AllowAllGate, DelegatingGate, Gate
from custom_metrics_server.security.tls_peer import TlsH11Protocol, TlsHttpToolsProtocol
from custom_metrics_server.security.trust import (
    STANDARD_EXTRA_PREFIXES,
    STANDARD_GROUP_HEADERS,
    STANDARD_USERNAME_HEADERS,
    TrustConfigError,
    TrustStore,
    request_header_settings,
)
from custom_metrics_server.security.webhook import Backoff, ReviewMetrics

logger = logging.getLogger(__name__)

#: SANs of a generated serving certificate: loopback plus the Service names of manifests/.
DEFAULT_SERVING_HOSTS = (
    "localhost",
    "127.0.0.1",
    "::1",
    "custom-metrics-server",
    "custom-metrics-server.custom-metrics",
    "custom-metrics-server.custom-metrics.svc",
    "custom-metrics-server.custom-metrics.svc.cluster.local",
)
DEMO_SERVING_HOSTS = ("localhost", "127.0.0.1", "::1")
#: `--cert-dir`: relative, as the Go servers' (the image's WORKDIR is its server's own).
DEFAULT_CERT_DIR = Path("apiserver.local.config/certificates")


#: The ClusterRoleBinding that lets the server create TokenReviews and SubjectAccessReviews.
AUTH_DELEGATOR_FIX = (
    "bind the ClusterRole system:auth-delegator to the identity of {source} "
    "(manifests/base/cluster-role-binding-auth-delegator.yaml)"
)


class SecurityConfigError(StartupError):
    """The flags do not describe a usable configuration (the CLI exits with status 2)."""

    def __init__(self, what: str, *, status: str = "", fix: str = "") -> None:
        super().__init__(what, status=status, fix=fix, exit_code=CONFIGURATION)


def _os_reason(err: BaseException) -> str:
    """`No such file or directory` rather than `[Errno 2] No such file or directory: '/x'`."""
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return " ".join(str(err).split()) or type(err).__name__


# --- flag types -------------------------------------------------------------------------------


def duration(text: str) -> float:
    """A Go duration (`10s`, `1m30s`, `500ms`) or plain seconds, as seconds; not negative."""
    try:
        seconds: float | None = float(text)
    except ValueError:
        seconds = go_duration_seconds(text)
    if seconds is None or not 0 <= seconds < math.inf:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (examples: 10s, 1m30s)")
    return seconds


def boolean(text: str) -> bool:
    """pflag's boolean values."""
    lowered = text.lower()
    if lowered in {"1", "t", "true"}:
        return True
    if lowered in {"0", "f", "false"}:
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r}")


class StringSlice(argparse.Action):
    """pflag `StringSlice`: comma-separated values; the first use replaces the default."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        text = values if isinstance(values, str) else ""
        given = [] if text == "" else text.split(",")
        seen: set[str] = getattr(namespace, "_string_slices_seen", set())
        current = list(getattr(namespace, self.dest) or []) if self.dest in seen else []
        seen.add(self.dest)
        namespace._string_slices_seen = seen  # argparse keeps no per-parse state of its own
        setattr(namespace, self.dest, current + given)


def add_security_flags(parser: argparse.ArgumentParser) -> None:
    """Add the delegated authentication and authorization flags (upstream names/defaults)."""
    authn = parser.add_argument_group("delegated authentication")
    authn.add_argument(
        "--authentication-kubeconfig",
        type=Path,
        default=None,
        help="kubeconfig file pointing at the 'core' kubernetes server with enough rights to "
        "create tokenreviews.authentication.k8s.io (default: in-cluster)",
    )
    authn.add_argument(
        "--authentication-token-webhook-cache-ttl",
        type=duration,
        default=10.0,
        help="the duration to cache responses from the webhook token authenticator (10s)",
    )
    authn.add_argument(
        "--authentication-skip-lookup",
        type=boolean,
        nargs="?",
        const=True,
        default=False,
        help="if false, the authentication-kubeconfig is used to look up missing "
        "authentication configuration from the cluster",
    )
    authn.add_argument(
        "--authentication-tolerate-lookup-failure",
        type=boolean,
        nargs="?",
        const=True,
        default=False,
        help="if true, failures to look up missing authentication configuration from the "
        "cluster are not fatal (this can treat all requests as anonymous)",
    )
    authn.add_argument(
        "--anonymous-auth",
        type=boolean,
        nargs="?",
        const=True,
        default=True,
        help="enables anonymous requests (requests no authenticator rejected and none "
        "authenticated are system:anonymous) (default true)",
    )
    authn.add_argument(
        "--client-ca-file",
        type=Path,
        default=None,
        help="if set, any request presenting a client certificate signed by one of the "
        "authorities in the client-ca-file is authenticated with an identity corresponding to "
        "the CommonName of the client certificate",
    )
    authn.add_argument(
        "--requestheader-client-ca-file",
        type=Path,
        default=None,
        help="root certificate bundle to use to verify client certificates on incoming "
        "requests before trusting usernames in headers specified by "
        "--requestheader-username-headers. WARNING: generally do not depend on authorization "
        "being already done for incoming requests",
    )
    for name, default, text in (
        (
            "--requestheader-allowed-names",
            [],
            "list of client certificate common names to allow to provide usernames in headers "
            "specified by --requestheader-username-headers. If empty, any client certificate "
            "validated by the authorities in --requestheader-client-ca-file is allowed",
        ),
        (
            "--requestheader-username-headers",
            list(STANDARD_USERNAME_HEADERS),
            "list of request headers to inspect for usernames. X-Remote-User is common",
        ),
        (
            "--requestheader-uid-headers",
            [],
            "list of request headers to inspect for UIDs. X-Remote-Uid is suggested",
        ),
        (
            "--requestheader-group-headers",
            list(STANDARD_GROUP_HEADERS),
            "list of request headers to inspect for groups. X-Remote-Group is suggested",
        ),
        (
            "--requestheader-extra-headers-prefix",
            list(STANDARD_EXTRA_PREFIXES),
            "list of request header prefixes to inspect. X-Remote-Extra- is suggested",
        ),
    ):
        authn.add_argument(name, action=StringSlice, default=default, metavar="STRINGS", help=text)
    authz = parser.add_argument_group("delegated authorization")
    authz.add_argument(
        "--authorization-kubeconfig",
        type=Path,
        default=None,
        help="kubeconfig file pointing at the 'core' kubernetes server with enough rights to "
        "create subjectaccessreviews.authorization.k8s.io (default: in-cluster)",
    )
    authz.add_argument(
        "--authorization-webhook-cache-authorized-ttl",
        type=duration,
        default=10.0,
        help="the duration to cache 'authorized' responses from the webhook authorizer (10s)",
    )
    authz.add_argument(
        "--authorization-webhook-cache-unauthorized-ttl",
        type=duration,
        default=10.0,
        help="the duration to cache 'unauthorized' responses from the webhook authorizer (10s)",
    )
    authz.add_argument(
        "--authorization-always-allow-paths",
        action=StringSlice,
        default=list(DEFAULT_ALWAYS_ALLOW_PATHS),
        metavar="STRINGS",
        help="a list of HTTP paths to skip during authorization, i.e. these are authorized "
        "without contacting the 'core' kubernetes server (default /healthz,/readyz,/livez)",
    )


# --- the configuration ------------------------------------------------------------------------


@dataclass
class SecurityConfig:
    """Everything `create_app` and the uvicorn runner need from this package."""

    gate: Gate
    serving: ServingCertificate
    context: ReloadingServerContext
    delegated: bool
    protocol_class: type[Any] = TlsHttpToolsProtocol
    h11_protocol_class: type[Any] = TlsH11Protocol
    trust: TrustStore | None = None
    startup: list[Callable[[], Any]] = field(default_factory=list)
    background: list[Callable[[], Any]] = field(default_factory=list)
    clients: list[KubeClient] = field(default_factory=list)
    #: The webhooks' call metrics, for the server's registry.
    review_metrics: list[ReviewMetrics] = field(default_factory=list)

    def collectors(self) -> Iterator[CounterVec | HistogramVec]:
        """What the server's registry exposes of this configuration: the webhooks' calls."""
        for metrics in self.review_metrics:
            yield from metrics.collectors()

    def ssl_context_factory(
        self, _config: object, _default: Callable[[], ssl.SSLContext]
    ) -> ssl.SSLContext:
        """uvicorn `ssl_context_factory`: the listening context that reloads certificates."""
        return self.context.listening

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Start-up reads (may raise), then background followers until shutdown."""
        tasks = BackgroundTasks()
        try:
            for step in self.startup:
                await step()
            for job in self.background:
                tasks.start(job(), name=f"security-{getattr(job, '__name__', 'job')}")
            yield
        finally:
            await tasks.stop()
            for client in self.clients:
                await client.aclose()


def _must_read(flag: str, path: Path | str, *, fix: str) -> None:
    """A file a flag names must be readable now: one start-up line (exit 2) if not."""
    try:
        Path(path).read_bytes()
    except OSError as err:
        raise SecurityConfigError(
            f"cannot read {flag} {path}", status=_os_reason(err), fix=fix
        ) from err


_CERT_FIX = (
    "mount the serving certificate Secret at that path (the Deployment's serving-cert volume) "
    "or correct the flag"
)


def _serving(args: argparse.Namespace, *, demo: bool, processes: int = 1) -> ServingCertificate:
    cert_file = getattr(args, "tls_cert_file", None)
    key_file = getattr(args, "tls_private_key_file", None)
    if bool(cert_file) != bool(key_file):
        raise SecurityConfigError(
            "--tls-cert-file and --tls-private-key-file go together",
            fix="give both, or neither (a self-signed certificate in --cert-dir)",
        )
    if cert_file and key_file:
        _must_read("--tls-cert-file", cert_file, fix=_CERT_FIX)
        _must_read("--tls-private-key-file", key_file, fix=_CERT_FIX)
        try:
            anchor = trust_anchor(Path(cert_file))
        except ValueError as err:
            raise SecurityConfigError(
                f"cannot read --tls-cert-file {cert_file}",
                status=f"no PEM certificate in it ({_os_reason(err)})",
                fix=_CERT_FIX,
            ) from err
        return ServingCertificate(Path(cert_file), Path(key_file), anchor)
    cert_dir = Path(getattr(args, "cert_dir", DEFAULT_CERT_DIR))
    hosts = DEMO_SERVING_HOSTS if demo else DEFAULT_SERVING_HOSTS
    try:
        return ensure_serving_certificate(cert_dir, list(hosts))
    except (OSError, ValueError) as err:
        # The default --cert-dir (relative) on a read-only root: a certificate of this run kept
        # in memory, as `serve --demo` in the image needs. Not for a --cert-dir the user chose,
        # nor when worker processes must share one pair.
        if isinstance(err, OSError) and cert_dir == DEFAULT_CERT_DIR and processes <= 1:
            with contextlib.suppress(OSError):
                serving = in_memory_serving_certificate(list(hosts))
                logger.warning(
                    "--cert-dir %s cannot be written (%s): serving a self-signed certificate "
                    "kept in memory, new at every start; give a writable --cert-dir to keep it",
                    cert_dir,
                    _os_reason(err),
                )
                return serving
        raise SecurityConfigError(
            f"cannot keep a self-signed serving certificate in --cert-dir {cert_dir}",
            status=_os_reason(err),
            fix="give --tls-cert-file and --tls-private-key-file, or a writable --cert-dir "
            "(an emptyDir volume when the root filesystem is read-only)",
        ) from err


def _context(
    serving: ServingCertificate, client_trust: Callable[[], tuple[int, bytes]] | None = None
) -> ReloadingServerContext:
    """The reloading TLS context; a certificate and key that do not load are a start-up error."""
    try:
        return ReloadingServerContext(
            serving.cert_file, serving.key_file, client_trust=client_trust
        )
    except (OSError, ssl.SSLError, ValueError) as err:
        raise SecurityConfigError(
            f"cannot load the serving certificate {serving.cert_file} with the key "
            f"{serving.key_file}",
            status=_os_reason(err),
            fix="the key must be the certificate's own, unencrypted, in PEM (tls.crt and "
            "tls.key of one kubernetes.io/tls Secret)",
        ) from err


def _client(path: Path | None, *, what: str, optional: bool) -> KubeClient | None:
    """A client from an explicit kubeconfig, else in-cluster; None if optional and neither."""
    if path is None and "KUBERNETES_SERVICE_HOST" not in os.environ:
        if optional:
            logger.warning("no --%s-kubeconfig and not running in a cluster", what)
            return None
        raise SecurityConfigError(
            f"--{what}-kubeconfig is required outside a cluster",
            status="no in-cluster configuration (KUBERNETES_SERVICE_HOST is not set)",
            fix=f"pass --{what}-kubeconfig, or run in a pod with a service account token",
        )
    # kube.config (the `kubernetes` package's loaders, ~20 MB) is imported where a kubeconfig is
    # read, only when delegated authentication or authorization is configured. Whether that
    # package is loaded before this call depends on what else the process imported
    # (kube.client, for one, imports kube.config).
    from custom_metrics_server.kube.config import KubeConfigError, load_connection  # noqa: PLC0415

    try:
        connection = load_connection(str(path) if path else None)
    except KubeConfigError as err:
        flag = f"--{what}-kubeconfig {path}" if path else f"the in-cluster config (for {what})"
        raise SecurityConfigError(
            f"cannot load {flag}",
            status=err.reason,
            fix=f"give --{what}-kubeconfig a valid kubeconfig file"
            if path
            else "mount the service account token (automountServiceAccountToken: true)",
        ) from err
    return KubeClient(connection, timeout=10.0)


def _delegation_check(
    authn: KubeClient | None, authz: KubeClient | None
) -> Callable[[], Awaitable[None]]:
    """The start-up step asking the API server, through each delegated-auth client, whether
    its identity may create what it will create on every request: TokenReviews
    (authentication) and SubjectAccessReviews (authorization). A wrong server address,
    refused credentials or a missing system:auth-delegator binding fail start-up here, with one
    line, instead of every request later."""

    async def check() -> None:
        if authn is not None:
            await require_allowed(
                authn,
                verb="create",
                group="authentication.k8s.io",
                resource="tokenreviews",
                purpose="delegated authentication",
                fix=AUTH_DELEGATOR_FIX.format(source=authn.connection.source),
            )
        if authz is not None:
            await require_allowed(
                authz,
                verb="create",
                group="authorization.k8s.io",
                resource="subjectaccessreviews",
                purpose="delegated authorization",
                fix=AUTH_DELEGATOR_FIX.format(source=authz.connection.source),
            )

    check.__name__ = "delegation_check"
    return check


def delegated_requested(args: argparse.Namespace) -> bool:
    """Whether any flag asks for delegated authentication or authorization."""
    return any(
        getattr(args, name, None)
        for name in (
            "authentication_kubeconfig",
            "authorization_kubeconfig",
            "client_ca_file",
            "requestheader_client_ca_file",
        )
    )


def build_security(
    args: argparse.Namespace,
    *,
    demo: bool,
    backoff: Backoff | None = None,
    processes: int = 1,
) -> SecurityConfig:
    """The gate, TLS context, protocol and lifespan jobs the flags describe.

    Raises `SecurityConfigError` for unusable flags or files. `backoff` is the review retry
    policy, handed to the authenticator and authorizer like their other dependencies (None:
    upstream's); a caller composing the server itself chooses it. `processes` is how many
    processes serve with one certificate (worker processes): only one may keep it in memory.
    """
    serving = _serving(args, demo=demo, processes=processes)
    if demo and not delegated_requested(args):
        context = _context(serving)
        return SecurityConfig(
            gate=AllowAllGate(), serving=serving, context=context, delegated=False
        )
    trust = TrustStore()
    for flag, path in (
        ("--client-ca-file", args.client_ca_file),
        ("--requestheader-client-ca-file", args.requestheader_client_ca_file),
    ):
        if path:
            _must_read(flag, path, fix="mount the CA bundle at that path or correct the flag")
    try:
        if args.client_ca_file:
            trust.watch_client_ca_file(Path(args.client_ca_file))
        if args.requestheader_client_ca_file:
            settings = request_header_settings(
                (),
                username_headers=args.requestheader_username_headers,
                uid_headers=args.requestheader_uid_headers,
                group_headers=args.requestheader_group_headers,
                extra_prefixes=args.requestheader_extra_headers_prefix,
                allowed_names=args.requestheader_allowed_names,
            )
            trust.watch_requestheader_file(Path(args.requestheader_client_ca_file), settings)
    except (OSError, CertificateError, TrustConfigError) as err:
        raise SecurityConfigError(
            "invalid client or front-proxy CA settings",
            status=_os_reason(err),
            fix="give PEM certificate bundles and valid --requestheader-* values",
        ) from err
    authn_client = _client(args.authentication_kubeconfig, what="authentication", optional=demo)
    if args.authorization_kubeconfig == args.authentication_kubeconfig and authn_client:
        authz_client: KubeClient | None = authn_client
    else:
        authz_client = _client(args.authorization_kubeconfig, what="authorization", optional=demo)
    # One client per kubeconfig: the reviews, the ConfigMap follower and the start-up check.
    clients = [c for c in {id(c): c for c in (authn_client, authz_client)}.values() if c]
    startup: list[Callable[[], Any]] = []
    background: list[Callable[[], Any]] = []
    need_client_ca = not args.client_ca_file
    need_requestheader = not args.requestheader_client_ca_file
    if not args.authentication_skip_lookup and (need_client_ca or need_requestheader):
        if authn_client is None:
            logger.warning(
                "no authentication kubeconfig: the client CA and front-proxy settings are not "
                "looked up in kube-system/extension-apiserver-authentication"
            )
        else:
            follower = ExtensionConfigFollower(
                authn_client,
                trust,
                client_ca=need_client_ca,
                requestheader=need_requestheader,
                tolerate_lookup_failure=args.authentication_tolerate_lookup_failure,
            )
            startup.append(follower.load_once)
            background.append(follower.follow)
    try:
        authorizer = Authorizer(
            authz_client,
            always_allow_paths=args.authorization_always_allow_paths,
            allowed_ttl=args.authorization_webhook_cache_authorized_ttl,
            denied_ttl=args.authorization_webhook_cache_unauthorized_ttl,
            backoff=backoff,
        )
    except ValueError as err:
        raise SecurityConfigError(
            "invalid --authorization-always-allow-paths",
            status=str(err),
            fix="a path may hold * only as its last character (/healthz, /metrics*)",
        ) from err
    tokens = TokenAuthenticator(
        authn_client, ttl=args.authentication_token_webhook_cache_ttl, backoff=backoff
    )
    authenticator = Authenticator(trust, tokens=tokens, anonymous=args.anonymous_auth)
    context = _context(serving, trust.tls_material)
    startup.insert(0, _delegation_check(authn_client, authz_client))
    return SecurityConfig(
        gate=DelegatingGate(authenticator, authorizer),
        serving=serving,
        context=context,
        delegated=True,
        trust=trust,
        startup=startup,
        background=background,
        clients=clients,
        review_metrics=[tokens.metrics, authorizer.metrics],
    )
