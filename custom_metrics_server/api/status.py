"""The one way a failure is answered: a Kubernetes `Status` body, negotiated like data.

Every error of the server (the handler chain's 414/429/504, the gate's 401/403, the endpoints'
Status errors, the FastAPI shell's) goes through `status_response`, so JSON and protobuf
`Status` bodies, their headers and the error's own headers (`Retry-After`) are built in one
place. Pure: bytes in, bytes out.
"""

from __future__ import annotations

from typing import Final

from custom_metrics_server.api import protobuf, wire
from custom_metrics_server.api.negotiation import PROTOBUF, negotiate
from custom_metrics_server.errors import NotAcceptable, StatusError

Headers = tuple[tuple[bytes, bytes], ...]

JSON_HEADERS: Final[Headers] = (
    (b"content-type", b"application/json"),
    (b"cache-control", b"no-cache, private"),
    (b"x-content-type-options", b"nosniff"),
)
PROTOBUF_HEADERS: Final[Headers] = (
    (b"content-type", PROTOBUF.encode()),
    (b"cache-control", b"no-cache, private"),
    (b"x-content-type-options", b"nosniff"),
)


def status_response(error: StatusError, accept: str = "") -> tuple[bytes, Headers]:
    """A failure's `Status` body and headers (the error's own, such as `Retry-After`,
    included), negotiated like data as upstream's `ErrorNegotiated` does: protobuf when the
    `accept` header prefers it; JSON otherwise, and always for a 406 (upstream writes the
    negotiation failure with `WriteRawJSON`) or when no `accept` is given (upstream writes its
    429, 414 and 504 as JSON or text, whatever was asked)."""
    own = tuple((name.lower().encode(), value.encode()) for name, value in error.headers.items())
    if accept and not isinstance(error, NotAcceptable):
        chosen = negotiate(accept)
        if not isinstance(chosen, NotAcceptable) and chosen.protobuf:
            return protobuf.status(error), PROTOBUF_HEADERS + own
    return wire.status(error), JSON_HEADERS + own
