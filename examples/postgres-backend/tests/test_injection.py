"""Values are parameters, never SQL: a hostile label value, object name or namespace reaches the
database as data. The backend connects as the table's owner with `readOnly: false`, so nothing
but the parameterisation stands between the value and a DROP TABLE; a control shows the same
value, formatted into the statement, does drop the table."""

from __future__ import annotations

import secrets
from pathlib import Path

import psycopg
from custom_metrics_server import sdk
from jobsdb import (
    SCHEMA,
    JobsDatabase,
    backend_for,
    custom_request,
    external_request,
    running,
    series,
)

HOSTILE = "x'; DROP TABLE jobs; --"


def _exists(connection: psycopg.Connection[tuple[object, ...]]) -> bool:
    row = connection.execute("SELECT to_regclass('jobs') IS NOT NULL").fetchone()
    assert row is not None
    return bool(row[0])


def test_control_the_hostile_value_formatted_into_sql_drops_the_table(jobs: JobsDatabase) -> None:
    scratch = f"canary_{secrets.token_hex(4)}"
    server = jobs.server
    with server.connect() as admin:
        admin.execute(f"CREATE DATABASE {scratch} OWNER jobs_owner")
    try:
        with server.connect(scratch, user="jobs_owner", password=jobs.owner_password) as owner:
            owner.execute(SCHEMA.read_text())
            assert _exists(owner)
            # What a backend that formats values would run (the simple query protocol runs
            # every statement of the text).
            owner.execute(f"SELECT count(*) FROM jobs WHERE queue = '{HOSTILE}'")
            assert not _exists(owner)
    finally:
        with server.connect() as admin:
            admin.execute(f"DROP DATABASE {scratch}")


def _hostile_selector(operator: sdk.Operator) -> sdk.Selector:
    # Built directly: the server's selector parser would refuse the value before any backend.
    return sdk.Selector((sdk.Requirement("queue", operator, (HOSTILE,)),))


async def test_a_hostile_label_value_is_data(jobs: JobsDatabase, tmp_path: Path) -> None:
    settings = jobs.settings(tmp_path, user="jobs_owner", readOnly=False)
    async with running(backend_for(settings)) as backend:
        pinned = await backend.fetch_external(
            external_request("jobs_pending", _hostile_selector(sdk.Operator.EQUALS))
        )
        # The pinned count ran with the value as a parameter: no queue has that name.
        assert series(pinned) == {HOSTILE: 0}
        in_set = await backend.fetch_external(
            external_request("jobs_pending", _hostile_selector(sdk.Operator.IN))
        )
        assert series(in_set) == {HOSTILE: 0}
        # A form that runs queryAll compares the value in Python: every real queue differs.
        others = await backend.fetch_external(
            external_request("jobs_pending", _hostile_selector(sdk.Operator.NOT_EQUALS))
        )
        assert series(others) == {"emails": 4, "reports": 2}
        in_namespace = await backend.fetch_external(
            external_request("jobs_pending_here", namespace=HOSTILE)
        )
        assert in_namespace == []
    assert jobs.count() == 8


async def test_hostile_object_names_and_namespace_are_data(
    jobs: JobsDatabase, tmp_path: Path
) -> None:
    settings = jobs.settings(tmp_path, user="jobs_owner", readOnly=False)
    async with running(backend_for(settings)) as backend:
        names = await backend.fetch(custom_request("jobs_pending", ("default", HOSTILE)))
        assert names == []
        namespace = await backend.fetch(custom_request("jobs_pending", (HOSTILE, "web")))
        assert namespace == []
        # Still answering, from the same table.
        assert [
            s.value for s in await backend.fetch(custom_request("jobs_pending", ("default", "web")))
        ] == [3]
    assert jobs.count() == 8
