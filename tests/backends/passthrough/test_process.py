"""The pass-through between two real server processes over TLS: a second process of this server
(`serve --demo --demo-file contract.yaml`) is the upstream, and the server under test forwards
to it from a backends file. Every URL form through us, answers byte-identical to the
upstream's own, versions translated, the conformance kit against the live upstream, and what
happens when the upstream stops, restarts with a new CA, or has no value."""

from __future__ import annotations

import contextlib
import shutil
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from custom_metrics_server.cluster.in_memory import InMemoryCluster
from custom_metrics_server.domain import GroupResource
from custom_metrics_server.testing.kit import check_backend
from custom_metrics_server.testing.server_process import ServerProcess, start_server
from custom_metrics_server.testing.serving import (
    CustomQuery,
    ExternalQuery,
    query_every_form,
    serve_backends,
)
from tests.backends.passthrough.conftest import make_backend

pytestmark = pytest.mark.integration

CONTRACT = Path(__file__).resolve().parents[2] / "fixtures" / "contract.yaml"
OBJECTS: list[dict[str, Any]] = yaml.safe_load(CONTRACT.read_text())["objects"]
P2 = "/apis/custom.metrics.k8s.io/v1beta2"
P1 = "/apis/custom.metrics.k8s.io/v1beta1"
E = "/apis/external.metrics.k8s.io/v1beta1"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Upstream:
    """The second process, restartable on the same port (with the same or a new CA)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = _free_port()
        self.generation = 0
        self.server = self._start()

    def _start(self) -> ServerProcess:
        return start_server(
            self.workdir / f"run-{self.generation}",
            "--demo-file",
            str(CONTRACT),
            "--secure-port",
            str(self.port),
        )

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        return self.server.cert_dir / "apiserver.crt"

    def stop(self) -> None:
        self.server.stop()

    def start(self, *, new_ca: bool = False) -> None:
        if new_ca:
            self.generation += 1
        self.server = self._start()

    def get(self, path: str, **headers: str) -> httpx.Response:
        with self.server.client() as client:
            return client.get(path, headers=headers)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    one = Upstream(tmp_path_factory.mktemp("upstream"))
    yield one
    one.stop()


def _entry(upstream: Upstream, ca_file: Path | str, **settings: Any) -> dict[str, Any]:
    return {
        "name": "up",
        "type": "passthrough",
        "settings": {"url": upstream.url, "caFile": str(ca_file), **settings},
        "routes": [{"metric": "*"}],
    }


@pytest.fixture(scope="module")
def us(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    workdir = tmp_path_factory.mktemp("us")
    with serve_backends(workdir, [_entry(upstream, upstream.ca_file)], objects=OBJECTS) as server:
        yield server


QUERIES = [
    CustomQuery("pods", "some-metric", "ns", "foo", label_selector="foo=bar"),
    CustomQuery("pods", "some-metric", "ns", "pod-3", metric_selector="verb=GET"),
    CustomQuery("nodes", "some-metric", None, "node-2", label_selector="foo=bar"),
    CustomQuery("namespaces", "some-metric", None, "ns"),
    CustomQuery("deployments.apps", "m", "ns", "web"),
]
EXTERNAL = [ExternalQuery("my-external-metric", "default", "foo=bar")]


def test_every_url_form_is_answered_through_us(us: ServerProcess) -> None:
    answers = query_every_form(us, custom=QUERIES, external=EXTERNAL)
    assert len(answers) > 40


@pytest.mark.parametrize(
    "path",
    [
        f"{P2}/namespaces/ns/pods/*/some-metric",
        f"{P2}/namespaces/ns/pods/*/some-metric?labelSelector=foo%3Dbar",
        f"{P1}/namespaces/ns/pods/pod-1/some-metric",
        f"{P2}/namespaces/ns/pods/foo/some-metric?metricLabelSelector=verb%3DGET",
        f"{P2}/nodes/*/some-metric",
        f"{P1}/nodes/foo/m",
        f"{P2}/namespaces/ns/metrics/some-metric",
        f"{P2}/namespaces/ns/deployments.apps/web/m",
        f"{P2}/namespaces/ns/nodes/node-1/some-metric",  # the HPA's form for cluster-scoped
        "/apis/custom-metrics/v1alpha1/namespaces/ns/pods/pod-2/some-metric",
        f"{E}/namespaces/default/my-external-metric",
        f"{E}/namespaces/default/my-external-metric?labelSelector=foo%3Dbaz",
        f"{E}/namespaces/default/other-external-metric",
    ],
)
@pytest.mark.parametrize("accept", ["application/json", "application/vnd.kubernetes.protobuf"])
def test_answers_through_us_are_the_upstreams_own(
    us: ServerProcess, upstream: Upstream, path: str, accept: str
) -> None:
    """The same code on both sides: whatever the version asked, the bytes must be equal
    (values, windows, timestamps, order, selectors), in JSON and in protobuf."""
    with us.client() as client:
        ours = client.get(path, headers={"Accept": accept})
    theirs = upstream.get(path, Accept=accept)
    assert (ours.status_code, theirs.status_code) == (200, 200), ours.text
    assert ours.headers["content-type"] == theirs.headers["content-type"]
    assert ours.content == theirs.content


def test_absence_is_404_for_a_named_object_and_empty_for_a_wildcard(us: ServerProcess) -> None:
    with us.client() as client:
        named = client.get(f"{P2}/namespaces/ns/pods/foo/no-such-metric")
        assert named.status_code == 404
        assert named.json()["message"] == (
            "the server could not find the metric no-such-metric for pods foo"
        )
        wildcard = client.get(f"{P2}/namespaces/ns/pods/*/no-such-metric")
        assert (wildcard.status_code, wildcard.json()["items"]) == (200, [])
        external = client.get(f"{E}/namespaces/default/no-such-metric")
        assert (external.status_code, external.json()["items"]) == (200, [])


def test_a_v1beta1_upstream_answers_a_v1beta2_client(upstream: Upstream, tmp_path: Path) -> None:
    entry = _entry(upstream, upstream.ca_file, customVersion="v1beta1")
    with serve_backends(tmp_path, [entry], objects=OBJECTS) as server, server.client() as client:
        path = f"{P2}/namespaces/ns/pods/*/some-metric?labelSelector=foo%3Dbar"
        ours = client.get(path)
        assert ours.status_code == 200
        assert ours.content == upstream.get(path).content
        assert "custom.metrics.k8s.io/v1beta1" in server.logs()


def test_upstream_stopped_is_503_naming_it_and_recovers_by_itself(
    upstream: Upstream, us: ServerProcess
) -> None:
    path = f"{P2}/namespaces/ns/pods/foo/some-metric"
    with us.client() as client:
        assert client.get(path).status_code == 200
        upstream.stop()
        try:
            started = time.monotonic()
            down = client.get(path)
            # Refused at once: waiting on the stopped upstream would last the backend's 10 s
            # deadline (and then be a 504, not this 503).
            assert time.monotonic() - started < 5
            assert down.status_code == 503
            assert down.json()["reason"] == "ServiceUnavailable"
            assert down.json()["message"].startswith(
                f"backend up: upstream {upstream.url} is unreachable: cannot connect"
            )
            external = client.get(f"{E}/namespaces/default/my-external-metric")
            assert external.status_code == 503
            # The other backend of the file (the cluster view) and /readyz are unaffected.
            assert client.get("/readyz").status_code == 200
        finally:
            upstream.start()
        recovered = client.get(path)
        assert recovered.status_code == 200, recovered.text
        assert recovered.json()["items"][0]["value"] == "100"


def test_a_new_upstream_ca_is_picked_up_from_the_file_without_a_restart(
    upstream: Upstream, tmp_path: Path
) -> None:
    ca_file = tmp_path / "upstream-ca.pem"
    shutil.copy(upstream.ca_file, ca_file)
    path = f"{P2}/namespaces/ns/pods/foo/some-metric"
    with serve_backends(tmp_path / "us", [_entry(upstream, ca_file)], objects=OBJECTS) as server:
        try:
            with server.client() as client:
                assert client.get(path).status_code == 200
                upstream.stop()
                upstream.start(new_ca=True)  # a new certificate from a new CA, same port
                refused = client.get(path)
                assert refused.status_code == 503
                assert "CERTIFICATE_VERIFY_FAILED" in refused.json()["message"]
                staged = tmp_path / "staged.pem"
                shutil.copy(upstream.ca_file, staged)
                staged.rename(ca_file)  # as a Secret volume update swaps it
                deadline = time.monotonic() + 10
                while (answer := client.get(path)).status_code != 200:
                    assert time.monotonic() < deadline, answer.text
                    time.sleep(0.2)
            assert "TLS settings reloaded" in server.logs()
        finally:
            upstream.stop()  # back to the first certificate, which the other tests trust
            upstream.generation = 0
            upstream.start()


async def test_the_conformance_kit_against_the_live_upstream(upstream: Upstream) -> None:
    cluster = InMemoryCluster()
    for one in OBJECTS:
        cluster.add(
            one["resource"],
            one["name"],
            namespace=one.get("namespace", ""),
            labels=one.get("labels"),
        )

    @contextlib.asynccontextmanager
    async def outage() -> AsyncIterator[None]:
        upstream.stop()
        try:
            yield
        finally:
            upstream.start()

    backend = make_backend({"url": upstream.url, "caFile": str(upstream.ca_file)}, cluster=cluster)
    report = await check_backend(
        backend,
        objects={
            GroupResource("", "pods"): [("ns", "foo"), ("ns", "pod-1")],
            GroupResource("", "nodes"): [("", "foo")],
            GroupResource("apps", "deployments"): [("ns", "web")],
        },
        cluster=cluster,
        namespace="default",
        outage=outage,
    )
    assert report.custom_metrics >= 4
    assert report.external_metrics == 2
