"""Serving certificates: load the given pair or generate a self-signed one, and build the
server's `ssl.SSLContext`.

Generation follows client-go's `GenerateSelfSignedCertKey`: a throw-away CA
(`<host>-ca@<unix time>`) signs a serving certificate for the given hosts; the certificate file
holds the serving certificate followed by the CA, and the pair is reused when it already
exists in `--cert-dir` (as the Go server does), so a restarted demo keeps its kubeconfig valid.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import time
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


def trust_anchor(cert_file: Path) -> bytes:
    """The last certificate of a chain file: the CA clients should trust."""
    certs = x509.load_pem_x509_certificates(cert_file.read_bytes())
    return certs[-1].public_bytes(serialization.Encoding.PEM)


def server_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """TLS 1.2+ server context with AEAD suites only (uvicorn's default list is wider)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    context.load_cert_chain(cert_file, key_file)
    return context
