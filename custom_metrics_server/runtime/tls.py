"""Serving certificates: load the given pair or generate a self-signed one, and build the
server's `ssl.SSLContext`, reloading the pair (and the client CA pool) without a restart.

Generation follows client-go's `GenerateSelfSignedCertKey`: a throw-away CA
(`<host>-ca@<unix time>`) signs a serving certificate for the given hosts; the certificate file
holds the serving certificate followed by the CA, and the pair is reused when it already
exists in `--cert-dir` (as the Go server does), so a restarted demo keeps its kubeconfig valid.

Reload (`ReloadingServerContext`): uvicorn builds its listening `SSLContext` once. Its
`sni_callback` runs for every handshake (also without SNI) and swaps in the *current* context,
which is rebuilt when the certificate or key file changes (checked at most once per second) or
when the client CA pool changes version. A new pair is published only if `load_cert_chain`
accepts it, so a half-written rotation (new certificate, old key) keeps the old pair. Settings
that OpenSSL takes from the listening context (verify mode, tickets, the TLS 1.2 session cache)
are the same on every context because one function builds them all. Session tickets are off
(`num_tickets = 0`, `OP_NO_TICKET`): a resumed session skips client-certificate verification,
so the application re-checks the certificate's validity and issuer on every request anyway.

Cost per handshake: one clock read and a comparison; a `stat` of two files once per second.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: TLS 1.2 suites: ECDHE with AEAD only (TLS 1.3 suites are AEAD by definition).
TLS12_CIPHERS: Final = (
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
)
logger = logging.getLogger(__name__)

CERT_FILE: Final = "apiserver.crt"
KEY_FILE: Final = "apiserver.key"


@dataclass(frozen=True, slots=True)
class ServingCertificate:
    """Paths of the serving pair and the PEM of the CA clients should trust."""

    cert_file: Path
    key_file: Path
    ca_pem: bytes


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _alt_names(hosts: list[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def generate_self_signed(hosts: list[str], *, days: int = 365) -> tuple[bytes, bytes, bytes]:
    """(certificate chain PEM, private key PEM, CA PEM) for a new CA-signed serving cert."""
    now = dt.datetime.now(dt.UTC)
    not_before = now - dt.timedelta(hours=1)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"{hosts[0]}-ca@{int(time.time())}")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(f"{hosts[0]}@{int(time.time())}"))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(_alt_names(hosts)), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    chain = cert.public_bytes(serialization.Encoding.PEM) + ca_pem
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return chain, key_pem, ca_pem


def ensure_serving_certificate(cert_dir: Path, hosts: list[str]) -> ServingCertificate:
    """Reuse `apiserver.crt`/`apiserver.key` in `cert_dir`, or generate them."""
    cert_file, key_file = cert_dir / CERT_FILE, cert_dir / KEY_FILE
    if not (cert_file.exists() and key_file.exists()):
        chain, key_pem, _ = generate_self_signed(hosts)
        cert_dir.mkdir(parents=True, exist_ok=True)
        key_file.touch(mode=0o600)
        key_file.write_bytes(key_pem)
        cert_file.write_bytes(chain)
    return ServingCertificate(cert_file, key_file, trust_anchor(cert_file))


def in_memory_serving_certificate(hosts: list[str]) -> ServingCertificate:
    """A generated pair that lives only in this process, for a `--cert-dir` that cannot be
    written (a read-only root): `ssl` loads a pair from paths only, so each is an anonymous
    memory file (`memfd_create`, Linux) named by its `/proc/self/fd/N` path. The descriptors
    stay open for the life of the process and are closed on exec (child processes cannot see
    them). OSError where there is no memfd or no /proc."""
    chain, key_pem, _ = generate_self_signed(hosts)
    cert_file = _memory_file(CERT_FILE, chain)
    key_file = _memory_file(KEY_FILE, key_pem)
    return ServingCertificate(cert_file, key_file, trust_anchor(cert_file))


def _memory_file(name: str, data: bytes) -> Path:
    create = getattr(os, "memfd_create", None)
    if create is None:
        raise OSError(f"no memory files (memfd_create) on {os.uname().sysname}")
    fd = create(name)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    path = Path(f"/proc/self/fd/{fd}")
    if not path.exists():
        os.close(fd)
        raise OSError(f"{path} is not there (no /proc)")
    return path


def client_context(
    ca_file: str | None = None,
    *,
    insecure: bool = False,
    cert_file: str | None = None,
    key_file: str | None = None,
) -> ssl.SSLContext:
    """A client TLS context: `ca_file` (else the system store) or no verification at all with
    `insecure`, and a client certificate when `cert_file` is given (its key in `key_file` or
    in the same file). Kubernetes, kubelets, node agents and Prometheus are all reached so."""
    context = ssl.create_default_context(cafile=ca_file)
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert_file:
        context.load_cert_chain(cert_file, key_file)
    return context


def trust_anchor(cert_file: Path) -> bytes:
    """The last certificate of a chain file: the CA clients should trust."""
    certs = x509.load_pem_x509_certificates(cert_file.read_bytes())
    return certs[-1].public_bytes(serialization.Encoding.PEM)


def server_context(
    cert_file: Path, key_file: Path, *, client_ca_pem: bytes | None = None
) -> ssl.SSLContext:
    """TLS 1.2+ server context with AEAD suites only (uvicorn's default list is wider).

    With `client_ca_pem` (possibly empty) client certificates are requested and verified when
    given (`CERT_OPTIONAL`, as Go's `VerifyClientCertIfGiven`), against those CAs. ALPN offers
    `http/1.1` only (uvicorn does not speak HTTP/2); session tickets are off.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    context.set_alpn_protocols(["http/1.1"])
    context.options |= ssl.OP_NO_TICKET
    context.num_tickets = 0
    context.load_cert_chain(cert_file, key_file)
    if client_ca_pem is not None:
        context.verify_mode = ssl.CERT_OPTIONAL
        if client_ca_pem:
            context.load_verify_locations(cadata=client_ca_pem.decode("ascii"))
    return context


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size, info.st_ino


ClientTrust = Callable[[], tuple[int, bytes]]
_Stamp = tuple[int, int, int] | None
_Stamps = tuple[_Stamp, _Stamp]


class ReloadingServerContext:
    """A listening context whose handshakes use the newest valid serving pair and client CAs.

    `client_trust` (None: client certificates are not requested) returns (version, CA PEM);
    the context is rebuilt when the version changes.
    """

    def __init__(
        self,
        cert_file: Path,
        key_file: Path,
        *,
        client_trust: ClientTrust | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self._client_trust = client_trust
        self._clock = clock
        self._next_check = clock() + 1.0
        self._stamps: _Stamps = (_stamp(cert_file), _stamp(key_file))
        self._failed_stamps: _Stamps | None = None
        self._trust_version, ca_pem = client_trust() if client_trust else (0, b"")
        self._current = server_context(
            cert_file, key_file, client_ca_pem=ca_pem if client_trust else None
        )
        self.listening = server_context(
            cert_file, key_file, client_ca_pem=ca_pem if client_trust else None
        )
        self.listening.sni_callback = self._on_handshake
        self.reloads = 0

    def _on_handshake(
        self, connection: ssl.SSLObject | ssl.SSLSocket, _name: str | None, _ctx: ssl.SSLContext
    ) -> None:
        connection.context = self.current()

    def current(self) -> ssl.SSLContext:
        """The context new handshakes use; rebuilt first if its material changed."""
        trust_changed = False
        version, ca_pem = 0, b""
        if self._client_trust is not None:
            version, ca_pem = self._client_trust()
            trust_changed = version != self._trust_version
        now = self._clock()
        files_due = now >= self._next_check
        if not trust_changed and not files_due:
            return self._current
        stamps = self._stamps
        if files_due:
            self._next_check = now + 1.0
            stamps = (_stamp(self.cert_file), _stamp(self.key_file))
        files_changed = stamps not in (self._stamps, self._failed_stamps)
        if trust_changed or files_changed:
            self._rebuild(stamps, version, ca_pem, trust_changed=trust_changed)
        return self._current

    def _rebuild(
        self, stamps: _Stamps, version: int, ca_pem: bytes, *, trust_changed: bool
    ) -> None:
        try:
            context = server_context(
                self.cert_file,
                self.key_file,
                client_ca_pem=ca_pem if self._client_trust else None,
            )
        except (OSError, ssl.SSLError, ValueError) as err:
            if stamps != self._failed_stamps:
                logger.error(
                    "keeping the previous serving certificate: cannot load %s / %s: %s",
                    self.cert_file,
                    self.key_file,
                    err,
                )
            self._failed_stamps = stamps
            return
        if stamps != self._stamps:
            logger.info("serving certificate reloaded from %s", self.cert_file)
        self._stamps = stamps
        self._failed_stamps = None
        if trust_changed:
            self._trust_version = version
        self._current = context
        self.reloads += 1
