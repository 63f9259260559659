"""The PromQL a request becomes: prometheus-adapter's query-builder vectors, the deliberate
differences, and property tests that no selector value can change a query's shape."""

from __future__ import annotations

import ast
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custom_metrics_server.errors import BadRequest
from custom_metrics_server.machinery.label_parser import parse_selector
from custom_metrics_server.machinery.labels import Operator, Selector, new_requirement
from custom_metrics_server.prometheus.promql import (
    any_of,
    eq,
    matches,
    quote_meta,
    range_window,
)
from custom_metrics_server.prometheus.queries import custom_query, external_query
from custom_metrics_server.prometheus.rules import DEFAULT_SERVER, Rule, ServerConfig
from custom_metrics_server.prometheus.rules_config import parse_config

DEFAULT = ServerConfig(name=DEFAULT_SERVER, url="http://p:9090")


def rule(template: str, *, external: bool = False, namespaced: bool = True) -> Rule:
    key = "externalRules" if external else "rules"
    resources = (
        "{namespaced: %s, overrides: {namespaces: {resource: namespace}}}"
        % ("true" if namespaced else "false")
        if external
        else "{overrides: {resource: {group: group, resource: resource}, "
        "namespaces: {resource: namespace}}}"
    )
    document = f"{key}:\n- seriesQuery: x\n  resources: {resources}\n  metricsQuery: {template!r}\n"
    config = parse_config(document, default_server=DEFAULT)
    return (config.external_rules or config.rules)[0]


def build(template: str, *, names: list[str], namespace: str = "", selector: str = "") -> str:
    query = custom_query(
        rule(template),
        series="foo",
        metric="m",
        object_label="resource",
        namespace=namespace,
        names=names,
        metric_selector=parse_selector(selector),
    )
    assert query is not None
    return query.promql


# prometheus-adapter pkg/naming/metrics_query_test.go TestBuildSelector, where we agree.
@pytest.mark.parametrize(
    ("template", "names", "namespace", "selector", "expected"),
    [
        ("series <<.Series>>", ["bar"], "", "", "series foo"),
        ("<<.LabelMatchers>>", ["bar"], "", "", 'resource="bar"'),
        ("<<.LabelMatchers>>", ["bar"], "", "metric1=value1", 'metric1="value1",resource="bar"'),
        ('<<index .LabelValuesByName "resource">>', ["bar"], "", "", "bar"),
        ("<<.GroupBy>>", ["bar"], "", "", "resource"),
        ("<<.GroupBySlice>>", ["bar"], "", "", "[resource]"),
        (
            '<<index .LabelValuesByName "namespaces">> <<index .LabelValuesByName "resource">>',
            ["bar"],
            "default",
            "",
            "default bar",
        ),
        ("<<.LabelMatchers>>", ["bar"], "default", "", 'namespaces="default",resource="bar"'),
    ],
)
def test_upstream_build_vectors(
    template: str, names: list[str], namespace: str, selector: str, expected: str
) -> None:
    assert build(template, names=names, namespace=namespace, selector=selector) == expected


def test_several_objects_are_not_a_name_regex() -> None:
    """Upstream renders `resource=~"bar|baz"` (and 25 kB queries for big workloads); here the
    query covers the namespace and the caller keeps the requested names."""
    query = build("<<.LabelMatchers>>", names=["bar", "baz"], namespace="default")
    assert query == 'namespaces="default"'
    assert build("x{<<.LabelMatchers>>}", names=[f"p{i}" for i in range(5000)]) == "x{}"


# prometheus-adapter TestBuildExternalSelector vectors.
@pytest.mark.parametrize(
    ("template", "namespace", "selector", "expected"),
    [
        ("series <<.Series>>", "", "", "series foo"),
        ("<<.LabelMatchers>>", "", "foo=bar", 'foo="bar"'),
        ("<<.LabelMatchers>>", "default", "foo=bar", 'foo="bar",namespaces="default"'),
        ("<<.LabelMatchers>>", "", "foo=bar,qux in (bar,baz)", 'foo="bar",qux=~"bar|baz"'),
        ("<<.LabelValuesByName>>", "", "foo=bar", "map[foo:bar]"),
        ("<<.LabelValuesByName>>", "", "foo in (bar,baz)", "map[foo:bar|baz]"),
        ("<<.GroupBySlice>>", "", "", "[]"),
    ],
)
def test_upstream_external_vectors(
    template: str, namespace: str, selector: str, expected: str
) -> None:
    namespaced = bool(namespace)
    query = external_query(
        rule(template, external=True, namespaced=namespaced),
        series="foo",
        metric="m",
        namespace=namespace or "ignored",
        metric_selector=parse_selector(selector),
    )
    assert query == expected


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("a=x", 'a="x"'),
        ("a==x", 'a="x"'),
        ("a!=x", 'a!="x"'),
        ("a in (x)", 'a="x"'),
        ("a in (x.y,z)", r'a=~"x\\.y|z"'),
        ("a notin (x)", 'a!="x"'),
        ("a notin (x,y)", 'a!~"x|y"'),
        ("a", 'a!=""'),
        ("!a", 'a=""'),
    ],
)
def test_operators_become_literal_matchers(selector: str, expected: str) -> None:
    assert build("<<.LabelMatchers>>", names=[], selector=selector) == expected


def test_values_are_literals_not_regexes() -> None:
    # Upstream passes `in` values through as regular expressions (so `v1.2` also matches
    # `v1x2`); a value is a value here.
    assert build("<<.LabelMatchers>>", names=[], selector="a in (v1.2,v10)") == r'a=~"v1\\.2|v10"'


def test_inexpressible_selectors_are_400() -> None:
    with pytest.raises(BadRequest, match="'app.kubernetes.io/name' is not a valid Prometheus"):
        build("x", names=["a"], selector="app.kubernetes.io/name=x")
    with pytest.raises(BadRequest, match="operator 'gt'"):
        build("x", names=["a"], selector="a>1")


def test_range_windows() -> None:
    assert range_window("sum(rate(x[2m])) by (pod)") == 120
    assert range_window("max_over_time(rate(x[1m])[5m:30s])") == 300
    assert range_window("sum(x) by (pod)") is None


# --- property tests -------------------------------------------------------------------------

_GO_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)(=~|!~|!=|=)("(?:[^"\\]|\\.)*")')
LABEL_KEYS = st.from_regex(r"[a-z]([a-z0-9_]{0,9}[a-z0-9])?", fullmatch=True)
LABEL_VALUES = st.from_regex(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?)?", fullmatch=True)
NAMES = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)


@st.composite
def selectors(draw: st.DrawFn) -> Selector:
    keys = draw(st.lists(LABEL_KEYS, min_size=0, max_size=4, unique=True))
    requirements = []
    for key in keys:
        operator = draw(
            st.sampled_from(
                [
                    Operator.EQUALS,
                    Operator.DOUBLE_EQUALS,
                    Operator.NOT_EQUALS,
                    Operator.IN,
                    Operator.NOT_IN,
                    Operator.EXISTS,
                    Operator.DOES_NOT_EXIST,
                ]
            )
        )
        if operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST):
            values: list[str] = []
        elif operator in (Operator.IN, Operator.NOT_IN):
            values = draw(st.lists(LABEL_VALUES, min_size=1, max_size=4, unique=True))
        else:
            values = [draw(LABEL_VALUES)]
        requirements.append(new_requirement(key, operator, values))
    return Selector(tuple(sorted(requirements, key=lambda r: r.key)))


def parsed_matchers(text: str) -> list[tuple[str, str, str]]:
    """Parse `a="x",b=~"y|z"` back, with the string literals unquoted as PromQL does."""
    out = []
    position = 0
    while position < len(text):
        match = _GO_MATCHER.match(text, position)
        assert match is not None, f"not a matcher list at {text[position:]!r}"
        out.append((match.group(1), match.group(2), ast.literal_eval(match.group(3))))
        position = match.end()
        if position < len(text):
            assert text[position] == ","
            position += 1
    return out


def _unregex(pattern: str) -> set[str]:
    values = re.split(r"(?<!\\)\|", pattern)
    return {re.sub(r"\\(.)", r"\1", value) for value in values}


@settings(max_examples=300, deadline=None)
@given(selector=selectors(), namespace=NAMES, names=st.lists(NAMES, min_size=1, max_size=3))
def test_every_selector_value_is_an_escaped_literal_and_the_namespace_is_always_there(
    selector: Selector, namespace: str, names: list[str]
) -> None:
    query = custom_query(
        rule("sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)"),
        series="foo",
        metric="m",
        object_label="resource",
        namespace=namespace,
        names=names,
        metric_selector=selector,
    )
    assert query is not None
    inner = query.promql.removeprefix("sum(foo{").removesuffix("}) by (resource)")
    matchers = parsed_matchers(inner)
    assert ("namespaces", "=", namespace) in matchers
    if len(names) == 1:
        assert ("resource", "=", names[0]) in matchers
    else:
        assert all(label != "resource" for label, _, _ in matchers)
    by_key = {label: (op, value) for label, op, value in matchers}
    for requirement in selector.requirements:
        op, value = by_key[requirement.key]
        wanted = set(requirement.values)
        if op in ("=~", "!~"):
            assert _unregex(value) == wanted
        elif requirement.operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST):
            assert value == ""
        else:
            assert {value} == wanted
    assert len(matchers) == len(selector.requirements) + 1 + (len(names) == 1)


@settings(max_examples=500, deadline=None)
@given(label=LABEL_KEYS, value=st.text())
def test_any_text_round_trips_through_quoting(label: str, value: str) -> None:
    ((parsed_label, op, parsed),) = parsed_matchers(eq(label, value))
    assert (parsed_label, op, parsed) == (label, "=", value)
    ((_, op, pattern),) = parsed_matchers(matches(label, any_of([value])))
    assert op == "=~"
    assert re.fullmatch(pattern, value) is not None
    assert pattern == quote_meta(value)
