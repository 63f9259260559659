"""The settings model: what it accepts, and errors that name the field (no database needed)."""

from __future__ import annotations

from typing import Any

import pytest
from jobsdb import example_entry
from pydantic import ValidationError

from cms_postgres.settings import Settings, parse_duration, placeholders

QUERY = "SELECT count(*) FROM jobs WHERE queue = %(queue)s"
BASE: dict[str, Any] = {
    "host": "db",
    "external": [{"metric": "jobs_pending", "labels": ["queue"], "query": QUERY}],
}


def problems(settings: dict[str, Any]) -> list[tuple[str, str]]:
    """(location as the file spells it, message) of every problem."""
    with pytest.raises(ValidationError) as raised:
        Settings.model_validate(settings)
    found = []
    for error in raised.value.errors():
        where = ".".join(str(part) for part in error["loc"])
        found.append((where, error["msg"].removeprefix("Value error, ")))
    return found


def test_the_example_file_is_valid() -> None:
    settings = Settings.model_validate(example_entry()["settings"])
    assert settings.statement_timeout == 2.0
    assert settings.ssl_mode == "verify-full"
    assert [m.metric for m in settings.external] == ["jobs_pending", "jobs_pending_here"]
    assert [(m.resource, m.metric) for m in settings.custom] == [
        ("deployments.apps", "jobs_pending"),
        ("deployments.apps", "jobs_pending_or_zero"),
    ]


def test_defaults() -> None:
    settings = Settings.model_validate(BASE)
    assert (settings.port, settings.pool_size, settings.read_only, settings.max_rows) == (
        5432,
        4,
        True,
        10_000,
    )
    assert (settings.connect_timeout, settings.health_interval) == (5.0, 5.0)
    assert settings.statement_timeout is None  # 80 % of the deadline, decided by the backend


@pytest.mark.parametrize(
    ("change", "where", "message"),
    [
        ({"poolSize": 0}, "poolSize", "greater than or equal to 1"),
        ({"port": 70000}, "port", "less than or equal to 65535"),
        ({"statementTimeout": "2x"}, "statementTimeout", "invalid duration '2x'"),
        ({"connectTimeout": "0s"}, "connectTimeout", "must be positive"),
        ({"healthInterval": True}, "healthInterval", "not a boolean"),
        ({"sslMode": "sometimes"}, "sslMode", "Input should be 'disable'"),
        ({"pasword_file": "x"}, "pasword_file", "Extra inputs are not permitted"),
        (
            {"host": None, "dsn": "postgresql://reader:secret@db/jobs"},
            "dsn",
            "it carries a password: put the password in a file",
        ),
        ({"host": None, "dsn": "host=db bogus=1"}, "dsn", "not a libpq connection string"),
        (
            {"dsn": "postgresql://reader@db/jobs"},
            "",
            "give dsn or its parts, not both (also given: host)",
        ),
        ({"host": None}, "", "give dsn, or host"),
        ({"external": []}, "", "no metrics: list some under external or custom"),
    ],
)
def test_errors_name_the_field(change: dict[str, Any], where: str, message: str) -> None:
    (problem,) = problems({**BASE, **change})
    assert problem[0] == where
    assert message in problem[1]


@pytest.mark.parametrize(
    ("metric", "where", "message"),
    [
        (
            {"metric": "m", "labels": ["queue"], "query": "SELECT %(queu)s"},
            "external.0.query",
            "unknown parameter %(queu)s; this query has: namespace, queue",
        ),
        (
            {"metric": "m", "labels": ["queue"], "query": "SELECT count(*) FROM jobs"},
            "external.0.query",
            "the query must use %(queue)s",
        ),
        (
            {"metric": "m", "queryAll": "SELECT count(*) FROM jobs WHERE queue = %s"},
            "external.0.queryAll",
            "positional placeholder %s: use named parameters",
        ),
        (
            {"metric": "m", "queryAll": "SELECT %(queue)s"},
            "external.0.queryAll",
            "unknown parameter %(queue)s; this query has: namespace",
        ),
        (
            {"metric": "m", "queryAll": "SELECT count(*) FROM jobs WHERE queue LIKE 'e%'"},
            "external.0.queryAll",
            '"%\'" is not a placeholder: a literal percent sign is %%',
        ),
        (
            {"metric": "m", "queryAll": "SELECT %(namespace)d"},
            "external.0.queryAll",
            "only %(namespace)s, %(namespace)b, %(namespace)t",
        ),
        ({"metric": "m", "queryAll": "  "}, "external.0.queryAll", "empty query"),
        ({"metric": "m"}, "external.0", "give query (the selector pins the labels) or queryAll"),
        (
            {"metric": "m", "labels": ["queue"], "queryAll": "SELECT 1"},
            "external.0",
            "labels are the parameters of query, which is missing",
        ),
        (
            {"metric": "m", "labels": ["queue", "queue"], "query": QUERY},
            "external.0.labels",
            "a label is listed twice",
        ),
        (
            {"metric": "m", "labels": ["app.kubernetes.io/name"], "queryAll": "SELECT 1"},
            "external.0.labels.0",
            "invalid label 'app.kubernetes.io/name'",
        ),
        ({"metric": "a/b", "queryAll": "SELECT 1"}, "external.0.metric", "invalid metric name"),
    ],
)
def test_query_errors_name_the_metric_and_the_query(
    metric: dict[str, Any], where: str, message: str
) -> None:
    found = problems({"host": "db", "external": [metric]})
    assert any(w == where and message in m for w, m in found), found


def test_custom_queries_have_namespace_and_names() -> None:
    ok = {
        "metric": "jobs_pending",
        "resource": "deployments.apps",
        "query": "SELECT owner, 1 FROM jobs WHERE namespace = %(namespace)s AND owner = ANY(%(names)s)",
    }
    assert Settings.model_validate({"host": "db", "custom": [ok]}).custom[0].namespaced is None
    bad = {**ok, "query": "SELECT owner, 1 FROM jobs WHERE queue = %(queue)s"}
    assert problems({"host": "db", "custom": [bad]}) == [
        ("custom.0.query", "unknown parameter %(queue)s; this query has: names, namespace")
    ]
    assert problems({"host": "db", "custom": [ok, ok]}) == [
        ("custom", "a metric of one resource is listed twice")
    ]


def test_every_problem_is_reported_at_once() -> None:
    found = problems(
        {
            "host": "db",
            "poolSize": -1,
            "statementTimeout": "soon",
            "external": [{"metric": "m", "queryAll": "SELECT %(x)s"}],
        }
    )
    assert [where for where, _ in found] == ["poolSize", "statementTimeout", "external.0.queryAll"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("500ms", 0.5), ("2s", 2.0), ("1.5m", 90.0), (" 3 ", 3.0), (2, 2.0), (0.25, 0.25)],
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_placeholders_follow_psycopg() -> None:
    assert placeholders("SELECT %(a)s, %(b)b, %(a)t, '100%%'") == {"a", "b"}
    assert placeholders("SELECT 1") == set()
    with pytest.raises(ValueError, match="a literal percent sign is %%"):
        placeholders("SELECT 5 %")
