"""A PostgreSQL backend: external and custom metrics answered by SQL, through psycopg 3 (async).

* **Lifecycle.** `__aenter__` opens an `AsyncConnectionPool` without waiting for it (a database
  that is down at start-up is a backend that is not ready, not a server that does not start)
  and starts the readiness loop; `__aexit__` stops the loop and closes the pool.
* **Readiness** is the last `SELECT 1` the loop ran through the pool (every `healthInterval`),
  answered from memory. While it fails, `ready()` says why, the server answers this backend's
  metrics 503 naming it, and the loop keeps trying: when the database is back the pool
  reconnects and the backend is ready again by itself.
* **Queries** are the settings' SQL, run with named parameters (psycopg sends the values apart
  from the statement, so a value is never SQL), in one READ ONLY transaction per fetch whose
  `statement_timeout` is set with `set_config(..., true)` (transaction-local, so it holds behind
  a transaction-pooling PgBouncer too).
* **Errors.** Database unreachable, connection lost, no pooled connection in time:
  `sdk.BackendUnavailable` (503), and the backend is marked not ready until the loop sees the
  database again. The statement timeout (or any cancelled statement): `sdk.BackendTimeout` (504).
  A query the database refuses (a syntax error, a missing table or privilege) or that answers the
  wrong shape (a value that is not a number, more than `maxRows` rows): `sdk.BackendUnavailable`
  naming the metric and the SQLSTATE, with the database's message in the server log only.

The server's deadline cancels a fetch; psycopg then cancels the statement on the server and the
cancellation goes through.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from decimal import Decimal
from itertools import product
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import psycopg
from custom_metrics_server import sdk
from psycopg import AsyncConnection, AsyncCursor
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from cms_postgres.settings import CustomMetric, ExternalMetric, Settings

__all__ = ["PostgresBackend", "QueryError"]

#: `queue in (a,b,...)` runs the pinned query once per combination of values, at most this many.
MAX_PINNED: Final = 100
#: The pool gives up reconnecting after this many seconds of failures (and tries again at the
#: next fetch or readiness check), which bounds its backoff, and so the time to recover.
RECONNECT_TIMEOUT: Final = 10.0
#: Why a fetch or check got no pooled connection although the database answers a direct one.
_RECONNECTING: Final = (
    "database unavailable: it answers again, but the pool has not reconnected yet"
)
_POSITIVE: Final = frozenset({sdk.Operator.EQUALS, sdk.Operator.DOUBLE_EQUALS, sdk.Operator.IN})

Row = tuple[Any, ...]
#: One statement's answer: the pinned labels it ran with, its column names, its rows.
Answer = tuple[dict[str, str], list[str], list[Row]]


class QueryError(Exception):
    """A configured query could not answer (the database refused it, or its shape is wrong)."""


def _one_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def _number(value: object, metric: str) -> int | float | Decimal | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise QueryError(
            f"query of {metric} answered a {type(value).__name__} value: its last column must be "
            "a number"
        )
    return value


class PostgresBackend:
    """See the module. `name`, `timeout` (the fetch deadline), `base_dir` and `cluster` come
    from the server's `BackendContext` when the server makes it (`cms_postgres.factory`)."""

    def __init__(
        self,
        settings: Settings,
        *,
        name: str = "postgres",
        timeout: float = 10.0,
        base_dir: Path | None = None,
        cluster: sdk.ClusterView | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self.settings = settings
        self.name = name
        self.logger = logger or logging.getLogger(f"custom_metrics_server.backends.{name}")
        statement_timeout = settings.statement_timeout or 0.8 * timeout
        if statement_timeout >= timeout:
            raise ValueError(
                f"statementTimeout ({statement_timeout:g}s) must be below the backend's fetch "
                f"deadline ({timeout:g}s; the entry's timeout), or clients get the server's 504 "
                "before the database's"
            )
        self.statement_timeout_ms = max(1, round(statement_timeout * 1000))
        #: How long a fetch waits for a pooled connection (a 503 after it, before the deadline).
        self.acquire_timeout = min(settings.connect_timeout, timeout / 2)
        #: How long a fetch that got no connection tries one directly, to say why.
        self.probe_timeout = min(settings.connect_timeout, (timeout - self.acquire_timeout) / 2)
        base = base_dir or Path.cwd()
        self.password_file = (
            base / settings.password_file if settings.password_file is not None else None
        )
        if self.password_file is not None and not self.password_file.is_file():
            raise ValueError(f"settings.passwordFile: no such file: {self.password_file}")
        root_cert = base / settings.ssl_root_cert if settings.ssl_root_cert is not None else None
        self.conninfo = self._conninfo(settings, root_cert, name)
        self._external: dict[str, ExternalMetric] = {m.metric: m for m in settings.external}
        self._custom: dict[tuple[sdk.GroupResource, str], CustomMetric] = {}
        custom_list = []
        for metric in settings.custom:
            mapping = cluster.mapping(metric.resource) if cluster is not None else None
            if mapping is not None:
                resource = mapping.group_resource
                namespaced = mapping.namespaced if metric.namespaced is None else metric.namespaced
            else:
                resource = sdk.GroupResource.parse(metric.resource)
                namespaced = True if metric.namespaced is None else metric.namespaced
            self._custom[(resource, metric.metric)] = metric
            custom_list.append(sdk.MetricInfo(resource, namespaced, metric.metric))
        # Listings are these objects, unchanged for the backend's life: answered from memory.
        self._custom_listing: tuple[sdk.MetricInfo, ...] = tuple(custom_list)
        self._external_listing: tuple[str, ...] = tuple(self._external)
        self._pool: AsyncConnectionPool[AsyncConnection[Row]] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._stopping = False
        #: Pooled connections the fetches hold now: all of them busy is not an outage.
        self._in_use = 0
        self._readiness = sdk.Readiness(False, "not started")
        self._down_since: float | None = None

    @staticmethod
    def _conninfo(settings: Settings, root_cert: Path | None, name: str) -> str:
        """The libpq connection string: the DSN (or the parts), then what the settings set."""
        given = conninfo_to_dict(settings.dsn) if settings.dsn is not None else {}
        parts: dict[str, Any] = {
            "host": settings.host,
            "port": settings.port if settings.dsn is None else None,
            "dbname": settings.database,
            "user": settings.user,
            "connect_timeout": max(1, math.ceil(settings.connect_timeout)),
            "sslmode": settings.ssl_mode,
            "sslrootcert": str(root_cert) if root_cert is not None else None,
        }
        if "application_name" not in given:
            parts["application_name"] = f"custom-metrics-server/{name}"
        return make_conninfo(settings.dsn or "", **parts)  # None values are left out

    # -- listings (from memory) ---------------------------------------------------------------

    def list_metrics(self) -> Sequence[sdk.MetricInfo]:
        """The configured custom metrics."""
        return self._custom_listing

    def list_external_metrics(self) -> Sequence[str]:
        """The configured external metrics."""
        return self._external_listing

    def ready(self) -> sdk.Readiness:
        """The last readiness check's outcome."""
        return self._readiness

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._pool = AsyncConnectionPool(
            self.conninfo,
            kwargs=self._connect_kwargs,
            min_size=1,
            max_size=self.settings.pool_size,
            open=False,
            configure=self._configure,
            check=AsyncConnectionPool.check_connection,
            timeout=self.acquire_timeout,
            reconnect_timeout=RECONNECT_TIMEOUT,
            name=f"cms-{self.name}",
        )
        await self._pool.open(wait=False)
        self._stopping = False
        self._readiness = sdk.Readiness(False, "connecting to the database")
        self._watcher = asyncio.create_task(self._watch(), name=f"backend-{self.name}-readiness")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._watcher is not None:
            await self._stop_watcher(self._watcher)
            self._watcher = None
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        self._readiness = sdk.Readiness(False, "stopped")

    async def _stop_watcher(self, watcher: asyncio.Task[None]) -> None:
        # One cancel is not enough: on Python 3.11, `asyncio.wait_for` (which psycopg_pool uses
        # while a client waits for a connection) swallows a cancellation that arrives as the
        # connection is handed over, and the loop would go on forever (and this wait with it).
        # So the loop also stops on the flag, and the cancellation is repeated until it is done.
        self._stopping = True
        while not watcher.done():
            watcher.cancel()
            await asyncio.wait({watcher}, timeout=0.1)
        if not watcher.cancelled() and (err := watcher.exception()) is not None:
            self.logger.warning("backend %s: the readiness loop failed: %r", self.name, err)

    async def _connect_kwargs(self) -> dict[str, Any]:
        # Read at each new connection: a rotated Secret is used from the next connection on.
        if self.password_file is None:
            return {}
        password = await asyncio.to_thread(self.password_file.read_text)
        return {"password": password.strip()}

    async def _configure(self, connection: AsyncConnection[Row]) -> None:
        if self.settings.read_only:
            await connection.set_read_only(True)

    # -- readiness ----------------------------------------------------------------------------

    async def _watch(self) -> None:
        while not self._stopping:
            try:
                await self.check()
            except Exception as err:  # the loop must outlive any failure, or readiness sticks
                self.logger.warning(
                    "backend %s: the readiness check failed", self.name, exc_info=True
                )
                self._mark_down(f"readiness check failed: {_one_line(err)}")
            if self._stopping:
                break
            await asyncio.sleep(self.settings.health_interval)

    async def check(self) -> sdk.Readiness:
        """Run the readiness check now (`SELECT 1` through the pool) and return the outcome."""
        pool = self._pool
        if pool is None:
            return self._readiness
        try:
            async with pool.connection(timeout=self.acquire_timeout) as connection:
                await connection.execute("SELECT 1")
        except PoolTimeout:
            why = await self._why_unreachable(self.settings.connect_timeout + 1)
            if why is None and self._all_busy():
                self._mark_up(f"all {self.settings.pool_size} pooled connections are busy")
            else:
                self._mark_down(why or _RECONNECTING)
        except psycopg.Error as err:
            self._mark_down(_one_line(err))
        else:
            self._mark_up()
        return self._readiness

    async def _why_unreachable(self, within: float) -> str | None:
        """The pool only says it had no connection in time; one direct attempt says why (None:
        the database answers, so the pool is busy)."""
        try:
            async with asyncio.timeout(within):
                direct = await AsyncConnection.connect(
                    self.conninfo, **await self._connect_kwargs()
                )
        except TimeoutError:
            return f"database unreachable: no connection within {within:g}s"
        except Exception as err:
            return f"database unreachable: {_one_line(err)}"
        await direct.close()
        return None

    def _all_busy(self) -> bool:
        """The fetches hold every pooled connection (else a pool without a connection for us
        is one still reconnecting after an outage: its attempts back off, up to
        RECONNECT_TIMEOUT)."""
        return self._in_use >= self.settings.pool_size

    def _mark_down(self, reason: str) -> None:
        if self._readiness.ready or self._down_since is None:
            self.logger.warning("backend %s: not ready: %s", self.name, reason)
            self._down_since = time.monotonic()
        self._readiness = sdk.Readiness(False, reason)

    def _mark_up(self, degraded: str = "") -> None:
        if not self._readiness.ready and self._down_since is not None:
            self.logger.info(
                "backend %s: the database answers again (after %.1fs)",
                self.name,
                time.monotonic() - self._down_since,
            )
        if self._readiness != (state := sdk.Readiness(True, degraded)):
            self._readiness = state
        self._down_since = None

    # -- fetches ------------------------------------------------------------------------------

    async def fetch_external(self, request: sdk.ExternalBackendRequest) -> list[sdk.ExternalSample]:
        """The series of one configured external metric (see `ExternalMetric`)."""
        metric = self._external.get(request.metric)
        if metric is None:
            return []
        selector = request.metric_selector
        pins = _pinned(selector, metric.labels)
        statements: list[tuple[str, dict[str, Any], dict[str, str]]]
        if pins is not None and metric.query is not None:
            statements = [
                (metric.query, {"namespace": request.namespace, **pin}, pin) for pin in pins
            ]
        elif metric.query_all is not None:
            statements = [(metric.query_all, {"namespace": request.namespace}, {})]
        else:
            shown = ",".join(f"{label}=..." for label in metric.labels)
            raise sdk.BadRequest(
                f"external metric {metric.metric} needs a labelSelector that names one value of "
                f"each of its labels ({shown}): it has no query for every series"
            )
        if not statements:
            return []  # the selector pins no value (`queue in (a),queue in (b)`)
        answers = await self._run(metric.metric, statements)
        try:
            return self._series(request, metric, answers)
        except QueryError as err:
            self.logger.warning("backend %s: %s", self.name, err)
            raise sdk.BackendUnavailable(str(err)) from err

    @staticmethod
    def _series(
        request: sdk.ExternalBackendRequest, metric: ExternalMetric, answers: Sequence[Answer]
    ) -> list[sdk.ExternalSample]:
        selector = request.metric_selector
        series = []
        for pin, columns, rows in answers:
            for row in rows:
                value = _number(row[-1], metric.metric)
                if value is None:
                    continue
                labels = dict(pin)
                for column, label in zip(columns[:-1], row[:-1], strict=True):
                    if label is not None:
                        labels[column] = str(label)
                if selector.matches(labels):
                    series.append(sdk.external_sample(request, value, labels=labels))
        return series

    async def fetch(self, request: sdk.BackendRequest) -> list[sdk.Sample]:
        """The values of one configured custom metric for the requested objects."""
        metric = self._custom.get((request.metric.group_resource, request.metric.metric))
        if metric is None or not request.metric_selector.matches({}):
            return []  # not ours; or a metricLabelSelector our label-less values cannot match
        by_namespace: dict[str, list[str]] = {}
        for namespace, name in request.objects:
            by_namespace.setdefault(namespace, []).append(name)
        statements = [
            (metric.query, {"namespace": namespace, "names": names}, {"namespace": namespace})
            for namespace, names in by_namespace.items()
        ]
        if not statements:
            return []
        answers = await self._run(metric.metric, statements)
        try:
            values = self._values(metric, by_namespace, answers)
        except QueryError as err:
            self.logger.warning("backend %s: %s", self.name, err)
            raise sdk.BackendUnavailable(str(err)) from err
        return [sdk.sample(request, key, values[key]) for key in request.objects if key in values]

    @staticmethod
    def _values(
        metric: CustomMetric, by_namespace: Mapping[str, list[str]], answers: Sequence[Answer]
    ) -> dict[sdk.ObjectKey, int | float | Decimal]:
        values: dict[sdk.ObjectKey, int | float | Decimal] = {}
        for pin, columns, rows in answers:
            if len(columns) < 2:
                raise QueryError(
                    f"query of {metric.metric} answers {len(columns)} column: it must answer the "
                    "object's name first and the value last"
                )
            namespace = pin["namespace"]
            asked = set(by_namespace[namespace])
            for row in rows:
                name = row[0]
                if name not in asked:
                    continue  # a row for an object not asked: not ours to answer
                value = _number(row[-1], metric.metric)
                if value is None:
                    continue
                if (namespace, name) in values:
                    raise QueryError(f"query of {metric.metric} answered {name} twice")
                values[(namespace, name)] = value
        return values

    async def _run(
        self, metric: str, statements: Iterable[tuple[str, Mapping[str, Any], dict[str, str]]]
    ) -> list[Answer]:
        """Run the statements in one READ ONLY transaction; SDK errors for every failure."""
        pool = self._pool
        if pool is None:
            raise sdk.BackendUnavailable("the backend is not started")
        if not self._readiness.ready and self._down_since is not None:
            # Known down: fail at once; the readiness loop notices the database's return.
            raise sdk.BackendUnavailable(f"database unavailable: {self._readiness.reason}")
        try:
            async with (
                pool.connection(timeout=self.acquire_timeout) as connection,
                self._holding(),
                connection.cursor() as cursor,
            ):
                await cursor.execute(
                    "SELECT set_config('statement_timeout', %(timeout)s, true)",
                    {"timeout": f"{self.statement_timeout_ms}ms"},
                )
                answers = [
                    (pin, *await self._rows(cursor, metric, sql, parameters))
                    for sql, parameters, pin in statements
                ]
        except psycopg.errors.QueryCanceled as err:
            raise sdk.BackendTimeout(
                f"the query of {metric} ran past the statement timeout "
                f"({self.statement_timeout_ms} ms)"
            ) from err
        except PoolTimeout as err:
            why = await self._why_unreachable(self.probe_timeout)
            if why is None and self._all_busy():
                raise sdk.BackendUnavailable(
                    f"all {self.settings.pool_size} pooled connections stayed busy for "
                    f"{self.acquire_timeout:g}s (poolSize)"
                ) from err
            self._mark_down(why or _RECONNECTING)
            raise sdk.BackendUnavailable(why or _RECONNECTING) from err
        except (psycopg.OperationalError, psycopg.InterfaceError) as err:
            # Connection refused or lost, the server shutting down, too many connections.
            self._mark_down(f"database unavailable: {_one_line(err)}")
            raise sdk.BackendUnavailable(f"database unavailable: {_one_line(err)}") from err
        except psycopg.Error as err:
            state = err.sqlstate or "no SQLSTATE"
            self.logger.warning("backend %s: the query of %s failed: %s", self.name, metric, err)
            raise sdk.BackendUnavailable(
                f"the query of {metric} failed in the database: {type(err).__name__} "
                f"(SQLSTATE {state}); the server log has the database's message"
            ) from err
        except QueryError as err:
            self.logger.warning("backend %s: %s", self.name, err)
            raise sdk.BackendUnavailable(str(err)) from err
        self._mark_up()
        return answers

    @contextlib.asynccontextmanager
    async def _holding(self) -> AsyncIterator[None]:
        self._in_use += 1
        try:
            yield
        finally:
            self._in_use -= 1

    async def _rows(
        self, cursor: AsyncCursor[Row], metric: str, sql: str, parameters: Mapping[str, Any]
    ) -> tuple[list[str], list[Row]]:
        # The parameters go to the server apart from the statement (never formatted into it).
        await cursor.execute(sql, parameters)
        if cursor.description is None:
            raise QueryError(f"query of {metric} answers no rows (is it a SELECT?)")
        columns = [column.name for column in cursor.description]
        if not columns:
            raise QueryError(f"query of {metric} answers no column")
        limit = self.settings.max_rows
        rows = await cursor.fetchmany(limit + 1)
        if len(rows) > limit:
            raise QueryError(f"query of {metric} answered more than maxRows ({limit}) rows")
        return columns, rows


def _pinned(selector: sdk.Selector, labels: Sequence[str]) -> list[dict[str, str]] | None:
    """The label values the selector pins, one mapping per combination, or None when some
    label is not pinned (then `queryAll` answers). An impossible selector pins nothing ([])."""
    allowed: dict[str, frozenset[str]] = {}
    for requirement in selector.requirements:
        if requirement.key in labels and requirement.operator in _POSITIVE:
            values = frozenset(requirement.values)
            allowed[requirement.key] = allowed.get(requirement.key, values) & values
    if any(label not in allowed for label in labels):
        return None
    choices = [sorted(allowed[label]) for label in labels]
    combinations = math.prod(len(choice) for choice in choices)
    if combinations > MAX_PINNED:
        raise sdk.BadRequest(
            f"the labelSelector names {combinations} combinations of {', '.join(labels)}; at "
            f"most {MAX_PINNED}"
        )
    return [dict(zip(labels, values, strict=True)) for values in product(*choices)]
