"""Test PKI: CAs and client/serving certificates shaped like kubeadm's (CN/O only, no SAN on
client certificates), with control over validity and key usage, written as PEM files."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NOW = dt.datetime.now(dt.UTC)


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    return x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@dataclass
class Issued:
    """A certificate, its key and where they were written."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    cert_file: Path
    key_file: Path

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


class CA:
    """A self-signed CA (kubeadm shape: CA:TRUE, keyCertSign)."""

    def __init__(self, name: str, directory: Path) -> None:
        self.name = name
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(NOW - dt.timedelta(days=1))
            .not_valid_after(NOW + dt.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=True,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        self.cert_file = directory / f"{name}.crt"
        self.cert_file.write_bytes(self.cert_pem)

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        common_name: str,
        organizations: tuple[str, ...] = (),
        *,
        usage: x509.ObjectIdentifier | None = ExtendedKeyUsageOID.CLIENT_AUTH,
        not_before: dt.datetime | None = None,
        not_after: dt.datetime | None = None,
        hosts: tuple[str, ...] = (),
        file_name: str | None = None,
    ) -> Issued:
        """A leaf signed by this CA, written to `<file_name>.crt` / `.key`."""
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organizations))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before or NOW - dt.timedelta(hours=1))
            .not_valid_after(not_after or NOW + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if usage is not None:
            builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if hosts:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        stem = file_name or common_name.replace(":", "_")
        cert_file = self.directory / f"{stem}.crt"
        key_file = self.directory / f"{stem}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(_pem_key(key))
        return Issued(cert, key, cert_file, key_file)

    def serving(self, hosts: tuple[str, ...], file_name: str = "serving") -> Issued:
        """A serving certificate for `hosts` (EKU serverAuth)."""
        return self.issue(
            hosts[0], usage=ExtendedKeyUsageOID.SERVER_AUTH, hosts=hosts, file_name=file_name
        )
