"""Fixtures: a real PostgreSQL server (pgserver.py) and the example's database on it (jobsdb.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from jobsdb import JobsDatabase, prepare
from pgserver import PostgresServer


@pytest.fixture(scope="session")
def shared_server() -> Iterator[PostgresServer]:
    """One server for the tests that do not stop it."""
    server = PostgresServer.create()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def shared_database(shared_server: PostgresServer) -> JobsDatabase:
    """The example's database on the shared server."""
    return prepare(shared_server)


@pytest.fixture
def jobs(shared_database: JobsDatabase) -> JobsDatabase:
    """The shared database with the standard rows (ROWS) loaded afresh."""
    shared_database.load()
    return shared_database


@pytest.fixture
def private_jobs() -> Iterator[JobsDatabase]:
    """A server of its own, for tests that stop and restart it."""
    server = PostgresServer.create()
    try:
        yield prepare(server)
    finally:
        server.close()
