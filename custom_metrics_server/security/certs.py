"""X.509 checks of client certificates against one CA pool, with `cryptography`'s verifier.

The TLS handshake already verified the peer against the *union* of the client CA and the
front-proxy (requestheader) CA. This module answers the question the handshake cannot: which
pool does the leaf chain to, is it valid *now* (a resumed TLS session skips verification), and
may it be used for client authentication. The policy follows Go's `x509.Verify` with
`ExtKeyUsageClientAuth`, not the web PKI: no SAN or AKI required (kubeadm's front-proxy-client
certificate has neither need), CAs need basicConstraints CA:TRUE, and a leaf with an EKU
extension must list clientAuth (or anyExtendedKeyUsage).

Only the leaf is visible to the application on Python 3.11, so a leaf issued by an intermediate
does not chain here and is treated as unauthenticated (fail closed). Never called per request:
the gate caches results by certificate and trust version. One check costs ~70-110 us.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import (
    Criticality,
    ExtensionPolicy,
    PolicyBuilder,
    Store,
    VerificationError,
)


class CertificateError(ValueError):
    """A PEM bundle that holds no usable certificate."""


def load_bundle(pem: bytes, *, what: str) -> tuple[x509.Certificate, ...]:
    """Every certificate of a PEM bundle; raises `CertificateError` if there is none or bad PEM."""
    try:
        certificates = x509.load_pem_x509_certificates(pem)
    except ValueError as err:
        raise CertificateError(f"{what}: no valid PEM certificates ({err})") from err
    if not certificates:
        raise CertificateError(f"{what}: no certificates")
    return tuple(certificates)


def _client_usage(_policy: object, _cert: x509.Certificate, ext: object) -> None:
    if ext is None:
        return  # no EKU extension: any usage, as Go treats it
    assert isinstance(ext, x509.ExtendedKeyUsage)
    if (
        ExtendedKeyUsageOID.CLIENT_AUTH not in ext
        and ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE not in ext
    ):
        raise ValueError("certificate specifies an incompatible key usage")


_LEAF_POLICY = ExtensionPolicy.permit_all().may_be_present(
    x509.ExtendedKeyUsage, Criticality.AGNOSTIC, _client_usage
)
_CA_POLICY = ExtensionPolicy.permit_all().require_present(
    x509.BasicConstraints, Criticality.AGNOSTIC, None
)


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of checking one leaf against one pool: `error` is "" when it chains."""

    error: str


OK = Verdict("")


def verify_client(
    leaf: x509.Certificate, pool: Sequence[x509.Certificate], *, now: dt.datetime
) -> Verdict:
    """Whether `leaf` chains to `pool`, is valid at `now` and allows client authentication."""
    if not pool:
        return Verdict("no certificate authority configured")
    verifier = (
        PolicyBuilder()
        .store(Store(list(pool)))
        .time(now)
        .extension_policies(ca_policy=_CA_POLICY, ee_policy=_LEAF_POLICY)
        .build_client_verifier()
    )
    try:
        verifier.verify(leaf, [])
    except VerificationError as err:
        return Verdict(f"x509: {err}")
    return OK


def common_name(certificate: x509.Certificate) -> str:
    """The subject's CommonName ("" if none); with several, the last, as Go's `pkix.Name`."""
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[-1].value) if names else ""


def organizations(certificate: x509.Certificate) -> tuple[str, ...]:
    """Every subject Organization, in certificate order (Go's `Subject.Organization`)."""
    return tuple(
        str(attribute.value)
        for attribute in certificate.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    )
