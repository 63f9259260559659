"""uvicorn protocols that put the verified TLS peer certificate into the ASGI scope.

uvicorn never exposes the client certificate (encode/uvicorn#745). Both event loops call
`connection_made` only after the handshake, so the certificate is final there: it is read once
per connection (`getpeercert(binary_form=True)`, the leaf only on Python 3.11) and attached to
every request's scope as the ASGI TLS extension:

    scope["extensions"]["tls"] = {
        "tls_version": 0x0304, "cipher_suite": None, "server_cert": None,
        "client_cert_chain": [PEM of the leaf] or [], "client_cert_name": RFC 4514 or None,
        "client_cert_error": None,
        "client_cert_der": DER bytes or None,   # non-standard: what the gate verifies
    }

Only certificates the handshake verified (against the union of the client CA and the
front-proxy CA) can appear here; which pool issued one is decided later by `authn`. Plaintext
connections get no extension.

Cost: ~3 us per connection (PEM and subject conversion), one dict store per request.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
from typing import Any, Final

from cryptography import x509
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from custom_metrics_server.api import wire
from custom_metrics_server.errors import BadRequest

TLS_VERSIONS: Final = {"TLSv1.2": 0x0303, "TLSv1.3": 0x0304}
#: Go's generic apiserver `ReadHeaderTimeout` (secure_serving.go).
HEADER_READ_TIMEOUT: Final = 32.0

logger = logging.getLogger(__name__)


def tls_extension(transport: Any) -> dict[str, Any] | None:
    """The ASGI TLS extension of a connection; None when it is not TLS."""
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    der: bytes | None = ssl_object.getpeercert(binary_form=True)
    chain: list[str] = []
    name: str | None = None
    if der:
        chain = [ssl.DER_cert_to_PEM_cert(der)]
        try:
            name = x509.load_der_x509_certificate(der).subject.rfc4514_string()
        except ValueError:
            name = ""
    return {
        "tls_version": TLS_VERSIONS.get(ssl_object.version() or ""),
        "cipher_suite": None,
        "server_cert": None,
        "client_cert_chain": chain,
        "client_cert_name": name,
        "client_cert_error": None,
        "client_cert_der": der or None,
    }


_UNPARSABLE = (
    "the request is not valid HTTP/1.1: a malformed request line or header, "
    "or a request head over the parser's size limit"
)


class TlsHttpToolsProtocol(HttpToolsProtocol):
    """httptools protocol whose request scopes carry the TLS extension, with a header-read
    timeout: uvicorn has none, so a client dripping a request head byte by byte would hold its
    connection forever (slowloris). The timer runs from the connection's start (first request)
    or the first byte of the next request on a kept-alive connection, until the head is
    complete, as Go's `ReadHeaderTimeout`; when it fires, the connection is closed unanswered.
    Idle kept-alive connections are uvicorn's keep-alive timeout's business (5 s)."""

    _tls: dict[str, Any] | None = None
    #: Seconds; Go's generic apiserver uses 32 s. `with_header_read_timeout` changes it.
    header_read_timeout: float = HEADER_READ_TIMEOUT
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        """Read the peer certificate once, after uvicorn's own bookkeeping."""
        super().connection_made(transport)
        self._tls = tls_extension(transport)
        self._arm_head_timer()

    def on_message_begin(self) -> None:
        """Attach the connection's TLS extension to the new request's scope."""
        super().on_message_begin()
        if self._head_timer is None:
            self._arm_head_timer()
        if self._tls is not None:
            scope: dict[str, Any] = self.scope  # type: ignore[assignment]
            scope["extensions"] = {"tls": self._tls}

    def on_headers_complete(self) -> None:
        """The head arrived in time: stop the timer before the app runs."""
        self._cancel_head_timer()
        super().on_headers_complete()

    def send_400_response(self, msg: str) -> None:
        """A request httptools cannot parse (a malformed line or header, or a head beyond its
        size limit) gets a Kubernetes `Status` like every other failure, not uvicorn's plain
        text; the connection is closed, as the stream cannot be trusted after it."""
        body = wire.status(BadRequest(_UNPARSABLE))
        head = [
            b"HTTP/1.1 400 Bad Request\r\n",
            *(name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers),
            b"content-type: application/json\r\n",
            b"cache-control: no-cache, private\r\n",
            b"x-content-type-options: nosniff\r\n",
            b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        """Drop the timer with the connection."""
        self._cancel_head_timer()
        super().connection_lost(exc)

    def _arm_head_timer(self) -> None:
        if self.header_read_timeout > 0:
            self._head_timer = self.loop.call_later(self.header_read_timeout, self._on_head_timeout)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _on_head_timeout(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            logger.debug(
                "closing a connection whose request head took over %gs", self.header_read_timeout
            )
            self.transport.close()


def with_header_read_timeout(protocol: type[Any], seconds: float) -> type[Any]:
    """`protocol` with another header-read timeout (0: none); other protocols unchanged."""
    if not issubclass(protocol, TlsHttpToolsProtocol):
        return protocol
    return type(protocol.__name__, (protocol,), {"header_read_timeout": seconds})


async def _with_tls(app: Any, tls: dict[str, Any], scope: Any, receive: Any, send: Any) -> None:
    scope.setdefault("extensions", {})["tls"] = tls
    await app(scope, receive, send)


class TlsH11Protocol(H11Protocol):
    """h11 protocol (no per-request hook): wraps the app once per connection instead."""

    def connection_made(self, transport: Any) -> None:
        """Read the peer certificate once and wrap the app with it."""
        super().connection_made(transport)
        tls = tls_extension(transport)
        if tls is not None:
            self.app = functools.partial(_with_tls, self.app, tls)
