"""The settings of a `postgres` backend entry, validated when the server loads the backends file.

    backends:
      - name: jobs
        type: postgres
        settings:
          host: db.jobs.svc
          database: jobs
          user: metrics_reader
          passwordFile: /var/run/secrets/jobs-db/password
          statementTimeout: 2s
          external:
            - metric: jobs_pending
              labels: [queue]
              query: SELECT count(*) FROM jobs WHERE state = 'pending' AND queue = %(queue)s
              queryAll: SELECT queue, count(*) FROM jobs WHERE state = 'pending' GROUP BY queue
          custom:
            - metric: jobs_pending
              resource: deployments.apps
              query: |
                SELECT owner, count(*) FROM jobs
                WHERE state = 'pending' AND namespace = %(namespace)s AND owner = ANY(%(names)s)
                GROUP BY owner

The server reports every problem at once, each naming the backend and the field
(`backends[1] 'jobs' (type postgres): settings.external[0].query: unknown parameter
%(queu)s; this query has: namespace, queue`).

Queries take **named parameters only** (`%(name)s`), which psycopg sends to the server apart from
the SQL text: a value is never part of the statement. A literal `%` is written `%%`.

PURE: no I/O (the password file is read by the backend, at each new connection).
"""

from __future__ import annotations

import re
from collections.abc import Set
from pathlib import Path
from typing import Annotated, Final, Literal

from psycopg.conninfo import conninfo_to_dict
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

__all__ = [
    "CustomMetric",
    "ExternalMetric",
    "Settings",
    "parse_duration",
    "placeholders",
]

_DURATION: Final = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*(ms|s|m)?\s*")
_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}


def parse_duration(value: object) -> object:
    """`500ms`, `2s`, `1.5m` or a number of seconds -> seconds (a float, > 0)."""
    if isinstance(value, bool):
        raise ValueError("a duration, not a boolean (examples: 500ms, 2s, 1m)")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (found := _DURATION.fullmatch(value)):
        seconds = float(found.group(1)) * _UNITS[found.group(2)]
    else:
        raise ValueError(f"invalid duration {value!r} (examples: 500ms, 2s, 1m)")
    if not seconds > 0:
        raise ValueError(f"a duration must be positive, not {value!r}")
    return seconds


#: Seconds: `500ms`, `2s`, `1m`, or a number of seconds.
Duration = Annotated[float, BeforeValidator(parse_duration)]

# psycopg's own placeholder grammar (psycopg/_queries.py): `%%` is a literal percent sign,
# `%(name)s` (or `b`, `t`) a named parameter, `%s` a positional one, anything else an error.
_PLACEHOLDER: Final = re.compile(r"%(?:\((?P<name>[^)]+)\)(?P<named>.)|(?P<positional>.)|$)", re.S)
_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
#: A metric name as the APIs carry it in a path segment: no `/`, no `%`, no spaces.
_METRIC: Final = re.compile(r"[A-Za-z_:][A-Za-z0-9_:.\-]{0,252}")


def placeholders(sql: str) -> set[str]:
    """The named parameters of `sql`; ValueError for a positional or malformed placeholder."""
    names = set()
    for found in _PLACEHOLDER.finditer(sql):
        name, named, positional = found.group("name", "named", "positional")
        if name is not None:
            if named not in "sbt":
                raise ValueError(
                    f"placeholder %({name}){named}: only %({name})s, %({name})b, %({name})t"
                )
            names.add(name)
        elif positional == "%":
            continue
        elif positional in ("s", "b", "t"):
            raise ValueError(
                f"positional placeholder %{positional}: use named parameters, %(name)s"
            )
        else:
            shown = "%" + (positional or "")
            raise ValueError(f"{shown!r} is not a placeholder: a literal percent sign is %%")
    return names


def _check_parameters(sql: str, allowed: set[str], *, required: Set[str] = frozenset()) -> None:
    used = placeholders(sql)
    unknown = sorted(used - allowed)
    if unknown:
        known = ", ".join(sorted(allowed)) or "none"
        shown = ", ".join(f"%({name})s" for name in unknown)
        raise ValueError(f"unknown parameter {shown}; this query has: {known}")
    missing = sorted(required - used)
    if missing:
        shown = ", ".join(f"%({name})s" for name in missing)
        raise ValueError(f"the query must use {shown}: a pinned label must filter the rows")


def _sql(text: str) -> str:
    if not text.strip():
        raise ValueError("empty query")
    placeholders(text)
    return text


Sql = Annotated[str, AfterValidator(_sql)]


def _metric_name(text: str) -> str:
    if not _METRIC.fullmatch(text):
        raise ValueError(
            f"invalid metric name {text!r}: letters, digits, _ : . - (no /, no spaces)"
        )
    return text


MetricName = Annotated[str, AfterValidator(_metric_name)]


def _label(text: str) -> str:
    if not _IDENTIFIER.fullmatch(text):
        raise ValueError(
            f"invalid label {text!r}: a label here is also a query parameter and a column, "
            "so letters, digits and _ (not starting with a digit), at most 63"
        )
    return text


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )


class ExternalMetric(_Model):
    """An external metric answered by SQL.

    `query` answers when the request's labelSelector pins every label of `labels` (`queue=emails`,
    `queue in (emails)`; `queue in (emails,reports)` runs it once per value): its parameters are
    those labels and `namespace` (the HPA's namespace), and each row is one series labelled with
    the pinned values. `queryAll` answers otherwise (no selector, `queue!=emails`, ...): its only
    parameter is `namespace`. In both, the last column is the value and the columns before it are
    the series' labels, by column name; a NULL value is no series. The series are then matched
    against the whole selector, so every selector form is honoured whichever query ran.
    """

    metric: MetricName
    labels: list[Annotated[str, AfterValidator(_label)]] = Field(default_factory=list)
    query: Sql | None = None
    query_all: Sql | None = None

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: list[str]) -> list[str]:
        if len(set(labels)) != len(labels):
            raise ValueError("a label is listed twice")
        if "namespace" in labels:
            raise ValueError("namespace is the request's namespace parameter, not a label")
        return labels

    @field_validator("query")
    @classmethod
    def _query(cls, query: str | None, info: ValidationInfo) -> str | None:
        if query is not None:
            labels = set(info.data.get("labels", ()))
            _check_parameters(query, {"namespace", *labels}, required=labels)
        return query

    @field_validator("query_all")
    @classmethod
    def _query_all(cls, query: str | None) -> str | None:
        if query is not None:
            _check_parameters(query, {"namespace"})
        return query

    @model_validator(mode="after")
    def _queries(self) -> ExternalMetric:
        if self.query is None and self.query_all is None:
            raise ValueError("give query (the selector pins the labels) or queryAll, or both")
        if self.labels and self.query is None:
            raise ValueError("labels are the parameters of query, which is missing")
        return self


class CustomMetric(_Model):
    """A metric of Kubernetes objects answered by SQL.

    `query` runs with `%(namespace)s` (text; `''` for cluster-scoped resources) and `%(names)s`
    (a text array: the names of the requested objects in that namespace, already resolved by the
    server from `*` and the labelSelector), once per namespace of the request. Its first column is
    the object's name, its last the value; rows for names not asked are ignored, a name without a
    row (or with a NULL value) has no value.
    """

    metric: MetricName
    #: As in request paths: `pods`, `deployments.apps`, `jobs.batch`.
    resource: str = Field(min_length=1)
    #: Whether the resource is namespaced; default: as the cluster view says, else true.
    namespaced: bool | None = None
    query: Sql

    @field_validator("query")
    @classmethod
    def _query(cls, query: str) -> str:
        _check_parameters(query, {"namespace", "names"})
        return query


class Settings(_Model):
    """A `postgres` entry's `settings:` (camelCase in the file)."""

    #: A libpq connection string or URI, without a password (use `passwordFile`). Or the parts:
    dsn: str | None = None
    host: str | None = None
    port: int = Field(default=5432, ge=1, le=65535)
    database: str | None = None
    user: str | None = None
    #: A file holding the password (a mounted Secret), read at each new connection, so a
    #: rotated password is used from the next connection on. Relative to the backends file.
    password_file: Path | None = None
    ssl_mode: (
        Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] | None
    ) = None
    #: CA bundle for `sslMode: verify-ca|verify-full`. Relative to the backends file.
    ssl_root_cert: Path | None = None
    #: Connections kept open at most (one per fetch in flight).
    pool_size: int = Field(default=4, ge=1, le=100)
    #: Waiting for a TCP connection and for a free pooled connection, at most.
    connect_timeout: Duration = 5.0
    #: A statement running longer is cancelled by PostgreSQL: 504. Default: 80 % of the
    #: backend's fetch deadline; it must be below that deadline.
    statement_timeout: Duration | None = None
    #: How often readiness runs `SELECT 1` through the pool.
    health_interval: Duration = 5.0
    #: Transactions are READ ONLY (defence in depth; grant the user SELECT only, too).
    read_only: bool = True
    #: Rows one query may answer; more is a 503 naming the metric (the server bounds series too).
    max_rows: int = Field(default=10_000, ge=1)
    external: list[ExternalMetric] = Field(default_factory=list)
    custom: list[CustomMetric] = Field(default_factory=list)

    @field_validator("dsn")
    @classmethod
    def _dsn(cls, dsn: str | None) -> str | None:
        if dsn is not None:
            try:
                fields = conninfo_to_dict(dsn)
            except Exception as err:
                raise ValueError(f"not a libpq connection string: {err}") from None
            if fields.get("password"):
                raise ValueError(
                    "it carries a password: put the password in a file (a mounted Secret) and "
                    "name it with passwordFile"
                )
        return dsn

    @model_validator(mode="after")
    def _connection(self) -> Settings:
        parts = {"host": self.host, "database": self.database, "user": self.user}
        if self.dsn is not None:
            given = sorted(to_camel(k) for k, v in parts.items() if v is not None)
            if given:
                raise ValueError(
                    f"give dsn or its parts, not both (also given: {', '.join(given)})"
                )
        elif self.host is None:
            raise ValueError("give dsn, or host (with database and user)")
        return self

    @field_validator("external")
    @classmethod
    def _external(cls, metrics: list[ExternalMetric]) -> list[ExternalMetric]:
        names = [m.metric for m in metrics]
        if len(set(names)) != len(names):
            raise ValueError("a metric is listed twice")
        return metrics

    @field_validator("custom")
    @classmethod
    def _custom(cls, metrics: list[CustomMetric]) -> list[CustomMetric]:
        keys = [(m.resource, m.metric) for m in metrics]
        if len(set(keys)) != len(keys):
            raise ValueError("a metric of one resource is listed twice")
        return metrics

    @model_validator(mode="after")
    def _metrics(self) -> Settings:
        if not self.external and not self.custom:
            raise ValueError("no metrics: list some under external or custom")
        return self
