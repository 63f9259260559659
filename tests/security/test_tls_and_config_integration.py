"""TLS posture and rotation, cache TTLs, and the authentication ConfigMap, on real servers.

Each scenario gets its own server process (and where it matters its own fake kube-apiserver),
because they change files on disk, the ConfigMap, or cache lifetimes.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.serialization import Encoding

from tests.fakes.auth_webhooks import FakeAuthApiServer
from tests.security.conftest import (
    FRONT_PROXY_CN,
    Pki,
    SecureServer,
    front_proxy_headers,
    full_flags,
    start_or_fail,
    start_secure,
    stop,
)
from tests.security.pki import CA

pytestmark = pytest.mark.integration

P = "/apis/custom.metrics.k8s.io/v1beta2"


def eventually(check: Callable[[], bool], *, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


def handshake(server: SecureServer, context: ssl.SSLContext) -> ssl.SSLSocket:
    host, port = server.url.removeprefix("https://").rsplit(":", 1)
    raw = socket.create_connection((host, int(port)), timeout=5)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def peer_der(server: SecureServer) -> bytes:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with handshake(server, context) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


# --- TLS posture (39) -------------------------------------------------------------------------


def _capable(minimum: ssl.TLSVersion, maximum: ssl.TLSVersion, ciphers: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_ciphers(ciphers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLS 1.0/1.1 on purpose
        context.minimum_version = minimum
        context.maximum_version = maximum
    return context


def test_39_old_protocols_and_weak_suites_are_refused(secure: SecureServer) -> None:
    old = _capable(ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1, "ALL:@SECLEVEL=0")
    with pytest.raises((ssl.SSLError, OSError)):
        handshake(secure, old).close()
    cbc = _capable(
        ssl.TLSVersion.TLSv1_2,
        ssl.TLSVersion.TLSv1_2,
        "ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES256-SHA:AES128-SHA:NULL-SHA:ADH-AES128-SHA:PSK-AES128-CBC-SHA:@SECLEVEL=0",
    )
    with pytest.raises((ssl.SSLError, OSError)):
        handshake(secure, cbc).close()


def test_39_aead_tls12_and_tls13_are_accepted_with_http11_alpn(secure: SecureServer) -> None:
    tls12 = _capable(
        ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-AES128-GCM-SHA256"
    )
    with handshake(secure, tls12) as tls:
        assert tls.version() == "TLSv1.2"
        assert tls.cipher()[0] == "ECDHE-ECDSA-AES128-GCM-SHA256"
    tls13 = _capable(ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_3, "DEFAULT")
    tls13.set_alpn_protocols(["h2", "http/1.1"])
    with handshake(secure, tls13) as tls:
        assert tls.version() == "TLSv1.3"
        assert tls.selected_alpn_protocol() == "http/1.1"


# --- rotation ---------------------------------------------------------------------------------


def _replace(source: Path, target: Path) -> None:
    temporary = target.with_suffix(".tmp")
    shutil.copyfile(source, temporary)
    os.replace(temporary, target)


@pytest.fixture(scope="module")
def rotating(
    pki: Pki, fake: FakeAuthApiServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[SecureServer, Path]]:
    """A server whose serving pair and client CA file live in a directory the tests rewrite."""
    workdir = tmp_path_factory.mktemp("rotating")
    live = workdir / "live"
    live.mkdir()
    for name in ("serving.crt", "serving.key"):
        shutil.copyfile(pki.directory / name, live / name)
    shutil.copyfile(pki.client_ca.cert_file, live / "client-ca.crt")
    flags = full_flags(pki, fake.write_kubeconfig(workdir / "kubeconfig"))
    flags[flags.index("--tls-cert-file") + 1] = str(live / "serving.crt")
    flags[flags.index("--tls-private-key-file") + 1] = str(live / "serving.key")
    flags[flags.index("--client-ca-file") + 1] = str(live / "client-ca.crt")
    server = start_secure(workdir, *flags, ca_file=pki.serving_ca.cert_file)
    yield server, live
    stop(server)


def test_39_serving_certificate_rotation_is_picked_up_and_a_half_written_one_is_not(
    rotating: tuple[SecureServer, Path], pki: Pki
) -> None:
    server, live = rotating
    original = peer_der(server)
    assert original == pki.serving.cert.public_bytes(encoding=ssl_der())
    renewed = pki.serving_ca.serving(("127.0.0.1", "localhost"), file_name="serving-renewed")
    _replace(renewed.key_file, live / "serving.key")
    _replace(renewed.cert_file, live / "serving.crt")
    new_der = renewed.cert.public_bytes(encoding=ssl_der())
    assert eventually(lambda: peer_der(server) == new_der)
    with server.client() as client:  # the new certificate verifies against the same CA
        assert client.get("/healthz").status_code == 200
    # Only the certificate is replaced: it does not match the key, the current pair stays.
    stray = pki.serving_ca.serving(("127.0.0.1",), file_name="serving-stray")
    _replace(stray.cert_file, live / "serving.crt")
    time.sleep(2.5)
    assert peer_der(server) == new_der
    assert "keeping the previous serving certificate" in server.logs()
    _replace(renewed.cert_file, live / "serving.crt")


def test_14_client_ca_file_rotation(
    rotating: tuple[SecureServer, Path], pki: Pki, fake: FakeAuthApiServer
) -> None:
    server, live = rotating
    fake.allow_all = True
    try:
        assert server.get(P, cert=pki.alice).status_code == 200
        new_ca = CA("client-ca-2", pki.directory / "rotation")
        bob = new_ca.issue("bob", file_name="bob")
        _replace(new_ca.cert_file, live / "client-ca.crt")

        def old_rejected() -> bool:
            try:
                return server.get(P, cert=pki.alice).status_code == 401
            except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
                return True

        assert eventually(old_rejected)
        assert server.get(P, cert=bob).status_code == 200
    finally:
        fake.allow_all = False


def ssl_der() -> Encoding:
    return Encoding.DER


# --- cache lifetimes (8, 19) ------------------------------------------------------------------


def test_08_19_reviews_are_repeated_once_the_ttl_has_passed(pki: Pki, tmp_path: Path) -> None:
    with FakeAuthApiServer() as fake:
        fake.allow_all = True
        fake.tokens["ttl-token"] = {"username": "ttl-user"}
        flags = full_flags(
            pki,
            fake.write_kubeconfig(tmp_path / "kubeconfig"),
            "--authentication-token-webhook-cache-ttl=1s",
            "--authorization-webhook-cache-authorized-ttl=1500ms",
        )
        server = start_secure(tmp_path, *flags, ca_file=pki.serving_ca.cert_file)
        try:
            with server.client(headers={"Authorization": "Bearer ttl-token"}) as client:
                for _ in range(3):
                    assert client.get(P).status_code == 200
                assert (len(fake.token_reviews), len(fake.access_reviews)) == (1, 1)
                time.sleep(1.7)
                assert client.get(P).status_code == 200
                assert (len(fake.token_reviews), len(fake.access_reviews)) == (2, 2)
        finally:
            stop(server)


# --- the extension-apiserver-authentication ConfigMap (13-15) ---------------------------------


def configmap_data(pki: Pki, allowed: list[str]) -> dict[str, str]:
    return {
        "client-ca-file": pki.client_ca.cert_pem.decode(),
        "requestheader-client-ca-file": pki.front_proxy_ca.cert_pem.decode(),
        "requestheader-username-headers": json.dumps(["X-Remote-User"]),
        "requestheader-group-headers": json.dumps(["X-Remote-Group"]),
        "requestheader-extra-headers-prefix": json.dumps(["X-Remote-Extra-"]),
        "requestheader-allowed-names": json.dumps(allowed),
    }


def configmap_flags(pki: Pki, kubeconfig: Path) -> list[str]:
    return [
        "--tls-cert-file",
        str(pki.serving.cert_file),
        "--tls-private-key-file",
        str(pki.serving.key_file),
        "--authentication-kubeconfig",
        str(kubeconfig),
        "--authorization-kubeconfig",
        str(kubeconfig),
        "--fast-retries",
    ]


def test_13_15_trust_follows_the_configmap(pki: Pki, tmp_path: Path) -> None:
    with FakeAuthApiServer() as fake:
        fake.allow_all = True
        fake.max_watch_seconds = 2
        fake.set_configmap(configmap_data(pki, [FRONT_PROXY_CN]))
        server = start_secure(
            tmp_path,
            *configmap_flags(pki, fake.write_kubeconfig(tmp_path / "k")),
            ca_file=pki.serving_ca.cert_file,
        )
        try:
            as_proxy = front_proxy_headers("cm-user")
            assert server.get(P, cert=pki.front_proxy, headers=as_proxy).status_code == 200
            assert fake.access_reviews[-1]["spec"]["user"] == "cm-user"
            assert server.get(P, cert=pki.alice).status_code == 200  # client CA from the ConfigMap
            # Rotate the allowed names: the new proxy name works, the removed one is refused.
            fake.set_configmap(configmap_data(pki, ["kubelet-front-proxy"]))
            assert eventually(
                lambda: server.get(P, cert=pki.other_proxy, headers=as_proxy).status_code == 200
            )
            assert server.get(P, cert=pki.front_proxy, headers=as_proxy).status_code == 401
            # Malformed content: the last good settings stay.
            broken = configmap_data(pki, ["kubelet-front-proxy"])
            broken["requestheader-allowed-names"] = "not json"
            broken["client-ca-file"] = "-----BEGIN CERTIFICATE-----\ngarbage\n"
            fake.set_configmap(broken)
            assert eventually(
                lambda: "keeping the last good request-header settings" in server.logs()
            )
            assert server.get(P, cert=pki.other_proxy, headers=as_proxy).status_code == 200
            assert server.get(P, cert=pki.alice).status_code == 200
            # Deleted: nothing from it is trusted any more (fail closed).
            fake.delete_configmap()

            def refused() -> bool:
                try:
                    return server.get(P, cert=pki.other_proxy, headers=as_proxy).status_code == 401
                except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
                    return True  # no CA left at all: the handshake refuses the certificate

            assert eventually(refused)
        finally:
            stop(server)


def test_13_a_missing_configmap_trusts_no_front_proxy(pki: Pki, tmp_path: Path) -> None:
    with FakeAuthApiServer() as fake:
        fake.allow_all = True
        server = start_secure(
            tmp_path,
            *configmap_flags(pki, fake.write_kubeconfig(tmp_path / "k")),
            ca_file=pki.serving_ca.cert_file,
        )
        try:
            try:
                code = server.get(
                    P, cert=pki.front_proxy, headers=front_proxy_headers("x")
                ).status_code
            except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
                code = 0  # no CA trusted at all: the handshake refuses the certificate
            assert code in {0, 401}
            assert "not found" in server.logs()
        finally:
            stop(server)


def test_13_a_forbidden_configmap_fails_start_up(pki: Pki, tmp_path: Path) -> None:
    with FakeAuthApiServer() as fake:
        fake.configmap_forbidden = True
        code, log = start_or_fail(
            tmp_path,
            *configmap_flags(pki, fake.write_kubeconfig(tmp_path / "k")),
            ca_file=pki.serving_ca.cert_file,
        )
        assert code != 0
        assert "extension-apiserver-authentication-reader" in log
        assert not fake.access_reviews


def test_the_h11_protocol_also_carries_the_peer_certificate(
    pki: Pki, fake: FakeAuthApiServer, tmp_path: Path
) -> None:
    flags = full_flags(pki, fake.write_kubeconfig(tmp_path / "kubeconfig"), "--http", "h11")
    server = start_secure(tmp_path, *flags, ca_file=pki.serving_ca.cert_file)
    fake.allow_all = True
    try:
        headers = front_proxy_headers("h11-user")
        assert server.get(P, cert=pki.front_proxy, headers=headers).status_code == 200
        assert fake.access_reviews[-1]["spec"]["user"] == "h11-user"
        assert server.get(P, cert=pki.other_proxy, headers=headers).status_code == 401
    finally:
        fake.allow_all = False
        stop(server)
