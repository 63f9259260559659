"""The pass-through, in process, against a local HTTPS fake answering with the Go reference
adapter's exact documents (tests/fakes/go_adapter.py): discovery and its quirks, how requests
are forwarded, what answers become, every error of the mapping table, credentials re-read from
their files, and the conformance kit."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

import pytest
import trustme
from pydantic import ValidationError

from custom_metrics_server.backends.passthrough import PassthroughBackend
from custom_metrics_server.backends.passthrough import backend as module
from custom_metrics_server.cluster.in_memory import InMemoryCluster
from custom_metrics_server.domain import GroupResource
from custom_metrics_server.errors import BackendTimeout, BackendUnavailable, BadRequest
from custom_metrics_server.testing.kit import check_backend
from tests.backends.passthrough.conftest import custom_request, external_request, make_backend
from tests.fakes.go_adapter import KEDA_LABEL, FakeGoAdapter, Series, Value

PODS = GroupResource("", "pods")


def _values(count: int = 3) -> list[Value]:
    values = [
        Value(
            "pods", "default", f"web-{i}", "http_requests", f"{i + 1}500m", labels={"verb": "GET"}
        )
        for i in range(count)
    ]
    values += [
        Value("namespaces", "", "default", "queue_length", "7", window=None),
        Value("nodes", "", "node-1", "load", "2k"),
        Value("deployments.apps", "default", "web", "hits", "1Ki"),
    ]
    return values


def _cluster(pods: int = 3, extra: int = 0) -> InMemoryCluster:
    cluster = InMemoryCluster()
    for i in range(pods + extra):
        cluster.add("pods", f"web-{i}", namespace="default", labels={"app": "web"})
    cluster.add("namespaces", "default")
    cluster.add("nodes", "node-1")
    cluster.add("deployments.apps", "web", namespace="default")
    return cluster


@pytest.fixture
def fake() -> FakeGoAdapter:
    with FakeGoAdapter(
        _values(),
        [
            Series("queue_depth", "42", {"queue": "jobs"}),
            Series("queue_depth", "1", {"queue": "mail"}),
        ],
    ) as adapter:
        yield adapter


def _settings(fake: FakeGoAdapter, tmp_path: Path, **extra: object) -> dict[str, object]:
    return {"url": fake.url, "caFile": fake.write_ca(tmp_path / "ca.pem"), **extra}


@contextlib.asynccontextmanager
async def running(
    backend: PassthroughBackend, *, ready: bool = True
) -> AsyncIterator[PassthroughBackend]:
    async with backend:
        if ready:
            await _eventually(lambda: backend.ready().ready, what=lambda: backend.ready().reason)
        yield backend


async def _eventually(condition, *, within: float = 10.0, what=lambda: "") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"not within {within}s: {what()}"
        await asyncio.sleep(0.05)


# -- discovery --------------------------------------------------------------------------------


async def test_a_v1beta1_only_go_adapter_is_asked_in_v1beta1_and_read_with_its_quirks(
    fake: FakeGoAdapter, tmp_path: Path
) -> None:
    cluster = _cluster()
    async with running(make_backend(_settings(fake, tmp_path), cluster=cluster)) as backend:
        assert (backend.custom_version, backend.external_version) == ("v1beta1", "v1beta1")
        assert {
            (str(i.group_resource), i.metric, i.namespaced) for i in backend.list_metrics()
        } == {
            ("pods", "http_requests", True),
            ("namespaces", "queue_length", False),
            ("nodes", "load", False),
            ("deployments.apps", "hits", True),
        }
        assert backend.list_external_metrics() == {"queue_depth"}
        # The v1beta2 probe was refused (route not found); values are asked in v1beta1.
        request = custom_request(cluster, "pods", "http_requests", [("default", "web-1")])
        (sample,) = await backend.fetch(request)
        assert fake.value_paths()[-1] == (
            "/apis/custom.metrics.k8s.io/v1beta1/namespaces/default/pods/web-1/http_requests"
        )
        assert (sample.value, sample.window) == (Decimal("2.5"), 60)
        assert sample.described.api_version == "v1"  # not the adapter's "/v1"
        # A deployment: apps/v1 from our mapping; a namespace metric by its own URL form.
        (hits,) = await backend.fetch(
            custom_request(cluster, "deployments.apps", "hits", [("default", "web")])
        )
        assert (hits.value, hits.described.api_version, hits.described.kind) == (
            1024,
            "apps/v1",
            "Deployment",
        )
        (queue,) = await backend.fetch(
            custom_request(cluster, "namespaces", "queue_length", [("", "default")])
        )
        assert (
            fake.value_paths()[-1]
            == "/apis/custom.metrics.k8s.io/v1beta1/namespaces/default/metrics/queue_length"
        )
        assert (queue.value, queue.window) == (7, None)
        (load,) = await backend.fetch(custom_request(cluster, "nodes", "load", [("", "node-1")]))
        assert fake.value_paths()[-1] == "/apis/custom.metrics.k8s.io/v1beta1/nodes/node-1/load"
        assert load.value == 2000
        # Requests ask for JSON and say who we are.
        headers = fake.requests[-1][1]
        assert headers["Accept"] == "application/json"
        assert headers["User-Agent"].startswith("custom-metrics-server/")


async def test_a_go_adapter_that_serves_v1beta2_without_advertising_it_is_asked_in_v1beta2(
    tmp_path: Path,
) -> None:
    with FakeGoAdapter(_values(), serve_v1beta2=True) as fake:
        cluster = _cluster()
        async with running(make_backend(_settings(fake, tmp_path), cluster=cluster)) as backend:
            assert backend.custom_version == "v1beta2"
            (sample,) = await backend.fetch(
                custom_request(cluster, "pods", "http_requests", [("default", "web-0")])
            )
            assert fake.value_paths()[-1].startswith("/apis/custom.metrics.k8s.io/v1beta2/")
            assert sample.value == Decimal("1.5")


async def test_forced_versions_skip_the_choice(fake: FakeGoAdapter, tmp_path: Path) -> None:
    settings = _settings(fake, tmp_path, customVersion="v1beta1", externalVersion="none")
    async with running(make_backend(settings, cluster=_cluster())) as backend:
        assert (backend.custom_version, backend.external_version) == ("v1beta1", None)
        assert await backend.fetch_external(external_request("queue_depth")) == ()
        assert not [
            p for p, _ in fake.requests if "external.metrics.k8s.io/v1beta1/namespaces" in p
        ]


async def test_a_version_the_upstream_stops_serving_is_rediscovered_and_the_call_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(module, "MIN_REFRESH", 0.0)
    with FakeGoAdapter(_values(), serve_v1beta2=True) as fake:
        cluster = _cluster()
        async with running(make_backend(_settings(fake, tmp_path), cluster=cluster)) as backend:
            assert backend.custom_version == "v1beta2"
            fake.serve_v1beta2 = False  # downgraded behind our back
            request = custom_request(cluster, "pods", "http_requests", [("default", "web-2")])
            (sample,) = await backend.fetch(request)
            assert sample.value == Decimal("3.5")
            assert backend.custom_version == "v1beta1"
            paths = fake.value_paths()
            assert paths[-2].startswith("/apis/custom.metrics.k8s.io/v1beta2/")
            assert paths[-1].startswith("/apis/custom.metrics.k8s.io/v1beta1/")


async def test_an_unreachable_upstream_at_start_is_not_ready_then_ready_by_itself(
    tmp_path: Path,
) -> None:
    fake = FakeGoAdapter(_values())
    fake.up()
    settings = _settings(fake, tmp_path)
    fake.down()
    backend = make_backend(settings, cluster=_cluster())
    try:
        async with running(backend, ready=False):
            await _eventually(lambda: "unreachable" in backend.ready().reason)
            state = backend.ready()
            assert not state.ready
            assert fake.url.removeprefix("https://") in state.reason
            fake.up()
            await _eventually(lambda: backend.ready().ready, within=15)
            assert backend.list_external_metrics() == set()  # the fake has no series
            assert backend.list_metrics()
    finally:
        fake.down()


# -- forwarding -------------------------------------------------------------------------------


async def test_many_objects_are_one_wildcard_call_filtered_to_the_names_asked(
    tmp_path: Path,
) -> None:
    with FakeGoAdapter(_values(20)) as fake:
        cluster = _cluster(pods=20)
        async with running(make_backend(_settings(fake, tmp_path), cluster=cluster)) as backend:
            asked = [("default", f"web-{i}") for i in range(15)]
            before = len(fake.value_paths())
            samples = await backend.fetch(custom_request(cluster, "pods", "http_requests", asked))
            paths = fake.value_paths()[before:]
            # One call, no labelSelector (ours is already resolved into names), filtered.
            assert paths == [
                "/apis/custom.metrics.k8s.io/v1beta1/namespaces/default/pods/*/http_requests"
            ]
            assert [(s.described.namespace, s.described.name) for s in samples] == asked


async def test_few_objects_of_a_big_namespace_are_fetched_one_by_one_with_bounded_concurrency(
    tmp_path: Path,
) -> None:
    with FakeGoAdapter(_values(3)) as fake:
        cluster = _cluster(pods=3, extra=997)  # 1,000 pods in the namespace
        settings = _settings(fake, tmp_path, fanOutConcurrency=2)
        async with running(make_backend(settings, cluster=cluster)) as backend:
            fake.delay = 1.0  # a wide window for two calls to overlap on a loaded machine
            asked = [
                ("default", "web-0"),
                ("default", "web-1"),
                ("default", "web-2"),
                ("default", "web-9"),
            ]
            before = len(fake.value_paths())
            started = time.monotonic()
            samples = await backend.fetch(custom_request(cluster, "pods", "http_requests", asked))
            elapsed = time.monotonic() - started
            paths = sorted(fake.value_paths()[before:])
            assert paths == [
                f"/apis/custom.metrics.k8s.io/v1beta1/namespaces/default/pods/web-{i}/http_requests"
                for i in (0, 1, 2, 9)
            ]
            # web-9 has no value: absent. Two at a time, counted at the fake: two waves.
            assert [s.described.name for s in samples] == ["web-0", "web-1", "web-2"]
            assert fake.most_in_flight == 2
            assert elapsed > 1.9  # two waves of 1 s, not one


async def test_the_metric_label_selector_is_passed_through(
    fake: FakeGoAdapter, tmp_path: Path
) -> None:
    cluster = _cluster()
    async with running(make_backend(_settings(fake, tmp_path), cluster=cluster)) as backend:
        request = custom_request(
            cluster, "pods", "http_requests", [("default", "web-0")], "verb=GET"
        )
        (sample,) = await backend.fetch(request)
        assert sample.value == Decimal("1.5")
        assert fake.value_paths()[-1].endswith(
            "/web-0/http_requests?metricLabelSelector=verb%3DGET"
        )
        other = custom_request(cluster, "pods", "http_requests", [("default", "web-0")], "verb=PUT")
        assert await backend.fetch(other) == []  # the upstream's 404 with selector: absent


async def test_absence(fake: FakeGoAdapter, tmp_path: Path) -> None:
    cluster = _cluster()
    async with running(make_backend(_settings(fake, tmp_path), cluster=cluster)) as backend:
        assert (
            await backend.fetch(
                custom_request(cluster, "pods", "nothing_here", [("default", "web-0")])
            )
            == []
        )
        assert await backend.fetch_external(external_request("no_such_metric")) == []


async def test_external_metrics_pass_their_selector_and_keep_labels(
    fake: FakeGoAdapter, tmp_path: Path
) -> None:
    async with running(make_backend(_settings(fake, tmp_path), cluster=_cluster())) as backend:
        series = await backend.fetch_external(
            external_request("queue_depth", "team-a", "queue=jobs")
        )
        assert fake.value_paths()[-1] == (
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/team-a/queue_depth?labelSelector=queue%3Djobs"
        )
        assert [(dict(s.labels), s.value) for s in series] == [({"queue": "jobs"}, 42)]
        both = await backend.fetch_external(external_request("queue_depth"))
        assert sorted(s.value for s in both) == [1, 42]


async def test_keda_shaped_upstream(tmp_path: Path) -> None:
    series = [Series("s0-rabbitmq-orders", "12", scaled_object="worker")]
    with FakeGoAdapter([], series, keda=True) as fake:
        async with running(make_backend(_settings(fake, tmp_path), cluster=_cluster())) as backend:
            assert backend.list_external_metrics() == set()  # only KEDA's placeholder: left out
            request = external_request("s0-rabbitmq-orders", "shop", f"{KEDA_LABEL}=worker")
            (one,) = await backend.fetch_external(request)
            assert (one.metric, dict(one.labels), one.value) == ("s0-rabbitmq-orders", {}, 12)
            with pytest.raises(
                BackendUnavailable, match=r"answered 500: scaledObject name is not specified"
            ):
                await backend.fetch_external(external_request("s0-rabbitmq-orders", "shop"))


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (400, BadRequest),
        (429, BackendUnavailable),
        (500, BackendUnavailable),
        (503, BackendUnavailable),
        (504, BackendTimeout),
    ],
)
async def test_upstream_statuses_map_to_sdk_errors_naming_it(
    fake: FakeGoAdapter, tmp_path: Path, code: int, error: type[Exception]
) -> None:
    cluster = _cluster()
    async with running(make_backend(_settings(fake, tmp_path), cluster=cluster)) as backend:
        fake.fail["/apis/custom.metrics.k8s.io/v1beta1/namespaces"] = (code, f"injected {code}")
        request = custom_request(cluster, "pods", "http_requests", [("default", "web-0")])
        with pytest.raises(error) as raised:
            await backend.fetch(request)
        assert str(raised.value) == f"upstream {fake.url} answered {code}: injected {code}"
        assert type(raised.value) is error


@pytest.mark.parametrize("code", [401, 403])
async def test_refused_credentials_are_503_with_one_clear_log_line(
    fake: FakeGoAdapter, tmp_path: Path, code: int, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = _cluster()
    token = tmp_path / "token"
    token.write_text("ours\n")
    fake.tokens = {"ours"}
    async with running(
        make_backend(_settings(fake, tmp_path, tokenFile=str(token)), cluster=cluster)
    ) as backend:
        if code == 401:
            fake.tokens = {"someone-else"}
        else:
            fake.forbidden = True
        request = custom_request(cluster, "pods", "http_requests", [("default", "web-0")])
        caplog.set_level(logging.ERROR, "custom_metrics_server.backends")
        for _ in range(3):
            with pytest.raises(
                BackendUnavailable, match=rf"answered {code}: .*our credentials are"
            ):
                await backend.fetch(request)
        lines = [
            r.getMessage()
            for r in caplog.records
            if r.name.startswith("custom_metrics_server.backends")
        ]
        assert len(lines) == 1, lines  # once a minute, not once a request
        expected = "refused our credentials (401" if code == 401 else "does not allow us (403"
        assert expected in lines[0]
        assert str(token) in lines[0]


async def test_a_slow_upstream_is_a_504_at_the_deadline_never_a_hang(
    fake: FakeGoAdapter, tmp_path: Path
) -> None:
    cluster = _cluster()
    settings = _settings(fake, tmp_path, requestTimeout="500ms")
    async with running(make_backend(settings, cluster=cluster)) as backend:
        fake.delay = 30.0
        started = time.monotonic()
        with pytest.raises(
            BackendTimeout, match=rf"upstream {fake.url} did not answer within 0.5s"
        ):
            await backend.fetch(
                custom_request(cluster, "pods", "http_requests", [("default", "web-0")])
            )
        # The 0.5 s deadline, not the upstream's 30 s (a third of it, for a loaded machine).
        assert time.monotonic() - started < 10
        with pytest.raises(BackendTimeout):
            await backend.fetch_external(external_request("queue_depth"))


async def test_a_stopped_upstream_is_503_and_a_restarted_one_answers_again(
    fake: FakeGoAdapter, tmp_path: Path
) -> None:
    cluster = _cluster()
    async with running(make_backend(_settings(fake, tmp_path), cluster=cluster)) as backend:
        request = custom_request(cluster, "pods", "http_requests", [("default", "web-0")])
        assert await backend.fetch(request)
        fake.down()
        with pytest.raises(BackendUnavailable, match=rf"upstream {fake.url} is unreachable"):
            await backend.fetch(request)
        assert backend.ready().ready  # still ready: one call fails, the next may succeed
        fake.up()
        assert await backend.fetch(request)


def test_settings_are_checked_naming_the_field(fake: FakeGoAdapter, tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="url"):
        make_backend({"url": "http://plain.example"})
    with pytest.raises(ValidationError, match="clientKeyFile needs clientCertFile"):
        make_backend({"url": fake.url, "clientKeyFile": "k.pem"})
    with pytest.raises(ValidationError, match="requestTimeout"):
        make_backend({"url": fake.url, "requestTimeout": "soon"})
    with pytest.raises(
        ValueError, match=r"requestTimeout \(10s\) must be below the backend's deadline"
    ):
        make_backend({"url": fake.url, "requestTimeout": "10s"}, timeout=10.0)
    with pytest.raises(ValueError, match=r"cannot load caFile .*missing\.pem"):
        make_backend({"url": fake.url, "caFile": "missing.pem"}, base_dir=tmp_path)
    assert make_backend({"url": fake.url}, timeout=2.0).upstream.config.request_timeout == 1.6


# -- credentials from files -------------------------------------------------------------------


async def test_a_rotated_token_file_is_used_without_a_restart(
    fake: FakeGoAdapter, tmp_path: Path
) -> None:
    cluster = _cluster()
    token = tmp_path / "token"
    token.write_text("first")
    fake.tokens = {"first"}
    async with running(
        make_backend(_settings(fake, tmp_path, tokenFile=str(token)), cluster=cluster)
    ) as backend:
        request = custom_request(cluster, "pods", "http_requests", [("default", "web-0")])
        assert await backend.fetch(request)
        fake.tokens = {"second"}  # the old token is revoked ...
        with pytest.raises(BackendUnavailable, match="answered 401"):
            await backend.fetch(request)
        staged = tmp_path / "token.new"
        staged.write_text("second\n")
        staged.rename(token)  # ... and the file rotated as the kubelet does (a rename)
        await asyncio.sleep(1.1)
        assert await backend.fetch(request)
        assert fake.requests[-1][1]["Authorization"] == "Bearer second"


async def test_a_rotated_ca_file_and_a_bad_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The upstream moves to a certificate of another CA: with the old CA file new connections
    fail; once the file holds the new CA, they succeed, without a restart. A garbage CA file
    keeps the last good TLS settings."""
    with FakeGoAdapter(_values()) as fake:
        cluster = _cluster()
        ca_file = tmp_path / "ca.pem"
        settings = {"url": fake.url, "caFile": fake.write_ca(ca_file)}
        async with running(make_backend(settings, cluster=cluster)) as backend:
            request = custom_request(cluster, "pods", "http_requests", [("default", "web-0")])
            assert await backend.fetch(request)
            fake.down()
            fake.ca = trustme.CA()
            fake._cert = fake.ca.issue_cert("127.0.0.1")
            fake.up()
            with pytest.raises(BackendUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
                await backend.fetch(request)
            caplog.set_level(logging.ERROR, "custom_metrics_server.backends")
            ca_file.write_text("not a certificate")
            await asyncio.sleep(1.1)
            with pytest.raises(BackendUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
                await backend.fetch(request)
            assert any(
                "keeping the previous TLS settings" in r.getMessage() for r in caplog.records
            )
            fake.write_ca(tmp_path / "new.pem")
            (tmp_path / "new.pem").rename(ca_file)
            await asyncio.sleep(1.1)
            (sample,) = await backend.fetch(request)
            assert sample.value == Decimal("1.5")


async def test_tls_server_name(fake: FakeGoAdapter, tmp_path: Path) -> None:
    cluster = _cluster()
    good = make_backend(_settings(fake, tmp_path, tlsServerName="localhost"), cluster=cluster)
    async with running(good):
        assert await good.fetch(
            custom_request(cluster, "pods", "http_requests", [("default", "web-0")])
        )
    wrong = make_backend(
        _settings(fake, tmp_path, tlsServerName="elsewhere.example"), cluster=cluster
    )
    async with running(wrong, ready=False):
        await _eventually(lambda: "elsewhere.example" in wrong.ready().reason)


# -- the conformance kit ----------------------------------------------------------------------


async def test_the_passthrough_passes_the_conformance_kit(
    fake: FakeGoAdapter, tmp_path: Path
) -> None:
    cluster = _cluster()

    @contextlib.asynccontextmanager
    async def outage() -> AsyncIterator[None]:
        fake.down()
        try:
            yield
        finally:
            fake.up()

    backend = make_backend(_settings(fake, tmp_path), cluster=cluster)
    report = await check_backend(
        backend,
        objects={PODS: [("default", "web-0"), ("default", "web-1")]},
        cluster=cluster,
        expect_not_ready_before_start=True,
        outage=outage,
    )
    assert report.custom_metrics == 4
    assert report.external_metrics == 1
