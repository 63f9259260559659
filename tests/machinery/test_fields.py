"""Tests of `machinery.fields` against apimachinery's own tables.

Rows are ported from `pkg/fields/selector_test.go` and the metav1 field-label conversion;
error texts are what the Go code produces. Hypothesis properties cover escaping, round-tripping
and parser totality.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from custom_metrics_server.machinery.fields import (
    FIELD_EVERYTHING,
    FieldRequirement,
    FieldSelector,
    escape_field_value,
    parse_field_selector,
    split_term,
    split_terms,
    unescape_field_value,
)
from custom_metrics_server.machinery.validation import SelectorError

T = TypeVar("T")
UNKNOWN_FIELD = ' is not a known field selector: only "metadata.name", "metadata.namespace"'


def _attempt(parse: Callable[[str], T], text: str) -> T | SelectorError:
    """The parse result, or the SelectorError it raised (anything else propagates)."""
    try:
        return parse(text)
    except SelectorError as err:
        return err


# --- fields: TestSplitTerms / TestSplitTerm / TestEscapeValue --------------------------------


@pytest.mark.parametrize(
    ("text", "terms"),
    [
        pytest.param("a", ["a"], id="one"),
        pytest.param("a=avalue", ["a=avalue"], id="term"),
        pytest.param("a=avalue,b=bvalue", ["a=avalue", "b=bvalue"], id="two"),
        pytest.param(
            "a=avalue,b==bvalue,c!=cvalue", ["a=avalue", "b==bvalue", "c!=cvalue"], id="ops"
        ),
        pytest.param("", [], id="empty"),
        pytest.param("a=a,", ["a=a", ""], id="trailing"),
        pytest.param(",a=a", ["", "a=a"], id="leading"),
        pytest.param("k=\\,,k2=v2", ["k=\\,", "k2=v2"], id="escaped-comma"),
        pytest.param("k=\\\\,k2=v2", ["k=\\\\", "k2=v2"], id="escaped-backslash"),
        pytest.param("k=\\\\\\,,k2=v2", ["k=\\\\\\,", "k2=v2"], id="backslash-and-comma"),
        pytest.param("k=\\a\\b\\", ["k=\\a\\b\\"], id="non-escapes"),
        pytest.param("k=\\", ["k=\\"], id="orphan"),
        pytest.param(
            "\ud568=\uc218,\ubaa9=\ub85d", ["\ud568=\uc218", "\ubaa9=\ub85d"], id="multibyte"
        ),
    ],
)
def test_split_terms(text: str, terms: list[str]) -> None:
    assert split_terms(text) == terms


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        pytest.param("a=value", ("a", "=", "value"), id="eq"),
        pytest.param("b==value", ("b", "==", "value"), id="double-eq"),
        pytest.param("c!=value", ("c", "!=", "value"), id="neq"),
        pytest.param("", None, id="empty"),
        pytest.param("a", None, id="no-operator"),
        pytest.param("k=\\,", ("k", "=", "\\,"), id="escaped-comma"),
        pytest.param("k=\\=", ("k", "=", "\\="), id="escaped-equals"),
        pytest.param("k=\\\\\\a\\b\\=\\,\\", ("k", "=", "\\\\\\a\\b\\=\\,\\"), id="raw-rhs"),
        pytest.param("\ud568=\uc218", ("\ud568", "=", "\uc218"), id="multibyte"),
        pytest.param("a!b=c", ("a!b", "=", "c"), id="bang-not-before-eq"),
        pytest.param("a=!=b", ("a", "=", "!=b"), id="first-operator-wins"),
    ],
)
def testsplit_term(term: str, expected: tuple[str, str, str] | None) -> None:
    assert split_term(term) == expected


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        pytest.param("", "", id="empty"),
        pytest.param("a", "a", id="plain"),
        pytest.param("=", "\\=", id="equals"),
        pytest.param(",", "\\,", id="comma"),
        pytest.param("\\", "\\\\", id="backslash"),
        pytest.param("\\=\\,\\", "\\\\\\=\\\\\\,\\\\", id="mixed"),
    ],
)
def test_escape_value(raw: str, escaped: str) -> None:
    assert escape_field_value(raw) == escaped
    assert unescape_field_value(escaped) == raw


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param("\\", "invalid field selector: invalid escape sequence: \\", id="orphan"),
        pytest.param(
            "\\\\\\", "invalid field selector: invalid escape sequence: \\", id="orphan-3"
        ),
        pytest.param("\\a", "invalid field selector: invalid escape sequence: \\a", id="unknown"),
        pytest.param("a=b", "invalid field selector: unescaped character in value: 61", id="eq"),
        pytest.param("a,b", "invalid field selector: unescaped character in value: 44", id="comma"),
    ],
)
def test_unescape_errors(value: str, message: str) -> None:
    with pytest.raises(SelectorError) as caught:
        unescape_field_value(value)
    assert str(caught.value) == message


# --- fields: TestSelectorParse / TestSelectorMatches / RequiresExactMatch / conversion -------

NAME = "metadata.name"
NS = "metadata.namespace"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(f"{NAME}=a,{NS}=b", id="two-equals"),
        pytest.param("", id="empty"),
        pytest.param(f"{NAME}!=a,{NS}=b", id="not-equals"),
        pytest.param(f"{NAME}=a||y\\=b", id="escaped-equals-in-value"),
        pytest.param(f"{NAME}=a\\=\\=b", id="escaped-double-equals"),
        pytest.param(f"{NAME}=\\=value\\\\\\,\\\\", id="complex-escapes"),
        pytest.param(f"{NAME}=", id="empty-value"),
    ],
)
def test_field_selector_parse_good_strings_restring(text: str) -> None:
    assert str(parse_field_selector(text)) == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            f"{NAME}=a||y=b", "invalid field selector: unescaped character in value: 61", id="pipes"
        ),
        pytest.param(
            f"{NAME}==a==b", "invalid field selector: unescaped character in value: 61", id="double"
        ),
        pytest.param(
            f"{NAME}=a,b",
            "invalid selector: 'metadata.name=a,b'; can't understand 'b'",
            id="bare-term",
        ),
        pytest.param(
            "x in (a)", "invalid selector: 'x in (a)'; can't understand 'x in (a)'", id="set-syntax"
        ),
        pytest.param(
            "x in (a,b,c)",
            "invalid selector: 'x in (a,b,c)'; can't understand 'b'",
            id="set-syntax-sorted",
        ),
        pytest.param("x", "invalid selector: 'x'; can't understand 'x'", id="bare"),
        pytest.param(" ", "invalid selector: ' '; can't understand ' '", id="space"),
        pytest.param("spec.x=1", '"spec.x"' + UNKNOWN_FIELD, id="unknown-field"),
        pytest.param("=x", '""' + UNKNOWN_FIELD, id="empty-field"),
        pytest.param(
            f"z=1,{NAME}=a,b=2", '"b"' + UNKNOWN_FIELD, id="first-unknown-in-sorted-order"
        ),
        pytest.param(
            "spec.x=1,a", "invalid selector: 'spec.x=1,a'; can't understand 'a'", id="syntax-first"
        ),
        pytest.param(
            f"{NAME}=\\q", "invalid field selector: invalid escape sequence: \\q", id="bad-escape"
        ),
        pytest.param('sp"ec=1', '"sp\\"ec"' + UNKNOWN_FIELD, id="field-go-quoted"),
    ],
)
def test_field_selector_parse_errors(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_field_selector(text)
    assert str(caught.value) == message


def test_field_selector_deterministic_and_normalised() -> None:
    first = parse_field_selector(f"{NS}=a,{NAME}=x")
    second = parse_field_selector(f"{NAME}=x,{NS}=a")
    assert first == second
    assert str(first) == f"{NAME}=x,{NS}=a"
    assert parse_field_selector(f"{NAME}==x") == parse_field_selector(f"{NAME}=x")
    assert parse_field_selector("=") is FIELD_EVERYTHING  # ("", "") terms are dropped
    assert parse_field_selector(",,") is FIELD_EVERYTHING
    assert parse_field_selector(f"=,{NAME}=a").requirements == (FieldRequirement(NAME, "=", "a"),)


@pytest.mark.parametrize(
    ("text", "fields", "expected"),
    [
        pytest.param("", {NAME: "y"}, True, id="empty"),
        pytest.param(f"{NAME}=y", {NAME: "y"}, True, id="eq"),
        pytest.param(f"{NAME}=y,{NS}=w", {NAME: "y", NS: "w"}, True, id="eq-eq"),
        pytest.param(f"{NAME}!=y,{NS}!=w", {NAME: "z", NS: "a"}, True, id="neq-neq"),
        pytest.param(f"{NAME}=y", {NAME: "z"}, False, id="eq-other"),
        pytest.param(f"{NAME}=y,{NS}=w", {NAME: "w", NS: "w"}, False, id="one-off"),
        pytest.param(f"{NAME}!=y,{NS}!=w", {NAME: "z", NS: "w"}, False, id="neq-hit"),
        pytest.param(f"{NAME}=\\=value\\\\\\,\\\\", {NAME: "=value\\,\\"}, True, id="complex"),
        pytest.param(f"{NAME}=", {}, True, id="missing-reads-empty"),
        pytest.param(f"{NAME}!=", {}, False, id="neq-empty-missing"),
    ],
)
def test_field_selector_matches(text: str, fields: dict[str, str], expected: bool) -> None:
    assert parse_field_selector(text).matches(fields) is expected


@pytest.mark.parametrize(
    ("requirements", "field", "expected"),
    [
        pytest.param([], "test", None, id="empty-set"),
        pytest.param([FieldRequirement("", "=", "")], "test", None, id="empty-has-term"),
        pytest.param([FieldRequirement("a", "=", "b")], "test", None, id="skipped"),
        pytest.param([FieldRequirement("test", "=", "b")], "test", "b", id="valid"),
        pytest.param([FieldRequirement("test", "=", "")], "test", "", id="valid-no-value"),
        pytest.param([FieldRequirement("test", "!=", "b")], "test", None, id="not-has"),
        pytest.param([FieldRequirement("test", "!=", "")], "test", None, id="not-has-no-value"),
        pytest.param([FieldRequirement("test", "==", "b")], "test", "b", id="double-equals"),
        pytest.param(
            [FieldRequirement("", "=", ""), FieldRequirement("test", "=", "b")],
            "test",
            "b",
            id="and-with-non-match",
        ),
    ],
)
def test_field_requires_exact_match(
    requirements: list[FieldRequirement], field: str, expected: str | None
) -> None:
    assert FieldSelector(tuple(requirements)).requires_exact(field) == expected


def test_field_everything() -> None:
    assert FIELD_EVERYTHING.is_everything()
    assert FIELD_EVERYTHING.matches({"x": "y"})
    assert parse_field_selector("") is FIELD_EVERYTHING
    assert not parse_field_selector(f"{NAME}=a").is_everything()


# --- hypothesis ---------------------------------------------------------------------------


@given(st.text(max_size=30))
def test_property_field_escape_round_trip(value: str) -> None:
    escaped = escape_field_value(value)
    assert unescape_field_value(escaped) == value
    assert len(split_terms(f"{NAME}={escaped}")) == 1


@given(
    st.lists(
        st.tuples(st.sampled_from([NAME, NS]), st.sampled_from(["=", "!="]), st.text(max_size=12)),
        max_size=4,
    )
)
def test_property_field_selector_round_trip(terms: list[tuple[str, str, str]]) -> None:
    rendered = sorted(f"{field}{op}{escape_field_value(value)}" for field, op, value in terms)
    selector = parse_field_selector(",".join(rendered))
    assert str(selector) == ",".join(rendered)
    assert parse_field_selector(str(selector)) == selector
    expected = sorted(terms, key=lambda t: f"{t[0]}{t[1]}{escape_field_value(t[2])}")
    assert [(r.field, r.operator, r.value) for r in selector.requirements] == expected
    for field in (NAME, NS):
        exact = [value for f, op, value in expected if f == field and op == "="]
        assert selector.requires_exact(field) == (exact[0] if exact else None)


@given(
    st.one_of(
        st.text(max_size=40),
        st.lists(st.sampled_from(["a", "=", "!=", "==", ",", "\\", NAME]), max_size=10).map(
            "".join
        ),
    )
)
def test_property_field_parser_is_total(text: str) -> None:
    outcome = _attempt(parse_field_selector, text)
    if isinstance(outcome, SelectorError):
        assert str(outcome)
    else:
        assert all(r.field in (NAME, NS) for r in outcome.requirements)
        assert parse_field_selector(str(outcome)).requirements == tuple(
            sorted(outcome.requirements, key=str)
        )
