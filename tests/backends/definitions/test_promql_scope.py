"""Confining a PromQL query to one namespace (backends/definitions/promql_scope.py): a table of
queries and what they become or why they are refused, each confined text read by a real
Prometheus's parser; and against real Prometheus servers, crafted queries of namespace `a`
that try to reach namespace `b`'s series."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import promql_parser
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custom_metrics_server.backends.definitions.promql_scope import (
    MAX_OPERATORS,
    MAX_QUERY_LENGTH,
    Confined,
    Refused,
    confine,
)
from tests.prometheus.real_prometheus import Gauge, RealPrometheus
from tests.tools import require

CONFINED = [
    ("up", 'up{namespace="a"}'),
    ('sum(queue{queue="orders"})', 'sum(queue{namespace="a",queue="orders"})'),
    ('foo{namespace="a"}', 'foo{namespace="a"}'),
    ('foo{namespace="a",namespace="a"}', 'foo{namespace="a"}'),
    ('{__name__=~".+"}', '{__name__=~".+",namespace="a"}'),
    ("rate(foo[5m])", 'rate(foo{namespace="a"}[5m])'),
    ("foo offset 5m", 'foo{namespace="a"} offset 5m'),
    ("foo @ 100 offset -1m", 'foo{namespace="a"} @ 100.000 offset -1m'),
    ("rate(foo[5m] offset 1m @ start())", 'rate(foo{namespace="a"}[5m] @ start() offset 1m)'),
    ("max_over_time(foo[10m:1m])", 'max_over_time(foo{namespace="a"}[10m:1m])'),
    (
        "max_over_time(rate(foo[1m])[10m:] @ end())",
        'max_over_time(rate(foo{namespace="a"}[1m])[10m:] @ end())',
    ),
    ("foo or bar", 'foo{namespace="a"} or bar{namespace="a"}'),
    ("foo unless on() bar", 'foo{namespace="a"} unless on () bar{namespace="a"}'),
    (
        "foo / on(pod) group_left(node) bar",
        'foo{namespace="a"} / on (pod) group_left (node) bar{namespace="a"}',
    ),
    ("sum by (namespace) (foo)", 'sum by (namespace) (foo{namespace="a"})'),
    ("topk(3, -foo)", 'topk(3, -foo{namespace="a"})'),
    ('count_values("v", foo)', 'count_values("v", foo{namespace="a"})'),
    (
        'label_replace(foo, "namespace", "b", "", "")',
        'label_replace(foo{namespace="a"}, "namespace", "b", "", "")',
    ),
    ('absent(nope{job="x"})', 'absent(nope{job="x",namespace="a"})'),
    ("(foo > bool 3)", '(foo{namespace="a"} > bool 3)'),
    ("vector(1) + time()", "vector(1) + time()"),
    ("scalar(foo) * 2", 'scalar(foo{namespace="a"}) * 2'),
    # A value that would break out of its quotes if it were written back unescaped.
    (
        r'foo{job="x\"} or vector(1) or foo{y=\""}',
        r'foo{job="x\"} or vector(1) or foo{y=\"",namespace="a"}',
    ),
    (r'foo{re=~"\\d+\\.x"}', r'foo{namespace="a",re=~"\\d+\\.x"}'),
    ("foo{job='single'}", 'foo{job="single",namespace="a"}'),
    # The printer writes a control character as it is (Prometheus reads it so too).
    (
        'foo{tab="\\t", nl="\\n", bell="\\u0007"}',
        'foo{bell="\x07",namespace="a",nl="\\n",tab="\\t"}',
    ),
]

REFUSED = [
    ('foo{namespace=~".*"}', 'namespace=~".*"'),
    ('foo{namespace=~"a"}', 'namespace=~"a"'),
    ('foo{namespace!="b"}', 'namespace!="b"'),
    ('foo{namespace!~"b"}', 'namespace!~"b"'),
    ('foo{namespace="b"}', 'namespace="b"'),
    ('foo{namespace=""}', 'namespace=""'),
    ('sum(rate(x[5m])) + on() bar{namespace=~"a|b"}', 'namespace=~"a|b"'),
    ('max_over_time(foo{namespace!=""}[5m:1m])', 'namespace!=""'),
    ('foo{x="y" or namespace="b"}', "'or' between matchers"),
    ("sum(", "does not parse"),
    ("foo{", "does not parse"),
    ("rate(foo)", "does not parse"),
    ("x" * (MAX_QUERY_LENGTH + 1), "over 4096"),
    ("-" * 4000 + "foo", "over 64"),
    ("a + " * 70 + "a", "over 64"),
]


@pytest.mark.parametrize(("query", "expected"), CONFINED)
def test_every_selector_gets_the_namespace(query: str, expected: str) -> None:
    confined = confine(query, "a")
    assert confined == Confined(expected, "a", 1000)


@pytest.mark.parametrize(("query", "because"), REFUSED)
def test_queries_that_cannot_be_confined_are_refused_with_a_reason(
    query: str, because: str
) -> None:
    refused = confine(query, "a")
    assert isinstance(refused, Refused)
    assert because in refused.reason


def test_another_label_name_and_bad_namespaces() -> None:
    assert confine("foo", "a", label="kubernetes_namespace") == Confined(
        'foo{kubernetes_namespace="a"}', "a", 1000
    )
    # The other label stays the author's to use (it means nothing to the platform here).
    assert isinstance(confine('foo{namespace="b"}', "a", label="k8s_ns"), Confined)
    for bad in ("", "A", 'a"} or foo{x="', "a" * 64):
        assert isinstance(confine("foo", bad), Refused)
    assert isinstance(confine("foo", "a", label="bad-label"), Refused)


def test_the_deepest_query_let_through_costs_a_bounded_cpu_time() -> None:
    """The binding's cost grows with the tree's depth cubed (minutes for a 4 KiB chain of
    unary minus); the operator cap keeps the worst admitted query near 0.15 s of CPU, and
    the bound here (5 s, CPU) sits far from both that and the defect."""
    worst = [
        "a + " * (MAX_OPERATORS - 1) + "a",
        "abs(" * (MAX_OPERATORS - 1) + "a" + ")" * (MAX_OPERATORS - 1),
        "-" * MAX_OPERATORS + "a",
    ]
    for query in worst:
        started = time.process_time()
        assert isinstance(confine(query, "a"), Confined)
        assert time.process_time() - started < 5.0


def test_the_series_cap_is_the_caller_s_to_apply() -> None:
    confined = confine("foo", "a", max_series=2)
    assert isinstance(confined, Confined)
    assert confined.series_refusal(2) is None
    reason = confined.series_refusal(3)
    assert reason is not None
    assert "3 series" in reason
    assert "limit of 2" in reason


TOKENS = [
    "foo", "bar", "{", "}", "namespace", "job", "__name__", "=", "=~", "!=", "!~", '"a"', '"b"',
    '".*"', '"a\\"b"', "(", ")", "[5m]", "[5m:1m]", "[5m:]", "sum", "rate", "by", "(namespace)",
    "or", "unless", "and", "on()", "group_left", "+", "-", "/", ">", "bool", "offset 1m",
    "@ end()", "@ 100", ",", "label_replace", "vector(1)", "1", "topk", "absent", "max_over_time",
]  # fmt: skip


def _confined_independently(text: str, namespace: str) -> bool:
    """Every vector selector of `text` has exactly one namespace matcher, `="<namespace>"`."""
    ok = True

    def visit(node: promql_parser.Expr) -> None:
        nonlocal ok
        if isinstance(node, promql_parser.VectorSelector):
            on_namespace = [
                (m.op, m.value) for m in node.matchers.matchers if m.name == "namespace"
            ]
            ok = ok and on_namespace == [(promql_parser.MatchOp.Equal, namespace)]

    promql_parser.walk(promql_parser.parse(text), visit)
    return ok


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=14).map(" ".join))
def test_any_query_is_confined_or_refused_never_an_exception(query: str) -> None:
    result = confine(query, "a")
    if isinstance(result, Confined):
        assert _confined_independently(result.query, "a")
    else:
        assert result.reason


_VALUES = st.sampled_from(["a", "b", "", ".*", 'x"} or vector(1) or y{z="', "a\\.b", "é\n"])
_MATCHERS = st.lists(
    st.tuples(
        st.sampled_from(["job", "pod", "namespace"]),
        st.sampled_from(["=", "!=", "=~", "!~"]),
        _VALUES,
    ),
    max_size=3,
)


def _matcher(name: str, op: str, value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'{name}{op}"{escaped}"'


_MODIFIERS = st.sampled_from(["", " offset 5m", " @ end()", " @ 100 offset -1m"])


@st.composite
def _selector(draw: st.DrawFn) -> tuple[str, bool]:
    """A selector's text (no modifiers), and whether it may be confined (no namespace matcher
    but ="a")."""
    name = draw(st.sampled_from(["foo", "bar_total", ""]))
    matchers = draw(_MATCHERS)
    if not name:
        matchers.append(("__name__", "=~", ".+"))
    text = name + "{" + ",".join(_matcher(*m) for m in matchers) + "}"
    return text, all(n != "namespace" or (op, v) == ("=", "a") for n, op, v in matchers)


def _queries() -> st.SearchStrategy[tuple[str, bool]]:
    def extend(
        inner: st.SearchStrategy[tuple[str, bool]],
    ) -> st.SearchStrategy[tuple[str, bool]]:
        pairs = st.tuples(inner, inner)
        return st.one_of(
            inner.map(lambda q: (f"sum by (namespace) ({q[0]})", q[1])),
            inner.map(lambda q: (f"-({q[0]})", q[1])),
            inner.map(lambda q: (f"max_over_time(({q[0]})[10m:1m])", q[1])),
            inner.map(lambda q: (f'label_replace({q[0]}, "namespace", "b", "", "")', q[1])),
            pairs.map(lambda p: (f"{p[0][0]} or {p[1][0]}", p[0][1] and p[1][1])),
            pairs.map(lambda p: (f"{p[0][0]} unless on() {p[1][0]}", p[0][1] and p[1][1])),
            pairs.map(lambda p: (f"({p[0][0]}) / ignoring(job) ({p[1][0]})", p[0][1] and p[1][1])),
        )

    instant = st.tuples(_selector(), _MODIFIERS).map(lambda t: (t[0][0] + t[1], t[0][1]))
    ranged = st.tuples(_selector(), _MODIFIERS, st.sampled_from(["rate", "max_over_time"])).map(
        lambda t: (f"{t[2]}({t[0][0]}[5m]{t[1]})", t[0][1])
    )
    return st.recursive(st.one_of(instant, ranged), extend, max_leaves=6)


@settings(max_examples=400, deadline=None)
@given(_queries())
def test_generated_queries_are_confined_exactly_when_they_may_be(query: tuple[str, bool]) -> None:
    text, may = query
    result = confine(text, "a")
    if may:
        assert isinstance(result, Confined), (text, result)
        assert _confined_independently(result.query, "a")
    else:
        assert isinstance(result, Refused), (text, result)
        assert "namespace" in result.reason


# -- against real Prometheus servers -------------------------------------------------------------

#: Namespace b's values are of another order than a's, so any of them in an answer shows.
A_SERIES = [
    Gauge("queue_depth", {"namespace": "a", "queue": "orders"}, 5.0),
    Gauge("queue_depth", {"namespace": "a", "queue": "mails"}, 7.0),
    Gauge("inflight", {"namespace": "a", "pod": "a-0"}, 1.0),
]
B_SERIES = [
    Gauge("queue_depth", {"namespace": "b", "queue": "orders"}, 5000.0),
    Gauge("secret_gauge", {"namespace": "b", "pod": "b-0"}, 9999.0),
    Gauge("inflight", {"namespace": "b", "pod": "b-0"}, 3000.0),
    Gauge("node_load", {"node": "n1"}, 4242.0),  # no namespace at all
]

ATTEMPTS = [
    "secret_gauge",
    'secret_gauge{pod="b-0"}',
    "queue_depth or secret_gauge",
    "queue_depth unless secret_gauge",
    "inflight + on() group_left secret_gauge",
    'label_replace(queue_depth, "namespace", "b", "", "")',
    'label_replace(secret_gauge, "namespace", "a", "", "")',
    '{__name__=~".+"}',
    'count({__name__=~".+"})',
    'sum by (namespace, __name__) ({__name__=~".+"})',
    "max_over_time(secret_gauge[5m:1m])",
    'max_over_time({__name__=~"secret.*|queue.*"}[10m:1m] offset 1m)',
    "sum(queue_depth @ end())",
    "absent(secret_gauge)",
    "node_load",
    "vector(1) + on() group_left sum(secret_gauge)",
    'sort_desc(topk(100, {__name__=~".+"}))',
]


def _start(tmp_path: Path, name: str, series: list[Gauge]) -> RealPrometheus:
    workdir = tmp_path / name
    workdir.mkdir()
    server = RealPrometheus(workdir, list(series))
    server.backfill()
    server.start()
    return server


@pytest.fixture(scope="module")
def two_prometheus(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RealPrometheus, RealPrometheus]]:
    """One Prometheus with namespaces a and b, one with a alone: a confined query of a must
    answer the same from both."""
    require("prometheus")
    require("promtool")
    tmp = tmp_path_factory.mktemp("promql-scope")
    both = _start(tmp, "both", A_SERIES + B_SERIES)
    try:
        alone = _start(tmp, "alone", A_SERIES)
    except BaseException:
        both.stop()
        raise
    yield both, alone
    both.stop()
    alone.stop()


def _answer(server: RealPrometheus, query: str) -> list[tuple[tuple[tuple[str, str], ...], str]]:
    result = server.query(query)
    rows = []
    for item in result:
        metric = item["metric"]
        value = item["value"]
        assert isinstance(metric, dict)
        assert isinstance(value, list)
        rows.append((tuple(sorted(metric.items())), str(value[1])))
    return sorted(rows)


@pytest.mark.parametrize("query", ATTEMPTS)
def test_a_confined_query_never_reads_another_namespace(
    two_prometheus: tuple[RealPrometheus, RealPrometheus], query: str
) -> None:
    both, alone = two_prometheus
    confined = confine(query, "a")
    assert isinstance(confined, Confined), confined
    answer = _answer(both, confined.query)
    assert answer == _answer(alone, confined.query)
    b_values = {str(int(s.value)) for s in B_SERIES}
    assert not any(value in b_values for _, value in answer)
    # The attempt does reach b unconfined (so the test is not vacuous where it could leak).
    if "secret" in query or "__name__" in query or "node_load" in query:
        assert _answer(both, query) != _answer(alone, query)


@pytest.mark.parametrize(("query", "expected"), CONFINED)
def test_prometheus_reads_every_confined_text(
    two_prometheus: tuple[RealPrometheus, RealPrometheus], query: str, expected: str
) -> None:
    """Prometheus's own parser reads every confined text, and its printing of it confines to
    the same query (the two parsers agree on what the text says)."""
    both, _ = two_prometheus
    confined = confine(query, "a")
    assert isinstance(confined, Confined)

    def formatted(text: str) -> str:
        response = httpx.get(f"{both.url}/api/v1/format_query", params={"query": text}, timeout=10)
        assert response.status_code == 200, response.text
        data = response.json()["data"]
        assert isinstance(data, str)
        return data

    again = confine(formatted(confined.query), "a")
    assert isinstance(again, Confined)
    assert again.query == confined.query
