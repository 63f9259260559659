"""The example's database on a test server (pgserver.py): roles, schema.sql, rows, and the example
backends file's `jobs` entry pointed at it."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from custom_metrics_server import sdk
from pgserver import PostgresServer
from psycopg import sql

from cms_postgres import PostgresBackend, Settings

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent
SCHEMA = PACKAGE / "schema.sql"
EXAMPLE = PACKAGE / "backends.example.yaml"
DATABASE = "jobs"

#: (queue, state, namespace, owner, how many)
ROWS = [
    ("emails", "pending", "default", "web", 3),
    ("emails", "running", "default", "web", 1),
    ("reports", "pending", "default", "worker", 2),
    ("images", "done", "default", "worker", 1),
    ("emails", "pending", "other", "web", 1),
]


@dataclass
class JobsDatabase:
    """The example's database on a test server: its roles and their passwords."""

    server: PostgresServer
    reader_password: str
    owner_password: str

    def connect(self) -> Any:
        """An autocommit admin connection to the jobs database."""
        return self.server.connect(DATABASE)

    def load(self, rows: list[tuple[str, str, str, str, int]] = ROWS) -> None:
        """Replace the jobs with `rows`."""
        with self.connect() as connection:
            connection.execute("TRUNCATE jobs")
            with connection.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO jobs (queue, state, namespace, owner) "
                    "SELECT %s, %s, %s, %s FROM generate_series(1, %s)",
                    rows,
                )

    def count(self) -> int:
        """Rows in the jobs table (raises if the table is gone)."""
        with self.connect() as connection:
            row = connection.execute("SELECT count(*) FROM jobs").fetchone()
            assert row is not None
            return int(row[0])

    def settings(
        self, tmp_path: Path, *, user: str = "metrics_reader", **overrides: Any
    ) -> dict[str, Any]:
        """The example file's `jobs` settings, connected to this server as `user`."""
        password = self.owner_password if user == "jobs_owner" else self.reader_password
        password_file = tmp_path / f"{user}-password"
        password_file.write_text(password + "\n")
        settings = dict(example_entry()["settings"])
        for key in ("sslMode", "sslRootCert"):
            settings.pop(key)
        settings.update(
            host="127.0.0.1",
            port=self.server.port,
            user=user,
            passwordFile=str(password_file),
            connectTimeout="2s",
            healthInterval="200ms",
        )
        settings.update(overrides)
        return settings


def example_entry() -> dict[str, Any]:
    """The `jobs` entry of backends.example.yaml."""
    document = yaml.safe_load(EXAMPLE.read_text())
    entry: dict[str, Any] = document["backends"][0]
    return entry


def prepare(server: PostgresServer) -> JobsDatabase:
    """Create the roles, the database and the schema (schema.sql) on `server`."""
    database = JobsDatabase(server, secrets.token_urlsafe(12), secrets.token_urlsafe(12))
    with server.connect() as admin:
        for role, password in (
            ("jobs_owner", database.owner_password),
            ("metrics_reader", database.reader_password),
        ):
            admin.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(role), sql.Literal(password)
                )
            )
        admin.execute(f"CREATE DATABASE {DATABASE} OWNER jobs_owner")
    with server.connect(DATABASE, user="jobs_owner", password=database.owner_password) as owner:
        owner.execute(SCHEMA.read_text())
        owner.execute("GRANT SELECT ON jobs TO metrics_reader")
    database.load()
    return database


# -- asking the backend in process ------------------------------------------------------------

DEPLOYMENTS = sdk.ResourceMapping(
    sdk.GroupResource("apps", "deployments"), "v1", "Deployment", True
)


def custom_request(
    metric: str, *objects: tuple[str, str], selector: sdk.Selector = sdk.EVERYTHING
) -> sdk.BackendRequest:
    """A custom-metric request for Deployments, as the server makes it (concrete names)."""
    return sdk.BackendRequest(
        metric=sdk.MetricInfo(DEPLOYMENTS.group_resource, True, metric),
        mapping=DEPLOYMENTS,
        objects=objects,
        metric_selector=selector,
    )


def external_request(
    metric: str, selector: str | sdk.Selector = "", namespace: str = "default"
) -> sdk.ExternalBackendRequest:
    """An external-metric request, as the server makes it."""
    parsed = sdk.parse_selector(selector) if isinstance(selector, str) else selector
    return sdk.ExternalBackendRequest(metric=metric, namespace=namespace, metric_selector=parsed)


def series(samples: Iterable[sdk.ExternalSample]) -> dict[str, object]:
    """{queue label (or ''): value} of an external answer."""
    return {sample.labels.get("queue", ""): sample.value for sample in samples}


def values(samples: Iterable[sdk.Sample]) -> list[tuple[str, str, object]]:
    """[(namespace, name, value)] of a custom answer, in its order."""
    return [(s.described.namespace, s.described.name, s.value) for s in samples]


def backend_for(settings: dict[str, Any], *, timeout: float = 5.0) -> PostgresBackend:
    """The backend of these settings, made as the server makes it (the factory, validated)."""
    return PostgresBackend(Settings.model_validate(settings), name="jobs", timeout=timeout)


async def wait_for(backend: PostgresBackend, ready: bool = True, within: float = 20.0) -> None:
    """Until `backend.ready().ready == ready`; AssertionError with the reason after `within`."""
    deadline = time.monotonic() + within
    while backend.ready().ready != ready:
        if time.monotonic() > deadline:
            raise AssertionError(f"ready() is still {backend.ready()} after {within:g}s")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def running(backend: PostgresBackend) -> AsyncIterator[PostgresBackend]:
    """Started and ready inside the block, stopped after it."""
    async with backend:
        await wait_for(backend)
        yield backend
