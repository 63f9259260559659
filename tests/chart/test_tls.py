"""TLS three ways. generate: the caBundle is the CA of the Secret the chart renders, the serving
certificate chains to it for the Service's names, and `helm upgrade` keeps both (read back with
`lookup`, exercised with `helm template --dry-run=server` against a fake API server) or renews
the serving certificate under the same CA. certManager: the injection annotation and no
caBundle. existingSecret: the given CA. Never insecureSkipTLSVerify."""

from __future__ import annotations

import base64
import datetime
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from tests.chart.conftest import (
    NAME,
    NAMESPACE,
    RELEASE,
    Obj,
    example,
    example_names,
    helm,
    one,
    render,
    select,
    template_args,
)
from tests.chart.fake_apiserver import FakeApiServer

SERVICE_NAMES = [
    NAME,
    f"{NAME}.{NAMESPACE}",
    f"{NAME}.{NAMESPACE}.svc",
    f"{NAME}.{NAMESPACE}.svc.cluster.local",
]
SECRET = f"{NAME}-tls"
CA_SECRET = f"{NAME}-tls-ca"
NOT_AFTER = "custom-metrics-server/not-after"
INJECT = "cert-manager.io/inject-ca-from"
PUBLIC = serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo


def decoded(secret: Obj) -> dict[str, bytes]:
    return {key: base64.b64decode(value) for key, value in secret["data"].items()}


def mounted_secret(objects: list[Obj]) -> str:
    volumes = one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    (serving,) = [v for v in volumes if v["name"] == "serving-cert"]
    return serving["secret"]["secretName"]  # type: ignore[no-any-return]


def assert_serves_the_service_names(ca_pem: bytes, cert_pem: bytes, key_pem: bytes) -> None:
    ca = x509.load_pem_x509_certificate(ca_pem)
    leaf, *intermediates = x509.load_pem_x509_certificates(cert_pem)
    for name in SERVICE_NAMES:
        verifier = PolicyBuilder().store(Store([ca])).build_server_verifier(x509.DNSName(name))
        assert verifier.verify(leaf, intermediates)[-1] == ca
    wrong = PolicyBuilder().store(Store([ca])).build_server_verifier(x509.DNSName("evil.svc"))
    with pytest.raises(VerificationError):
        wrong.verify(leaf, intermediates)
    usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usages
    key = serialization.load_pem_private_key(key_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert key.curve.name == "secp256r1"
    assert key.public_key().public_bytes(*PUBLIC) == leaf.public_key().public_bytes(*PUBLIC)


# --- every setup ----------------------------------------------------------------------------------


@pytest.mark.parametrize("setup", ["default", *example_names()])
def test_every_api_service_verifies_the_server(setup: str) -> None:
    objects = render() if setup == "default" else render(example(setup))
    services = select(objects, "APIService")
    assert services
    for service in services:
        spec = service["spec"]
        assert "insecureSkipTLSVerify" not in spec
        annotations = service["metadata"].get("annotations", {})
        if INJECT in annotations:
            assert "caBundle" not in spec  # cainjector owns it
        else:
            pem = base64.b64decode(spec["caBundle"], validate=True)
            assert x509.load_pem_x509_certificates(pem)
    bundles = {s["spec"].get("caBundle") for s in services}
    assert len(bundles) == 1, "every APIService trusts the same CA"


# --- generate -------------------------------------------------------------------------------------


def test_generated_ca_bundle_is_the_ca_of_the_rendered_secret() -> None:
    objects = render()
    secret = one(objects, "Secret", SECRET)
    assert secret["type"] == "kubernetes.io/tls"
    assert mounted_secret(objects) == SECRET
    data = decoded(secret)
    assert set(data) == {"tls.crt", "tls.key", "ca.crt"}
    for service in select(objects, "APIService"):
        assert base64.b64decode(service["spec"]["caBundle"]) == data["ca.crt"]
    assert_serves_the_service_names(data["ca.crt"], data["tls.crt"], data["tls.key"])
    ca_secret = decoded(one(objects, "Secret", CA_SECRET))
    assert ca_secret["tls.crt"] == data["ca.crt"]
    ca = x509.load_pem_x509_certificate(ca_secret["tls.crt"])
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    ca_key = serialization.load_pem_private_key(ca_secret["tls.key"], password=None)
    assert ca_key.public_key().public_bytes(*PUBLIC) == ca.public_key().public_bytes(*PUBLIC)


def test_generated_certificates_last_as_configured_and_say_so() -> None:
    objects = render(sets=("tls.generate.caValidityDays=100", "tls.generate.certValidityDays=30"))
    now = datetime.datetime.now(datetime.UTC)
    for name, days in ((CA_SECRET, 100), (SECRET, 30)):
        secret = one(objects, "Secret", name)
        cert = x509.load_pem_x509_certificate(decoded(secret)["tls.crt"])
        expires = cert.not_valid_after_utc
        assert abs(expires - (now + datetime.timedelta(days=days))) < datetime.timedelta(minutes=5)
        recorded = datetime.datetime.fromisoformat(secret["metadata"]["annotations"][NOT_AFTER])
        assert abs(recorded - expires) < datetime.timedelta(minutes=1)


def test_generated_certificate_follows_the_release_names() -> None:
    objects = render(release="metrics", namespace="observability", sets=("tls.clusterDomain=corp",))
    data = decoded(one(objects, "Secret", "metrics-custom-metrics-server-tls"))
    leaf = x509.load_pem_x509_certificate(data["tls.crt"])
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    service = "metrics-custom-metrics-server"
    assert names.get_values_for_type(x509.DNSName) == [
        service,
        f"{service}.observability",
        f"{service}.observability.svc",
        f"{service}.observability.svc.corp",
    ]


class Cluster:
    """The fake API server holding the Secrets of a previous release."""

    def __init__(self, server: FakeApiServer, home: Path) -> None:
        self.server = server
        self.env = {
            "KUBECONFIG": str(server.kubeconfig(home)),
            # helm's discovery cache and config stay in the test's directory
            "HOME": str(home),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def put(self, secret: Obj) -> None:
        """Store a rendered Secret as `helm install` leaves it: owned by the release."""
        secret = json.loads(json.dumps(secret))
        secret["metadata"]["annotations"].update(
            {"meta.helm.sh/release-name": RELEASE, "meta.helm.sh/release-namespace": NAMESPACE}
        )
        self.server.put_secret(secret)

    def install(self, objects: list[Obj]) -> None:
        for secret in select(objects, "Secret"):
            self.put(secret)

    def upgrade(self, *sets: str) -> list[Obj]:
        """What `helm upgrade` would render: the templates with `lookup` reading the cluster."""
        args = template_args((), sets)
        result = helm(*args, "--dry-run=server", "--disable-openapi-validation", env=self.env)
        assert result.returncode == 0, result.stderr
        return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    server = FakeApiServer()
    with server.running():
        yield Cluster(server, tmp_path)


def _expire_soon(secret: Obj, days: int) -> Obj:
    soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=days)
    secret = json.loads(json.dumps(secret))
    secret["metadata"]["annotations"][NOT_AFTER] = soon.strftime("%Y-%m-%dT%H:%M:%SZ")
    return secret


def test_upgrade_keeps_the_generated_certificates(cluster: Cluster) -> None:
    first = render()
    cluster.install(first)
    second = cluster.upgrade()
    for name in (CA_SECRET, SECRET):
        assert one(second, "Secret", name)["data"] == one(first, "Secret", name)["data"]
        assert (
            one(second, "Secret", name)["metadata"]["annotations"]
            == one(first, "Secret", name)["metadata"]["annotations"]
        )
    assert [s["spec"]["caBundle"] for s in select(second, "APIService")] == [
        s["spec"]["caBundle"] for s in select(first, "APIService")
    ]
    read = [p.split("?")[0] for p in cluster.server.requests]
    for name in (CA_SECRET, SECRET):
        assert f"/api/v1/namespaces/{NAMESPACE}/secrets/{name}" in read


def test_without_the_cluster_every_render_is_new() -> None:
    # What `helm template` shows (and why Argo CD-style rendering should not use generate).
    first = one(render(), "Secret", SECRET)["data"]
    second = one(render(sets=("logLevel=3",)), "Secret", SECRET)["data"]
    assert first["ca.crt"] != second["ca.crt"]


def test_upgrade_renews_an_expiring_serving_certificate_under_the_same_ca(
    cluster: Cluster,
) -> None:
    first = render()
    cluster.install(first)
    cluster.put(_expire_soon(one(first, "Secret", SECRET), days=10))
    second = cluster.upgrade()
    old, new = decoded(one(first, "Secret", SECRET)), decoded(one(second, "Secret", SECRET))
    assert new["tls.crt"] != old["tls.crt"]
    assert new["tls.key"] != old["tls.key"]
    assert new["ca.crt"] == old["ca.crt"]  # the caBundle does not change
    assert_serves_the_service_names(old["ca.crt"], new["tls.crt"], new["tls.key"])
    for service in select(second, "APIService"):
        assert base64.b64decode(service["spec"]["caBundle"]) == old["ca.crt"]
    # Outside renewBeforeDays (30 by default) nothing changes.
    cluster.put(_expire_soon(one(first, "Secret", SECRET), days=40))
    assert decoded(one(cluster.upgrade(), "Secret", SECRET))["tls.crt"] == old["tls.crt"]


def test_upgrade_reissues_the_serving_certificate_for_new_names(cluster: Cluster) -> None:
    first = render()
    cluster.install(first)
    second = cluster.upgrade("tls.clusterDomain=corp.example")
    old, new = decoded(one(first, "Secret", SECRET)), decoded(one(second, "Secret", SECRET))
    assert new["ca.crt"] == old["ca.crt"]
    leaf = x509.load_pem_x509_certificate(new["tls.crt"])
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{NAME}.{NAMESPACE}.svc.corp.example" in names.get_values_for_type(x509.DNSName)


def test_upgrade_renews_an_expiring_ca_and_every_ca_bundle_with_it(cluster: Cluster) -> None:
    first = render()
    cluster.install(first)
    cluster.put(_expire_soon(one(first, "Secret", CA_SECRET), days=5))
    second = cluster.upgrade()
    old, new = decoded(one(first, "Secret", SECRET)), decoded(one(second, "Secret", SECRET))
    assert new["ca.crt"] != old["ca.crt"]
    assert decoded(one(second, "Secret", CA_SECRET))["tls.crt"] == new["ca.crt"]
    assert_serves_the_service_names(new["ca.crt"], new["tls.crt"], new["tls.key"])
    for service in select(second, "APIService"):
        assert base64.b64decode(service["spec"]["caBundle"]) == new["ca.crt"]


def test_upgrade_replaces_a_secret_it_cannot_trust(cluster: Cluster) -> None:
    """A serving Secret signed by another CA (or without the chart's annotations) is issued
    again: the caBundle and the mounted certificate must always match."""
    first, other = render(), render(sets=("logLevel=4",))
    cluster.install(first)
    cluster.put(one(other, "Secret", SECRET))  # another CA's certificate
    second = cluster.upgrade()
    new = decoded(one(second, "Secret", SECRET))
    assert new["ca.crt"] == decoded(one(first, "Secret", CA_SECRET))["tls.crt"]
    assert new["tls.crt"] != decoded(one(other, "Secret", SECRET))["tls.crt"]
    assert_serves_the_service_names(new["ca.crt"], new["tls.crt"], new["tls.key"])


# --- cert-manager ---------------------------------------------------------------------------------


def test_cert_manager_injects_the_ca_of_the_serving_certificate() -> None:
    objects = render(example("cert-manager"))
    assert not select(objects, "Secret")  # cert-manager writes them
    serving = one(objects, "Certificate", f"{NAME}-serving")
    for service in select(objects, "APIService"):
        assert service["metadata"]["annotations"][INJECT] == f"{NAMESPACE}/{NAME}-serving"
        assert "caBundle" not in service["spec"]
    assert serving["spec"]["secretName"] == mounted_secret(objects) == SECRET
    assert serving["spec"]["dnsNames"] == SERVICE_NAMES
    assert "server auth" in serving["spec"]["usages"]
    issuers = {o["metadata"]["name"]: o["spec"] for o in select(objects, "Issuer")}
    certificates = {o["metadata"]["name"]: o["spec"] for o in select(objects, "Certificate")}
    ca_issuer = issuers[serving["spec"]["issuerRef"]["name"]]
    ca = next(c for c in certificates.values() if c["secretName"] == ca_issuer["ca"]["secretName"])
    assert ca["isCA"] is True
    assert "selfSigned" in issuers[ca["issuerRef"]["name"]]


def test_cert_manager_with_an_issuer_of_yours() -> None:
    objects = render(
        example("cert-manager"),
        sets=(
            "tls.certManager.issuerRef.kind=ClusterIssuer",
            "tls.certManager.issuerRef.name=corp",
        ),
    )
    assert not select(objects, "Issuer")
    (serving,) = select(objects, "Certificate")
    assert serving["spec"]["issuerRef"] == {
        "group": "cert-manager.io",
        "kind": "ClusterIssuer",
        "name": "corp",
    }
    assert all(INJECT in s["metadata"]["annotations"] for s in select(objects, "APIService"))


# --- existing Secret ------------------------------------------------------------------------------


def test_existing_secret_mode_uses_the_given_ca() -> None:
    objects = render(example("existing-secret"))
    values = yaml.safe_load(example("existing-secret").read_text())
    pem = values["tls"]["existingSecret"]["caBundle"].encode()
    x509.load_pem_x509_certificate(pem)
    assert not select(objects, "Secret")
    assert mounted_secret(objects) == values["tls"]["secretName"]
    for service in select(objects, "APIService"):
        assert base64.b64decode(service["spec"]["caBundle"]) == pem
        assert INJECT not in service["metadata"].get("annotations", {})
