"""The control plane's own PKI, shaped like kubeadm's, written as PEM files in one folder.

Three CAs (cluster, front proxy, and one per aggregated server that the tests register),
the kube-apiserver serving certificate, the front-proxy client the aggregator presents to
aggregated servers, the admin client (O=system:masters) and a service-account signing key.
Keys are ECDSA P-256: kube-apiserver, etcd-less clients and our server all accept them, and
they are quick to make (the whole PKI takes milliseconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.security.pki import CA, Issued

__all__ = ["FRONT_PROXY_CLIENT", "ClusterPki", "make_cluster_pki"]

#: The CN the aggregator's client certificate carries, and the one name
#: `--requestheader-allowed-names` lets through.
FRONT_PROXY_CLIENT = "front-proxy-client"


@dataclass(frozen=True)
class ClusterPki:
    """Paths and issuers of one control plane's PKI."""

    directory: Path
    ca: CA
    front_proxy_ca: CA
    apiserver: Issued
    front_proxy_client: Issued
    admin: Issued
    sa_key: Path
    sa_pub: Path

    def client(self, user: str, groups: tuple[str, ...] = ()) -> Issued:
        """A client certificate from the cluster CA (kube-apiserver's x509 authenticator
        reads CN as the user name and each O as a group)."""
        stem = "user-" + user.replace(":", "_").replace("/", "_")
        return self.ca.issue(user, groups, file_name=stem)


def make_cluster_pki(directory: Path) -> ClusterPki:
    """Every certificate and key a loopback control plane needs, in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = CA("ca", directory)
    front_proxy_ca = CA("front-proxy-ca", directory)
    apiserver = ca.serving(
        ("127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
        file_name="apiserver",
    )
    key = ec.generate_private_key(ec.SECP256R1())
    sa_key = directory / "sa.key"
    sa_pub = directory / "sa.pub"
    sa_key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    sa_pub.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return ClusterPki(
        directory=directory,
        ca=ca,
        front_proxy_ca=front_proxy_ca,
        apiserver=apiserver,
        front_proxy_client=front_proxy_ca.issue(FRONT_PROXY_CLIENT, file_name="front-proxy-client"),
        admin=ca.issue("admin", ("system:masters",), file_name="admin"),
        sa_key=sa_key,
        sa_pub=sa_pub,
    )
