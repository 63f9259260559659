"""The server's conformance kit (`custom_metrics_server.testing.kit.check_backend`) against the
plugin in process, with a real PostgreSQL and a real outage."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from custom_metrics_server import sdk
from custom_metrics_server.testing.kit import check_backend
from jobsdb import JobsDatabase, backend_for

from cms_postgres import factory

DEPLOYMENTS = sdk.GroupResource("apps", "deployments")


async def test_the_plugin_passes_the_conformance_kit(
    private_jobs: JobsDatabase, tmp_path: Path
) -> None:
    server = private_jobs.server

    @contextlib.asynccontextmanager
    async def outage() -> AsyncIterator[None]:
        await asyncio.to_thread(server.stop)
        try:
            yield
        finally:
            await asyncio.to_thread(server.start)

    settings = factory.settings_model.model_validate(private_jobs.settings(tmp_path))  # type: ignore[attr-defined]
    report = await check_backend(
        factory(settings),
        objects={DEPLOYMENTS: [("default", "web"), ("default", "worker"), ("other", "web")]},
        expect_not_ready_before_start=True,
        outage=outage,
        # jobs_pending_or_zero answers 0 for any Deployment asked (its unnest form).
        absent_as_zero=["jobs_pending_or_zero"],
    )
    assert report.ok, report.summary()
    assert (report.custom_metrics, report.external_metrics) == (2, 2)
    assert {check.name for check in report.checks} >= {
        "start, and readiness moves to ready",
        "listings answer from memory",
        "absence is not an error",
        "answers keep the contract",
        "deadlines are honoured",
        "failures are SDK errors",
    }


async def test_the_kit_fails_a_backend_that_answers_zero_for_absent_objects_undeclared(
    jobs: JobsDatabase, tmp_path: Path
) -> None:
    # The kit is not a rubber stamp here: without absent_as_zero, the unnest form's 0 for a
    # Deployment that does not exist is reported.
    report = await check_backend(
        backend_for(jobs.settings(tmp_path)),
        objects={DEPLOYMENTS: [("default", "web")]},
        strict=False,
    )
    assert not report.ok
    (failed,) = [check for check in report.checks if not check.ok]
    assert failed.name == "absence is not an error"
    assert failed.problems == [
        "fetch(jobs_pending_or_zero) answered 1 samples for an absent object"
    ]
