"""Start-up calls to kube-apiserver: bounded retries, access checks, and the one-line
`StartupError` a failed call becomes (`runtime.startup`).

Whoever makes a call at start-up (the authentication ConfigMap read, the Kubernetes backend's
first lists, the first Lease round, the delegated-auth access checks) goes through
`startup_call`: a failure that waiting may cure (connection refused or reset, a timeout, 429,
5xx) is retried with backoff for up to `STARTUP_PATIENCE` seconds, with one warning line; any
other failure (401, 403, 404, a certificate that does not verify) fails at once. The error
names the call, what came back, and the fix the caller knows for that status (else a fix
that follows from the status and the connection's source).

It must not decide what a service needs (callers name the call and its fixes) and never runs
on the request path.
"""

from __future__ import annotations

import asyncio
import http
import logging
import os
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar

from custom_metrics_server.http_client.http11 import TransportError, TransportTimeout
from custom_metrics_server.kube.client import KubeApiError, KubeClient
from custom_metrics_server.kube.config import Connection
from custom_metrics_server.runtime.startup import StartupError

__all__ = [
    "STARTUP_PATIENCE",
    "call_status",
    "require_allowed",
    "startup_call",
    "startup_error",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: How long a start-up call is retried while the API server cannot be reached or fails (5xx),
#: in seconds: a control-plane restart does not crash-loop the server, a wrong address fails
#: well inside the manifests' startup probe (60 s).
STARTUP_PATIENCE: Final = 15.0
_FIRST_DELAY: Final = 0.5
_MAX_DELAY: Final = 4.0

SELF_SUBJECT_ACCESS_REVIEWS: Final = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def _causes(error: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in found:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def call_status(error: KubeApiError) -> tuple[str, bool]:
    """What came back, in a few words, and whether retrying may help."""
    if error.code:
        try:
            phrase = http.HTTPStatus(error.code).phrase
        except ValueError:
            phrase = error.reason
        transient = error.code == 429 or error.code >= 500
        return f"{error.code} {error.reason or phrase}", transient
    causes = _causes(error)
    for cause in causes:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"TLS certificate verification failed ({cause.verify_message})", False
    for cause in causes:
        if isinstance(cause, TransportTimeout):
            return "no answer in time (timeout)", True
    for cause in causes:
        if isinstance(cause, OSError) and cause.errno:
            # socket.gaierror's errno is resolver-specific: its own text names it.
            text = cause.strerror if isinstance(cause, socket.gaierror) else None
            return f"cannot connect ({(text or os.strerror(cause.errno)).lower()})", True
    for cause in causes:
        if isinstance(cause, TransportError) and isinstance(cause.__cause__, OSError):
            return f"cannot connect ({cause.__cause__})", True
    return error.message or "no answer", True


def _default_fix(error: KubeApiError, connection: Connection) -> str:
    source = connection.source or "the kubeconfig"
    status, transient = call_status(error)
    if error.code == 0 and status.startswith("TLS"):
        return (
            f"the API server's certificate does not verify against the certificate authority "
            f"of {source}"
        )
    if error.code == 0:
        return (
            f"check the server address {connection.host} in {source} and that the API server "
            f"is reachable from here (retried for {STARTUP_PATIENCE:g}s)"
        )
    if error.code == 401:
        return (
            f"the API server does not accept the credentials of {source} (a deleted service "
            "account, an expired token, or a client certificate from another CA)"
        )
    if error.code == 403:
        return f"grant the identity of {source} the permission this call needs"
    if transient:
        return f"the API server is failing (retried for {STARTUP_PATIENCE:g}s)"
    return f"check the API server at {connection.host}"


def startup_error(
    error: KubeApiError,
    *,
    what: str,
    connection: Connection,
    fixes: Mapping[int, str] | None = None,
) -> StartupError:
    """The one-line start-up failure a failed call stands for; `fixes` by HTTP status (0:
    the API server could not be reached) override the default advice."""
    status, _ = call_status(error)
    detail = error.message if error.code else ""
    fix = (fixes or {}).get(error.code) or _default_fix(error, connection)
    return StartupError(what, call=error.call, status=status, detail=detail, fix=fix)


async def startup_call(
    call: Callable[[], Awaitable[T]],
    *,
    what: str,
    connection: Connection,
    fixes: Mapping[int, str] | None = None,
    patience: float = STARTUP_PATIENCE,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """`call()`, retried while its failure may pass, for up to `patience` seconds; a failure
    that stays, or any other, raises the `StartupError` it stands for."""
    deadline = clock() + patience
    delay = _FIRST_DELAY
    warned = False
    while True:
        try:
            return await call()
        except KubeApiError as error:
            status, transient = call_status(error)
            remaining = deadline - clock()
            if not transient or remaining <= 0:
                raise startup_error(error, what=what, connection=connection, fixes=fixes) from error
            if not warned:
                warned = True
                logger.warning(
                    "%s: %s answered %s; retrying for up to %gs",
                    what,
                    error.call or "the API server",
                    status,
                    patience,
                )
            await sleep(min(delay, remaining))
            delay = min(delay * 2, _MAX_DELAY)


async def require_allowed(
    client: KubeClient,
    *,
    verb: str,
    group: str,
    resource: str,
    namespace: str = "",
    purpose: str,
    fix: str,
) -> None:
    """Ask the API server (SelfSubjectAccessReview, which every authenticated identity may
    create) whether the client's identity may `verb` the resource, which `purpose` needs; a
    "no" is a `StartupError` with `fix`. An API server that cannot answer the question (404,
    403) is not a failure: the check is then skipped. Credentials it refuses (401) and an API
    server that cannot be reached are."""
    connection = client.connection
    subject = f"the identity of {connection.source or connection.host}"
    target = f"{resource}.{group}" if group else resource
    scope = f" in namespace {namespace}" if namespace else ""
    attributes: dict[str, Any] = {"verb": verb, "group": group, "resource": resource}
    if namespace:
        attributes["namespace"] = namespace
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }

    async def ask() -> Any:
        return await client.post_json(SELF_SUBJECT_ACCESS_REVIEWS, body)

    try:
        answer = await startup_call(
            ask,
            what=f"cannot check whether {subject} may {verb} {target}{scope} ({purpose})",
            connection=connection,
        )
    except StartupError as error:
        cause = error.__cause__
        if isinstance(cause, KubeApiError) and cause.code in (403, 404):
            logger.debug("skipping the access check: %s", error.line())
            return
        raise
    status = (answer or {}).get("status") or {}
    if status.get("allowed") is True:
        return
    raise StartupError(
        f"{subject} may not {verb} {target}{scope}, which {purpose} needs",
        call=f"POST {connection.host}{SELF_SUBJECT_ACCESS_REVIEWS}",
        status="allowed: false",
        answered=True,
        detail=str(status.get("reason") or "no rule allows it"),
        fix=fix,
    )
