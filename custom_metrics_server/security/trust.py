"""The trust material authentication rests on, as one versioned, immutable snapshot.

A `TrustSnapshot` holds the client CA pool, the front-proxy (request-header) settings and the
union of both CA pools in PEM for the TLS layer. The `TrustStore` publishes a new snapshot (one
reference assignment, version + 1) whenever a source changes: the CA files given by flags
(re-read when their mtime/size/inode change, checked at most once per second) or the
`extension-apiserver-authentication` ConfigMap (pushed by `extension_config`). Content that does
not parse never replaces the last good value; the TLS context and the request-time certificate
checks both key on `version`, so they always agree on what is trusted.

Must not: perform network I/O, or widen trust on an error. `snapshot` is O(1); `refresh` costs
one `stat` per watched file at most once per second.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from custom_metrics_server.security.certs import CertificateError, load_bundle

logger = logging.getLogger(__name__)

STANDARD_USERNAME_HEADERS = ("x-remote-user",)
STANDARD_UID_HEADERS = ("x-remote-uid",)
STANDARD_GROUP_HEADERS = ("x-remote-group",)
STANDARD_EXTRA_PREFIXES = ("x-remote-extra-",)


class TrustConfigError(ValueError):
    """Request-header settings or CA material that cannot be used."""


@dataclass(frozen=True, slots=True)
class RequestHeaderSettings:
    """Front-proxy trust: the CA pool, who may assert identities, and in which headers.

    Header names are lower-case (ASGI header names are); matching is case-insensitive.
    """

    ca: tuple[x509.Certificate, ...]
    username_headers: tuple[str, ...] = STANDARD_USERNAME_HEADERS
    uid_headers: tuple[str, ...] = ()
    group_headers: tuple[str, ...] = STANDARD_GROUP_HEADERS
    extra_prefixes: tuple[str, ...] = STANDARD_EXTRA_PREFIXES
    allowed_names: tuple[str, ...] = ()


def request_header_settings(
    ca: tuple[x509.Certificate, ...],
    *,
    username_headers: Sequence[str],
    uid_headers: Sequence[str],
    group_headers: Sequence[str],
    extra_prefixes: Sequence[str],
    allowed_names: Sequence[str],
) -> RequestHeaderSettings:
    """Validated settings (upstream `RequestHeaderAuthenticationOptions.Validate`)."""
    for flag, values in (
        ("requestheader-username-headers", username_headers),
        ("requestheader-uid-headers", uid_headers),
        ("requestheader-group-headers", group_headers),
        ("requestheader-extra-headers-prefix", extra_prefixes),
        ("requestheader-allowed-names", allowed_names),
    ):
        if any(not value.strip() for value in values):
            raise TrustConfigError(f'empty value in "{flag}"')
    if uid_headers and "x-remote-uid" not in {h.lower() for h in uid_headers}:
        raise TrustConfigError(
            "--requestheader-uid-headers must contain X-Remote-Uid when it is set"
        )
    for values, standard, flag in (
        (username_headers, "x-remote-user", "requestheader-username-headers"),
        (group_headers, "x-remote-group", "requestheader-group-headers"),
        (extra_prefixes, "x-remote-extra-", "requestheader-extra-headers-prefix"),
    ):
        if values and standard not in {v.lower() for v in values}:
            logger.warning(
                "%s is set without the standard %s header - API aggregation will not work",
                flag,
                standard,
            )
    return RequestHeaderSettings(
        ca=ca,
        username_headers=tuple(h.lower() for h in username_headers),
        uid_headers=tuple(h.lower() for h in uid_headers),
        group_headers=tuple(h.lower() for h in group_headers),
        extra_prefixes=tuple(p.lower() for p in extra_prefixes),
        allowed_names=tuple(allowed_names),
    )


@dataclass(frozen=True, slots=True)
class TrustSnapshot:
    """Everything trusted at one moment; `version` changes whenever anything does."""

    version: int
    client_ca: tuple[x509.Certificate, ...] = ()
    requestheader: RequestHeaderSettings | None = None
    ca_pem: bytes = b""


def _pem(certificates: Sequence[x509.Certificate]) -> bytes:
    seen: set[bytes] = set()
    out: list[bytes] = []
    for certificate in certificates:
        der = certificate.public_bytes(serialization.Encoding.DER)
        if der not in seen:
            seen.add(der)
            out.append(certificate.public_bytes(serialization.Encoding.PEM))
    return b"".join(out)


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size, info.st_ino


@dataclass
class _WatchedFile:
    path: Path
    stamp: tuple[int, int, int] | None
    apply: Callable[[tuple[x509.Certificate, ...]], None]


class TrustStore:
    """Owns the current `TrustSnapshot`; every change goes through `_publish`."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._snapshot = TrustSnapshot(version=1)
        self._files: list[_WatchedFile] = []
        self._next_check = 0.0
        #: Header settings used when the request-header CA comes from a file (flags).
        self._file_requestheader: RequestHeaderSettings | None = None

    @property
    def snapshot(self) -> TrustSnapshot:
        """The current snapshot (a plain attribute read)."""
        return self._snapshot

    # --- sources ------------------------------------------------------------------------------

    def watch_client_ca_file(self, path: Path) -> None:
        """Load `--client-ca-file` now (errors raise) and re-read it whenever it changes."""
        certificates = load_bundle(path.read_bytes(), what=str(path))
        self.set_client_ca(certificates)
        self._files.append(_WatchedFile(path, _stamp(path), self.set_client_ca))

    def watch_requestheader_file(self, path: Path, settings: RequestHeaderSettings) -> None:
        """Load `--requestheader-client-ca-file` now and re-read it whenever it changes."""
        certificates = load_bundle(path.read_bytes(), what=str(path))
        self._file_requestheader = settings
        self.set_requestheader(replace(settings, ca=certificates))

        def apply(ca: tuple[x509.Certificate, ...]) -> None:
            assert self._file_requestheader is not None
            self.set_requestheader(replace(self._file_requestheader, ca=ca))

        self._files.append(_WatchedFile(path, _stamp(path), apply))

    def set_client_ca(self, certificates: tuple[x509.Certificate, ...] | None) -> None:
        """Replace the client CA pool (None or empty: client certificates authenticate no one)."""
        self._publish(
            client_ca=tuple(certificates or ()), requestheader=self._snapshot.requestheader
        )

    def set_requestheader(self, settings: RequestHeaderSettings | None) -> None:
        """Replace the front-proxy settings (None: no front proxy is trusted)."""
        if settings is not None and not settings.allowed_names:
            logger.warning(
                "request-header authentication trusts ANY certificate issued by its CA: "
                "--requestheader-allowed-names (or the ConfigMap's requestheader-allowed-names) "
                "is empty"
            )
        self._publish(client_ca=self._snapshot.client_ca, requestheader=settings)

    def refresh(self) -> TrustSnapshot:
        """Re-read changed CA files (at most once per second); returns the current snapshot."""
        if not self._files:
            return self._snapshot
        now = self._clock()
        if now < self._next_check:
            return self._snapshot
        self._next_check = now + 1.0
        for watched in self._files:
            stamp = _stamp(watched.path)
            if stamp is None or stamp == watched.stamp:
                continue
            try:
                certificates = load_bundle(watched.path.read_bytes(), what=str(watched.path))
            except (OSError, CertificateError) as err:
                logger.error("keeping the previous CA bundle: cannot reload %s", err)
                continue
            watched.stamp = stamp
            watched.apply(certificates)
            logger.info("reloaded CA bundle %s", watched.path)
        return self._snapshot

    def tls_material(self) -> tuple[int, bytes]:
        """(version, PEM of every trusted CA) for the TLS layer; refreshes files first."""
        snapshot = self.refresh()
        return snapshot.version, snapshot.ca_pem

    def _publish(
        self,
        *,
        client_ca: tuple[x509.Certificate, ...],
        requestheader: RequestHeaderSettings | None,
    ) -> None:
        current = self._snapshot
        if client_ca == current.client_ca and requestheader == current.requestheader:
            return
        pool = list(client_ca) + list(requestheader.ca if requestheader else ())
        self._snapshot = TrustSnapshot(
            version=current.version + 1,
            client_ca=client_ca,
            requestheader=requestheader,
            ca_pem=_pem(pool),
        )
