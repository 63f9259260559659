"""The error tree. Every failure a client can see is a `StatusError` that knows its HTTP code,
Kubernetes `reason`, exact message and `details`, so the edge renders it as a `Status` object.

    StatusError
    ├── NotFound            404  NotFound            (routes, metrics, objects)
    ├── BadRequest          400  BadRequest          (paths, selectors, names)
    ├── MethodNotAllowed    405  MethodNotAllowed
    ├── NotAcceptable       406  NotAcceptable
    ├── Unauthorized        401  Unauthorized
    ├── Forbidden           403  Forbidden
    ├── UriTooLong          414  RequestEntityTooLarge (path + query over the bound)
    ├── TooManyRequests     429  TooManyRequests
    ├── HeadersTooLarge     431  RequestHeaderFieldsTooLarge (security.gate: head over 1 MiB)
    ├── InternalError       500  InternalError       (bugs; the cause is logged, never sent)
    │   └── AuthorizationUnavailable (security.authz: a SubjectAccessReview failed)
    ├── BackendUnavailable  503  ServiceUnavailable  (a backend is down or not synced)
    └── BackendTimeout      504  Timeout

The two subclasses defined elsewhere live beside the only code that raises them.

PURE: no I/O. Messages follow the upstream catalogue word for word
(`k8s.io/apimachinery/pkg/api/errors`, `custom-metrics-apiserver/pkg/provider/errors.go`).
"""

from __future__ import annotations

from typing import Any, ClassVar


class StatusError(Exception):
    """A failure with a Kubernetes `Status` representation."""

    code: ClassVar[int] = 500
    reason: ClassVar[str] = "InternalError"

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        self.headers: dict[str, str] = {}


class NotFound(StatusError):
    """404: a route, metric or object that does not exist."""

    code = 404
    reason = "NotFound"


class BadRequest(StatusError):
    """400: the request cannot be understood (path, selector, name)."""

    code = 400
    reason = "BadRequest"


class MethodNotAllowed(StatusError):
    """405: the path exists but only GET is served."""

    code = 405
    reason = "MethodNotAllowed"


class NotAcceptable(StatusError):
    """406: no representation the client accepts."""

    code = 406
    reason = "NotAcceptable"


class Unauthorized(StatusError):
    """401: a credential was offered and it failed."""

    code = 401
    reason = "Unauthorized"


class Forbidden(StatusError):
    """403: the caller is not allowed to read this."""

    code = 403
    reason = "Forbidden"


class UriTooLong(StatusError):
    """414: the path and query are longer than we parse. Kubernetes has no reason for 414;
    `RequestEntityTooLarge` (its 413 reason) is the closest, and clients key on the code."""

    code = 414
    reason = "RequestEntityTooLarge"


class TooManyRequests(StatusError):
    """429: over the in-flight limit."""

    code = 429
    reason = "TooManyRequests"


class InternalError(StatusError):
    """500: a bug; the message never carries the cause."""

    code = 500
    reason = "InternalError"


class BackendUnavailable(StatusError):
    """503: the backend that owns the metric cannot answer now."""

    code = 503
    reason = "ServiceUnavailable"


class BackendTimeout(StatusError):
    """504: the request or the backend call ran out of time."""

    code = 504
    reason = "Timeout"


# Constructors with the exact upstream wordings.

ROUTE_NOT_FOUND_MESSAGE = "the server could not find the requested resource"


def route_not_found() -> NotFound:
    """No route under a served group/version prefix (`details: {}`)."""
    return NotFound(ROUTE_NOT_FOUND_MESSAGE, details={})


def metric_not_found(
    *, resource: str, metric: str, name: str | None = None, selector: str = ""
) -> NotFound:
    """The three upstream metric-not-found wordings, chosen by what is known."""
    if name is None:
        return NotFound(f"the server could not find the metric {metric} for {resource}")
    if selector:
        return NotFound(
            f"the server could not find the metric {metric} for {resource} {name} "
            f"with selector {selector}"
        )
    return NotFound(f"the server could not find the metric {metric} for {resource} {name}")


def invalid_request_path() -> BadRequest:
    """Too few path parts after the namespace rewrite (upstream commit a528fe4f)."""
    return BadRequest("invalid request path")


def method_not_allowed() -> MethodNotAllowed:
    """Anything but GET on a served path."""
    return MethodNotAllowed(
        "the server does not allow this method on the requested resource", details={}
    )


def watch_not_supported() -> MethodNotAllowed:
    """`watch=true` on the external metrics group."""
    return MethodNotAllowed(
        'watch is not supported on resources of kind "*.external.metrics.k8s.io"',
        details={"group": "external.metrics.k8s.io", "kind": "*"},
    )


def not_acceptable(available: tuple[str, ...]) -> NotAcceptable:
    """No Accept clause allows a representation we serve."""
    return NotAcceptable("only the following media types are accepted: " + ", ".join(available))


def request_timeout() -> BackendTimeout:
    """The request deadline passed."""
    return BackendTimeout(
        "Timeout: request did not complete within the allotted timeout", details={}
    )


#: Path plus query string, in bytes as received. Every URL this API serves is far shorter (the
#: longest names are 253 bytes, a selector a few hundred); Go's only bound is the 1 MiB head.
MAX_URI_BYTES = 16384


def uri_too_long(size: int) -> UriTooLong:
    """The request line's target is over `MAX_URI_BYTES`."""
    return UriTooLong(
        f"Request-URI Too Long: {size} bytes, at most {MAX_URI_BYTES} are accepted", details={}
    )


def too_many_requests(retry_after: int = 1) -> TooManyRequests:
    """Over `--max-requests-inflight`. Upstream's max-in-flight filter writes this message as
    plain text; we send it as the `Status` `apierrors.NewTooManyRequests` builds, so every error
    body stays a `Status`; `Retry-After` travels in `headers`."""
    error = TooManyRequests(
        "Too many requests, please try again later.",
        details={"retryAfterSeconds": retry_after},
    )
    error.headers["Retry-After"] = str(retry_after)
    return error


def internal_error() -> InternalError:
    """A bug, masked as upstream's panic recovery masks it."""
    return InternalError(
        'an error on the server ("") has prevented the request from succeeding', details={}
    )
