"""The conformance kit: the built-in in-memory backends and the tutorial pass it; plugins that
break the contract fail it, each with the check that caught them."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Collection
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_metrics_server import sdk
from custom_metrics_server.backends.memory import load_fixture
from custom_metrics_server.plugins.builtin import DemoBackendSettings, demo
from custom_metrics_server.testing.kit import KitFailure, check_backend
from tests.conftest import CONTRACT_FIXTURE
from tests.fakes import plugins
from tests.sdk.tutorial import import_tutorial

PODS = sdk.GroupResource("", "pods")


async def test_the_fixture_backend_passes() -> None:
    cluster, backend = load_fixture(yaml.safe_load(CONTRACT_FIXTURE.read_text()), now=time.time())
    pods = cluster.list_objects(PODS, None, sdk.EVERYTHING)
    report = await check_backend(backend, cluster=cluster, objects={PODS: pods})
    assert report.ok
    assert report.custom_metrics > 0
    # The listings answer from memory: CPU time, which a busy machine does not stretch (the
    # kit's own 1 ms budget is a median of wall-clock calls). Re-reading the fixture or
    # rebuilding the listing per call would cost milliseconds a call.
    cpu = time.process_time()
    for _ in range(1000):
        backend.list_metrics()
        backend.list_external_metrics()
    assert (time.process_time() - cpu) / 1000 < 0.001


async def test_the_demo_backend_passes() -> None:
    context = sdk.BackendContext(
        name="demo",
        cluster=None,
        logger=None,
        timeout=10.0,
        base_dir=Path(),  # type: ignore[arg-type]
    )
    provision = demo(DemoBackendSettings(pods=12), context=context)
    assert provision.cluster is not None
    pods = provision.cluster.list_objects(PODS, "default", sdk.EVERYTHING)
    report = await check_backend(provision.backend, cluster=provision.cluster, objects={PODS: pods})
    assert [check.name for check in report.checks] == [
        "it is a backend",
        "start, and readiness moves to ready",
        "listings answer from memory",
        "absence is not an error",
        "answers keep the contract",
        "deadlines are honoured",
        "stop",
    ]


async def test_the_tutorial_passes(tmp_path: Path) -> None:
    module = import_tutorial(tmp_path)
    backend = module.make(module.Settings(queues={"emails": 3}, running={"default/web-0": 1}))
    report = await check_backend(backend, objects={PODS: [("default", "web-0")]})
    assert report.ok


async def test_an_instant_plugin_passes_with_an_outage_that_raises_sdk_errors() -> None:
    refusing = plugins.Refusing("refusing")

    @contextlib.asynccontextmanager
    async def outage() -> AsyncIterator[None]:
        yield

    report = await check_backend(refusing, outage=outage, objects={PODS: [("default", "web-0")]})
    assert "failures are SDK errors" in [c.name for c in report.checks]


def failed(report_error: pytest.ExceptionInfo[KitFailure]) -> dict[str, list[str]]:
    return {c.name: c.problems for c in report_error.value.report.checks if not c.ok}


async def test_a_slow_listing_fails() -> None:
    class Slow(plugins.Instant):
        def list_external_metrics(self) -> list[str]:
            time.sleep(0.002)
            return super().list_external_metrics()

    with pytest.raises(KitFailure) as caught:
        await check_backend(Slow(), listing_calls=5)
    (problem,) = failed(caught)["listings answer from memory"]
    assert problem.startswith("list_external_metrics() takes ")
    assert problem.endswith("(budget 1 ms): list from memory, refresh in the background")


async def test_answering_for_an_absent_object_fails() -> None:
    class Inventive(plugins.Instant):
        async def fetch(self, request: sdk.BackendRequest) -> list[sdk.Sample]:
            return [sdk.sample(request, ("other", "web-made-up"), 1)]

    with pytest.raises(KitFailure) as caught:
        await check_backend(Inventive(), objects={PODS: [("default", "web-0")]})
    problems = failed(caught)
    assert problems["absence is not an error"][0] == (
        "fetch(instant_pod) answered 1 samples for an absent object"
    )
    assert problems["absence is not an error"][1].endswith(
        "answered 1 samples for an unlisted metric"
    )
    assert problems["answers keep the contract"] == [
        "fetch(instant_pod) answered for other/web-made-up, which was not asked for"
    ]


async def test_ignoring_the_selector_fails() -> None:
    class Unselective(plugins.Instant):
        async def fetch_external(
            self, request: sdk.ExternalBackendRequest
        ) -> list[sdk.ExternalSample]:
            return [sdk.external_sample(request, 1, labels={"queue": q}) for q in ("a", "b")]

    with pytest.raises(KitFailure) as caught:
        await check_backend(Unselective())
    problems = failed(caught)
    assert problems["absence is not an error"][0].startswith(
        "fetch_external(instant_total) answered 2 series for a selector no series can match"
    )
    assert problems["answers keep the contract"] == [
        "fetch_external(instant_total) with selector queue=a answered a series labelled {'queue': 'b'}"
    ]


async def test_swallowing_the_cancellation_fails() -> None:
    class Stubborn(plugins.Instant):
        async def fetch(self, request: sdk.BackendRequest) -> list[sdk.Sample]:
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                return []
            return []

    with pytest.raises(KitFailure) as caught:
        await check_backend(Stubborn())
    assert failed(caught)["deadlines are honoured"] == [
        "fetch(instant_pod) swallowed its cancellation and returned a result"
    ]


async def test_a_hang_fails_with_the_call_named() -> None:
    with pytest.raises(KitFailure) as caught:
        await check_backend(plugins.Hanging(), fetch_timeout=0.2)
    assert (
        "fetch_external(hang_sync) did not answer within the kit's fetch_timeout"
        in failed(caught)["absence is not an error"]
    )


async def test_wrong_types_fail_as_contract_violations() -> None:
    with pytest.raises(KitFailure) as caught:
        await check_backend(plugins.WrongTypes("wrong"))
    problems = failed(caught)["answers keep the contract"]
    assert problems == [
        "fetch_external(wrong_total) raised ContractViolation (not an SDK error): returned a "
        "dict, not an ExternalSample"
    ]


async def test_a_plain_exception_during_an_outage_fails() -> None:
    class Fragile(plugins.Instant):
        down = False

        async def fetch_external(
            self, request: sdk.ExternalBackendRequest
        ) -> list[sdk.ExternalSample]:
            if self.down:
                raise ConnectionError("socket closed")
            return await super().fetch_external(request)

    fragile = Fragile()

    @contextlib.asynccontextmanager
    async def outage() -> AsyncIterator[None]:
        fragile.down = True
        yield
        fragile.down = False

    with pytest.raises(KitFailure) as caught:
        await check_backend(fragile, outage=outage)
    assert failed(caught)["failures are SDK errors"] == [
        "fetch_external(instant_total) during the outage raised ConnectionError (not an SDK "
        "error): socket closed"
    ]


async def test_readiness_must_move_from_not_ready_to_ready_when_asked() -> None:
    class AlwaysReady(plugins.Instant):
        def ready(self) -> sdk.Readiness:
            return sdk.Readiness(True)

        async def __aenter__(self) -> AlwaysReady:
            return self

        async def __aexit__(self, *exc: object) -> None:
            return None

    with pytest.raises(KitFailure) as caught:
        await check_backend(AlwaysReady(), expect_not_ready_before_start=True)
    assert failed(caught)["start, and readiness moves to ready"] == [
        "ready() said ready before the backend was started"
    ]


async def test_never_ready_fails_with_the_reason() -> None:
    class Waiting(plugins.Instant):
        def ready(self) -> sdk.Readiness:
            return sdk.Readiness(False, "waiting for the database")

    with pytest.raises(KitFailure) as caught:
        await check_backend(Waiting(), ready_within=0.1)
    assert failed(caught)["start, and readiness moves to ready"] == [
        "not ready after 0.1s: waiting for the database"
    ]


async def test_not_a_backend_stops_at_the_first_check() -> None:
    report = await check_backend(object(), strict=False)
    assert [c.name for c in report.checks] == ["it is a backend"]
    assert not report.ok
    assert "object is not a backend" in report.summary()


def test_the_summary_lists_each_check() -> None:
    async def run() -> Any:
        return await check_backend(plugins.WrongTypes("wrong"), strict=False)

    report = asyncio.run(run())
    lines = report.summary().splitlines()
    assert lines[0] == "ok   it is a backend"
    assert "FAIL answers keep the contract" in lines
    _ = Collection
