"""Tests of `machinery.labels` and `machinery.label_parser` against apimachinery's own tables.

Rows are ported from `pkg/labels/selector_test.go` and `pkg/apis/meta/v1/helpers.go`; error
texts are what the Go code produces (checked by reading `field.Invalid`,
`validation.IsQualifiedName` / `IsValidLabelValue` and the parser). Hypothesis properties cover
round-tripping, matching against a naive reference and parser totality.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from custom_metrics_server.machinery.label_parser import (
    _BANG,
    _CLOSE,
    _COMMA,
    _DOUBLE_EQUALS,
    _EOS,
    _EQUALS,
    _GREATER,
    _IDENT,
    _IN,
    _LESS,
    _NOT_EQUALS,
    _NOT_IN,
    _OPEN,
    _lex,
    parse_selector,
    parse_selector_cached,
    parse_to_label_selector,
)
from custom_metrics_server.machinery.labels import (
    EVERYTHING,
    Operator,
    Requirement,
    Selector,
    new_requirement,
)
from custom_metrics_server.machinery.validation import SelectorError

EQ = Operator.EQUALS
DEQ = Operator.DOUBLE_EQUALS
NEQ = Operator.NOT_EQUALS
IN = Operator.IN
NOTIN = Operator.NOT_IN
EXISTS = Operator.EXISTS
DNE = Operator.DOES_NOT_EXIST
GT = Operator.GREATER_THAN
LT = Operator.LESS_THAN

LABEL_VALUE_RULE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
NAME_RULE = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
PREFIX_RULE = (
    "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
    "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
    "'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
INTEGER_RULE = "for 'Gt', 'Lt' operators, the value must be an integer"
T = TypeVar("T")
UNABLE = "unable to parse requirement: "
E_ACUTE = "\u00e9"


def req(key: str, op: Operator, *values: str) -> Requirement:
    """A requirement built through the validating constructor (upstream getRequirement)."""
    return new_requirement(key, op, values)


# --- labels: TestSelectorParse / TestDeterministicParse / TestEverything ---------------------


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("x=a,y=b,z=c", id="three-equals"),
        pytest.param("", id="empty"),
        pytest.param("x!=a,y=b", id="not-equals"),
        pytest.param("x=", id="empty-value"),
        pytest.param("x= ", id="empty-value-space"),
        pytest.param("x=,z= ", id="two-empty-values"),
        pytest.param("x= ,z= ", id="two-empty-values-spaces"),
        pytest.param("!x", id="does-not-exist"),
        pytest.param("x>1", id="greater-than"),
        pytest.param("x>1,z<5", id="greater-and-less"),
    ],
)
def test_selector_parse_good_strings_restring(text: str) -> None:
    assert str(parse_selector(text)) == text.replace(" ", "")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "x=a||y=b",
            f'unable to parse requirement: values[0][x]: Invalid value: "a||y": {LABEL_VALUE_RULE}',
            id="pipes",
        ),
        pytest.param("x==a==b", "found '==', expected: ',' or 'end of string'", id="double-eq"),
        pytest.param("!x=a", "found '=', expected: ',' or 'end of string'", id="bang-with-value"),
        pytest.param(
            "x<a",
            f'unable to parse requirement: values[0]: Invalid value: "a": {INTEGER_RULE}',
            id="lt-non-integer",
        ),
    ],
)
def test_selector_parse_bad_strings(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_selector(text)
    assert str(caught.value) == message


def test_deterministic_parse() -> None:
    first = parse_selector("x=a,a=x")
    second = parse_selector("a=x,x=a")
    assert first == second
    assert str(first) == str(second) == "a=x,x=a"


def test_everything() -> None:
    assert EVERYTHING.matches({"x": "y"})
    assert EVERYTHING.is_everything()
    assert str(EVERYTHING) == ""
    assert parse_selector(" \t\r\n") is EVERYTHING
    assert not parse_selector("x").is_everything()


# --- labels: TestSelectorMatches (plus the not-in / ordering corners) -------------------------


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        pytest.param("", {"x": "y"}, True, id="empty-matches"),
        pytest.param("x=y", {"x": "y"}, True, id="eq"),
        pytest.param("x=y,z=w", {"x": "y", "z": "w"}, True, id="eq-eq"),
        pytest.param("x!=y,z!=w", {"x": "z", "z": "a"}, True, id="neq-neq"),
        pytest.param("notin=in", {"notin": "in"}, True, id="keywords-as-key-and-value"),
        pytest.param("x", {"x": "z"}, True, id="exists"),
        pytest.param("!x", {"y": "z"}, True, id="not-exists"),
        pytest.param("x>1", {"x": "2"}, True, id="gt"),
        pytest.param("x<1", {"x": "0"}, True, id="lt"),
        pytest.param("x=z", {}, False, id="eq-missing"),
        pytest.param("x=y", {"x": "z"}, False, id="eq-other"),
        pytest.param("x=y,z=w", {"x": "w", "z": "w"}, False, id="eq-eq-one-off"),
        pytest.param("x!=y,z!=w", {"x": "z", "z": "w"}, False, id="neq-hit"),
        pytest.param("x", {"y": "z"}, False, id="exists-missing"),
        pytest.param("!x", {"x": "z"}, False, id="not-exists-present"),
        pytest.param("x>1", {"x": "0"}, False, id="gt-smaller"),
        pytest.param("x<1", {"x": "2"}, False, id="lt-larger"),
        pytest.param("foo=bar", {"foo": "bar", "baz": "blah"}, True, id="labelset-foo"),
        pytest.param("baz=blah", {"foo": "bar", "baz": "blah"}, True, id="labelset-baz"),
        pytest.param("foo=bar,baz=blah", {"foo": "bar", "baz": "blah"}, True, id="labelset-both"),
        pytest.param("foo=blah", {"foo": "bar", "baz": "blah"}, False, id="labelset-foo-wrong"),
        pytest.param("baz=bar", {"foo": "bar", "baz": "blah"}, False, id="labelset-baz-wrong"),
        pytest.param(
            "foo=bar,foobar=bar,baz=blah",
            {"foo": "bar", "baz": "blah"},
            False,
            id="labelset-extra-key",
        ),
        pytest.param("x!=a", {}, True, id="neq-matches-missing-key"),
        pytest.param("x notin (a)", {}, True, id="notin-matches-missing-key"),
        pytest.param("x notin (a,b)", {"x": "a"}, False, id="notin-hit"),
        pytest.param("x notin (a,b)", {"x": "c"}, True, id="notin-miss"),
        pytest.param("x in ()", {"x": ""}, True, id="in-empty-parens-is-empty-value"),
        pytest.param("x in ()", {}, False, id="in-empty-parens-missing"),
        pytest.param("x in (a,b)", {"x": "b"}, True, id="in-second"),
        pytest.param("x==a", {"x": "a"}, True, id="double-equals"),
        pytest.param("x=", {"x": ""}, True, id="eq-empty-value"),
        pytest.param("x>1", {"x": "+2"}, True, id="gt-plus-sign-as-go-parseint"),
        pytest.param("x<1", {"x": "-5"}, True, id="lt-negative-label"),
        pytest.param("x>1", {"x": "0002"}, True, id="gt-leading-zeros"),
        pytest.param("x>1", {"x": " 2"}, False, id="gt-space-is-not-int"),
        pytest.param("x>1", {"x": "2_0"}, False, id="gt-underscore-is-not-int"),
        pytest.param("x>1", {"x": "\u0663"}, False, id="gt-non-ascii-digit"),
        pytest.param("x>1", {"x": "9223372036854775808"}, False, id="gt-overflow"),
        pytest.param("x>1", {"x": "9223372036854775807"}, True, id="gt-int64-max"),
        pytest.param("x>1", {}, False, id="gt-missing"),
        pytest.param("x>1,x<3", {"x": "2"}, True, id="range"),
    ],
)
def test_selector_matches(text: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_selector(text).matches(labels) is expected


# --- labels: TestRequirementSelectorMatching ---------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "requirements", "expected"),
    [
        pytest.param(
            {"x": "foo", "y": "baz"},
            [req("x", IN, "foo"), req("y", NOTIN, "alpha")],
            True,
            id="in-notin",
        ),
        pytest.param(
            {"x": "foo", "y": "baz"},
            [req("x", IN, "foo"), req("y", IN, "alpha")],
            False,
            id="in-in",
        ),
        pytest.param(
            {"y": ""}, [req("x", NOTIN, ""), req("y", EXISTS)], True, id="notin-empty-exists"
        ),
        pytest.param({"y": ""}, [req("x", DNE), req("y", EXISTS)], True, id="dne-exists"),
        pytest.param({"y": ""}, [req("x", NOTIN, ""), req("y", DNE)], False, id="notin-dne"),
        pytest.param({"y": "baz"}, [req("x", IN, "")], False, id="in-empty-missing"),
        pytest.param({"z": "2"}, [req("z", GT, "1")], True, id="gt"),
        pytest.param({"z": "v2"}, [req("z", GT, "1")], False, id="gt-not-integer"),
        pytest.param({"z": "2"}, [Requirement("z", GT, ("one",))], False, id="gt-bad-bound"),
        pytest.param({"z": "2"}, [Requirement("z", GT, ("1", "0"))], False, id="gt-two-bounds"),
    ],
)
def test_requirement_selector_matching(
    labels: dict[str, str], requirements: list[Requirement], expected: bool
) -> None:
    assert Selector(tuple(requirements)).matches(labels) is expected


# --- labels: TestSetSelectorParser ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected", "canonical"),
    [
        pytest.param("\rx", [req("x", EXISTS)], "x", id="carriage-return"),
        pytest.param(
            "this-is-a-dns.domain.com/key-with-dash",
            [req("this-is-a-dns.domain.com/key-with-dash", EXISTS)],
            "this-is-a-dns.domain.com/key-with-dash",
            id="prefixed-exists",
        ),
        pytest.param(
            "this-is-another-dns.domain.com/key-with-dash in (so,what)",
            [req("this-is-another-dns.domain.com/key-with-dash", IN, "so", "what")],
            "this-is-another-dns.domain.com/key-with-dash in (so,what)",
            id="prefixed-in",
        ),
        pytest.param(
            "0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)",
            [req("0.1.2.domain/99", NOTIN, "10.10.100.1", "tick.tack.clock")],
            "0.1.2.domain/99 notin (10.10.100.1,tick.tack.clock)",
            id="numeric-prefix-notin",
        ),
        pytest.param("foo  in\t (abc)", [req("foo", IN, "abc")], "foo in (abc)", id="tab"),
        pytest.param("x notin\n (abc)", [req("x", NOTIN, "abc")], "x notin (abc)", id="newline"),
        pytest.param(
            "x  notin\t\t\t(abc,def)",
            [req("x", NOTIN, "abc", "def")],
            "x notin (abc,def)",
            id="tabs",
        ),
        pytest.param("x in (abc,def)", [req("x", IN, "abc", "def")], "x in (abc,def)", id="in"),
        pytest.param("x in (abc,)", [req("x", IN, "abc", "")], "x in (,abc)", id="trailing-comma"),
        pytest.param("x in ()", [req("x", IN, "")], "x in ()", id="empty-parens"),
        pytest.param(
            "x notin (abc,,def),bar,z in (),w",
            [
                req("bar", EXISTS),
                req("w", EXISTS),
                req("x", NOTIN, "abc", "", "def"),
                req("z", IN, ""),
            ],
            "bar,w,x notin (,abc,def),z in ()",
            id="sorted-by-key",
        ),
        pytest.param(
            "x,y in (a)", [req("x", EXISTS), req("y", IN, "a")], "x,y in (a)", id="exists-then-in"
        ),
        pytest.param("x=a", [req("x", EQ, "a")], "x=a", id="equals"),
        pytest.param("x>1", [req("x", GT, "1")], "x>1", id="gt"),
        pytest.param("x<7", [req("x", LT, "7")], "x<7", id="lt"),
        pytest.param("x=a,y!=b", [req("x", EQ, "a"), req("y", NEQ, "b")], "x=a,y!=b", id="eq-neq"),
        pytest.param(
            "x=a,y!=b,z in (h,i,j)",
            [req("x", EQ, "a"), req("y", NEQ, "b"), req("z", IN, "h", "i", "j")],
            "x=a,y!=b,z in (h,i,j)",
            id="eq-neq-in",
        ),
        pytest.param("x notin ( )", [req("x", NOTIN, "")], "x notin ()", id="notin-space"),
        pytest.param(
            "x notin (, a)", [req("x", NOTIN, "", "a")], "x notin (,a)", id="leading-comma"
        ),
        pytest.param("a ", [req("a", EXISTS)], "a", id="trailing-space"),
        pytest.param(
            "a in (x,y,notin, z,in)",
            [req("a", IN, "in", "notin", "x", "y", "z")],
            "a in (in,notin,x,y,z)",
            id="keywords-inside-list",
        ),
        pytest.param("x==a", [req("x", DEQ, "a")], "x==a", id="double-equals-kept"),
        pytest.param("in in (in)", [req("in", IN, "in")], "in in (in)", id="keyword-key"),
        pytest.param("!notin", [req("notin", DNE)], "!notin", id="bang-keyword"),
        pytest.param("x in (b,a,b)", [req("x", IN, "a", "b")], "x in (a,b)", id="dedup-sort"),
        pytest.param(
            "b=1,a=2,b=0",
            [req("a", EQ, "2"), req("b", EQ, "1"), req("b", EQ, "0")],
            "a=2,b=1,b=0",
            id="duplicate-keys-stable",
        ),
        pytest.param("x>1,2", [req("2", EXISTS), req("x", GT, "1")], "2,x>1", id="gt-comma-is-key"),
        pytest.param("x\x00\x00y", [req("x", EXISTS)], "x", id="nul-consumed-then-nul-ends"),
        pytest.param("!x\x00", [req("x", DNE)], "!x", id="nul-at-end"),
        pytest.param("x \x00garbage(", [req("x", EXISTS)], "x", id="nul-ends-input"),
        pytest.param("x=a\x00,b", [req("b", EXISTS), req("x", EQ, "a")], "b,x=a", id="nul-sep"),
        pytest.param("x!=", [req("x", NEQ, "")], "x!=", id="neq-empty"),
        pytest.param("x in (a,,,b)", [req("x", IN, "", "a", "b")], "x in (,a,b)", id="commas"),
    ],
)
def test_set_selector_parser(text: str, expected: list[Requirement], canonical: str) -> None:
    selector = parse_selector(text)
    assert selector.requirements == tuple(expected)
    assert str(selector) == canonical
    assert parse_selector(canonical) == selector


# --- labels: exact upstream error texts --------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "=bar", "found '=', expected: !, identifier, or 'end of string'", id="eq-first"
        ),
        pytest.param("(", "found '(', expected: !, identifier, or 'end of string'", id="opar"),
        pytest.param(
            ",x,y", "found ',', expected: !, identifier, or 'end of string'", id="leading-comma"
        ),
        pytest.param("x,,y", "found ',', expected: identifier after ','", id="double-comma"),
        pytest.param(
            "a in (xyz),", "found '', expected: identifier after ','", id="trailing-comma"
        ),
        pytest.param(
            "a in (xyz)b notin ()",
            "found 'b', expected: ',' or 'end of string'",
            id="missing-comma",
        ),
        pytest.param(
            "x nott in (y)",
            "unable to parse requirement: found 'nott', expected: in, notin, =, ==, !=, gt, lt",
            id="nott",
        ),
        pytest.param(
            "a in (xyz abc)",
            "unable to parse requirement: found 'abc', expected: ',' or ')'",
            id="no-comma",
        ),
        pytest.param(
            "a notin(",
            "unable to parse requirement: found '', expected: ',', ')' or identifier",
            id="unclosed",
        ),
        pytest.param(
            "a (",
            "unable to parse requirement: found '(', expected: in, notin, =, ==, !=, gt, lt",
            id="cpar",
        ),
        pytest.param(
            "x in a", "unable to parse requirement: found 'a' expected: '('", id="in-without-parens"
        ),
        pytest.param(
            "x in (a,=",
            "unable to parse requirement: found '=', expected: ',', or identifier",
            id="list-operator",
        ),
        pytest.param(
            "x in (a,",
            "unable to parse requirement: found '', expected: ',', or identifier",
            id="list-eos",
        ),
        pytest.param(
            "x in (=",
            "unable to parse requirement: found '=', expected: ',', ')' or identifier",
            id="list-start",
        ),
        pytest.param(
            "x=(", "unable to parse requirement: found '(', expected: identifier", id="eq-paren"
        ),
        pytest.param(
            "x>(1,2)", "unable to parse requirement: found '(', expected: identifier", id="gt-list"
        ),
        pytest.param(
            "!", "unable to parse requirement: found '', expected: identifier", id="bang-alone"
        ),
        pytest.param(
            "!,", "unable to parse requirement: found ',', expected: identifier", id="bang-comma"
        ),
        pytest.param("!x in (a)", "found 'in', expected: ',' or 'end of string'", id="bang-in"),
        pytest.param("x=a b", "found 'b', expected: ',' or 'end of string'", id="space-in-value"),
        pytest.param(
            "x\x00y",
            "unable to parse requirement: found 'y', expected: in, notin, =, ==, !=, gt, lt",
            id="nul-after-token-separates",
        ),
        pytest.param(
            "x>",
            f'unable to parse requirement: values[0]: Invalid value: "": {INTEGER_RULE}',
            id="gt-empty",
        ),
        pytest.param(
            "x>-1",
            f'unable to parse requirement: values[0][x]: Invalid value: "-1": {LABEL_VALUE_RULE}',
            id="gt-negative-is-bad-label",
        ),
        pytest.param(
            "x>99999999999999999999",
            'unable to parse requirement: values[0]: Invalid value: "99999999999999999999": '
            + INTEGER_RULE,
            id="gt-overflow",
        ),
        pytest.param(
            "x>a.",
            f'unable to parse requirement: [values[0]: Invalid value: "a.": {INTEGER_RULE}, '
            f'values[0][x]: Invalid value: "a.": {LABEL_VALUE_RULE}]',
            id="gt-aggregate",
        ),
        pytest.param(
            "app in (ok,-bad)",
            f'{UNABLE}values[0][app]: Invalid value: "-bad": {LABEL_VALUE_RULE}',
            id="in-bad-value-index-after-sort",
        ),
        pytest.param(
            "x=" + "v" * 64,
            f'unable to parse requirement: values[0][x]: Invalid value: "{"v" * 64}": '
            "must be no more than 63 characters",
            id="value-too-long",
        ),
        pytest.param(
            "x=" + "\u00e9" * 32,
            f'{UNABLE}values[0][x]: Invalid value: "{E_ACUTE * 32}": '
            f"must be no more than 63 characters; {LABEL_VALUE_RULE}",
            id="value-bytes-counted",
        ),
        pytest.param(
            "x=\x01",
            f'{UNABLE}values[0][x]: Invalid value: "\\x01": {LABEL_VALUE_RULE}',
            id="value-go-quoted",
        ),
        pytest.param(
            "-x",
            f'unable to parse requirement: <nil>: Invalid value: "-x": name part {NAME_RULE}',
            id="key-bad-start",
        ),
        pytest.param(
            "k/v/w=1",
            'unable to parse requirement: <nil>: Invalid value: "k/v/w": a qualified name '
            f"{NAME_RULE} with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')",
            id="key-two-slashes",
        ),
        pytest.param(
            "A/b",
            f'unable to parse requirement: <nil>: Invalid value: "A/b": {PREFIX_RULE}',
            id="key-uppercase-prefix",
        ),
        pytest.param(
            "/b",
            f'{UNABLE}<nil>: Invalid value: "/b": prefix part must be non-empty',
            id="key-empty-prefix",
        ),
        pytest.param(
            "a/",
            f'{UNABLE}<nil>: Invalid value: "a/": name part must be non-empty; '
            f"name part {NAME_RULE}",
            id="key-empty-name",
        ),
        pytest.param(
            "k" * 64,
            f'unable to parse requirement: <nil>: Invalid value: "{"k" * 64}": '
            "name part must be no more than 63 characters",
            id="key-too-long",
        ),
    ],
)
def test_selector_error_messages(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_selector(text)
    assert str(caught.value) == message
    assert isinstance(caught.value, ValueError)


# --- labels: TestLexer / TestLexerSequence -----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kinds"),
    [
        pytest.param("", [], id="empty"),
        pytest.param(",", [_COMMA], id="comma"),
        pytest.param("notin", [_NOT_IN], id="notin"),
        pytest.param("in", [_IN], id="in"),
        pytest.param("=", [_EQUALS], id="eq"),
        pytest.param("==", [_DOUBLE_EQUALS], id="double-eq"),
        pytest.param(">", [_GREATER], id="gt"),
        pytest.param("<", [_LESS], id="lt"),
        pytest.param("!", [_BANG], id="bang"),
        pytest.param("!=", [_NOT_EQUALS], id="neq"),
        pytest.param("(", [_OPEN], id="opar"),
        pytest.param(")", [_CLOSE], id="cpar"),
        pytest.param("~", [_IDENT], id="tilde-is-identifier"),
        pytest.param("||", [_IDENT], id="pipes-are-identifier"),
        pytest.param("key in ( value )", [_IDENT, _IN, _OPEN, _IDENT, _CLOSE], id="seq-in"),
        pytest.param(
            "key in ( value1, value2 )",
            [_IDENT, _IN, _OPEN, _IDENT, _COMMA, _IDENT, _CLOSE],
            id="seq-in-two",
        ),
        pytest.param("!key", [_BANG, _IDENT], id="seq-bang"),
        pytest.param(
            "== != (), = notin",
            [_DOUBLE_EQUALS, _NOT_EQUALS, _OPEN, _CLOSE, _COMMA, _EQUALS, _NOT_IN],
            id="seq-symbols",
        ),
        pytest.param("key>2", [_IDENT, _GREATER, _IDENT], id="seq-gt"),
        pytest.param("!!=", [_BANG, _NOT_EQUALS], id="longest-match"),
        pytest.param("<=", [_LESS, _EQUALS], id="no-le-token"),
    ],
)
def test_lexer(text: str, kinds: list[int]) -> None:
    tokens = _lex(text)
    assert tokens[-1] == (_EOS, "")
    assert [kind for kind, _ in tokens[:-1]] == kinds


# --- labels: TestRequirementConstructor / TestToString / RequiresExactMatch ------------------


@pytest.mark.parametrize(
    ("key", "op", "values", "message"),
    [
        pytest.param(
            "x",
            IN,
            [],
            "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty",
            id="in-empty",
        ),
        pytest.param(
            "x",
            NOTIN,
            [],
            "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty",
            id="notin-empty",
        ),
        pytest.param("x", IN, ["foo"], None, id="in-one"),
        pytest.param("x", NOTIN, ["foo"], None, id="notin-one"),
        pytest.param("x", EXISTS, [], None, id="exists"),
        pytest.param("x", DNE, [], None, id="dne"),
        pytest.param("1foo", IN, ["bar"], None, id="digit-key"),
        pytest.param("1234", IN, ["bar"], None, id="numeric-key"),
        pytest.param("y", GT, ["1"], None, id="gt"),
        pytest.param("z", LT, ["6"], None, id="lt"),
        pytest.param(
            "foo", GT, ["bar"], f'values[0]: Invalid value: "bar": {INTEGER_RULE}', id="gt-word"
        ),
        pytest.param(
            "barz", LT, ["blah"], f'values[0]: Invalid value: "blah": {INTEGER_RULE}', id="lt-word"
        ),
        pytest.param(
            "a" * 254,
            EXISTS,
            [],
            f'key: Invalid value: "{"a" * 254}": name part must be no more than 63 characters',
            id="key-too-long",
        ),
        pytest.param(
            "x",
            EQ,
            ["a", "b"],
            'values: Invalid value: ["a","b"]: exact-match compatibility requires one single value',
            id="eq-two-values",
        ),
        pytest.param(
            "x",
            EXISTS,
            ["a"],
            'values: Invalid value: ["a"]: values set must be empty for exists and does not exist',
            id="exists-with-value",
        ),
        pytest.param(
            "x",
            GT,
            ["1", "2"],
            'values: Invalid value: ["1","2"]: '
            "for 'Gt', 'Lt' operators, exactly one value is required",
            id="gt-two-values",
        ),
        pytest.param(
            "x",
            LT,
            ["a", "<b>"],
            '[values: Invalid value: ["a","\\u003cb\\u003e"]: '
            "for 'Gt', 'Lt' operators, exactly one "
            f'value is required, values[0]: Invalid value: "a": {INTEGER_RULE}, '
            f'values[1]: Invalid value: "<b>": {INTEGER_RULE}, '
            f'values[1][x]: Invalid value: "<b>": {LABEL_VALUE_RULE}]',
            id="lt-aggregate-go-json",
        ),
    ],
)
def test_requirement_constructor(
    key: str, op: Operator, values: list[str], message: str | None
) -> None:
    if message is None:
        built = new_requirement(key, op, values)
        assert (built.key, built.operator, built.values) == (key, op, tuple(sorted(values)))
    else:
        with pytest.raises(SelectorError) as caught:
            new_requirement(key, op, values)
        assert str(caught.value) == message


@pytest.mark.parametrize(
    ("requirements", "expected"),
    [
        pytest.param(
            [req("x", IN, "abc", "def"), req("y", NOTIN, "jkl"), req("z", EXISTS)],
            "x in (abc,def),y notin (jkl),z",
            id="in-notin-exists",
        ),
        pytest.param(
            [req("x", NOTIN, "abc", "def"), req("y", NEQ, "jkl"), req("z", DNE)],
            "x notin (abc,def),y!=jkl,!z",
            id="notin-neq-dne",
        ),
        pytest.param(
            [req("x", NOTIN, "abc"), req("y", IN, "jkl", "mno"), req("z", NOTIN, "")],
            "x notin (abc),y in (jkl,mno),z notin ()",
            id="empty-notin",
        ),
        pytest.param(
            [req("x", EQ, "abc"), req("y", DEQ, "jkl"), req("z", NEQ, "a"), req("z", EXISTS)],
            "x=abc,y==jkl,z!=a,z",
            id="equalities",
        ),
        pytest.param(
            [req("x", GT, "2"), req("y", LT, "8"), req("z", EXISTS)], "x>2,y<8,z", id="ordering"
        ),
        pytest.param([Requirement("x", IN, ("b", "a"))], "x in (a,b)", id="safe-sort"),
    ],
)
def test_to_string(requirements: list[Requirement], expected: str) -> None:
    assert str(Selector(tuple(requirements))) == expected


@pytest.mark.parametrize(
    ("requirements", "label", "expected"),
    [
        pytest.param([Requirement("key", IN, ("value",))], "key", "value", id="in-one"),
        pytest.param([Requirement("key", IN, ("value", "value2"))], "key", None, id="in-two"),
        pytest.param(
            [Requirement("key", IN, ("value", "value1")), Requirement("key2", IN, ("value2",))],
            "key2",
            "value2",
            id="second-key",
        ),
        pytest.param([Requirement("key", EQ, ("value",))], "key", "value", id="equals"),
        pytest.param([Requirement("key", DEQ, ("value",))], "key", "value", id="double-equals"),
        pytest.param([Requirement("key", NEQ, ("value",))], "key", None, id="not-equals"),
        pytest.param(
            [Requirement("key", IN, ("value",)), Requirement("key2", IN, ("value2",))],
            "key",
            "value",
            id="first",
        ),
        pytest.param(
            [Requirement("key", EXISTS), Requirement("key", EQ, ("v",))],
            "key",
            None,
            id="first-term-decides",
        ),
    ],
)
def test_requires_exact_match(
    requirements: list[Requirement], label: str, expected: str | None
) -> None:
    assert Selector(tuple(requirements)).requires_exact(label) == expected


def test_equality_terms() -> None:
    selector = parse_selector("a=1,b==2,c in (3,4),d!=5,e notin (6),f,!g,h>7")
    assert selector.equality_terms() == [
        ("a", frozenset({"1"})),
        ("b", frozenset({"2"})),
        ("c", frozenset({"3", "4"})),
    ]
    assert EVERYTHING.equality_terms() == []


def test_parse_selector_cached_shares_results() -> None:
    before = parse_selector_cached.cache_info().hits
    first = parse_selector_cached("cached-key in (a,b)")
    second = parse_selector_cached("cached-key in (a,b)")
    assert first is second
    assert first == parse_selector("cached-key in (a,b)")
    assert parse_selector_cached.cache_info().hits == before + 1
    with pytest.raises(SelectorError, match="expected: !, identifier"):
        parse_selector_cached("=")


def test_selectors_are_hashable_values() -> None:
    assert hash(parse_selector("a=b,c")) == hash(parse_selector("c,a=b"))
    assert {parse_selector("a=b"): 1}[parse_selector("a = b")] == 1
    assert parse_selector("a==b") != parse_selector("a=b")


# --- metav1 ParseToLabelSelector ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("", {}, id="empty"),
        pytest.param("a=b", {"matchLabels": {"a": "b"}}, id="equals"),
        pytest.param("a==b", {"matchLabels": {"a": "b"}}, id="double-equals"),
        pytest.param("a=x,a=y", {"matchLabels": {"a": "y"}}, id="last-duplicate-wins"),
        pytest.param(
            "a in (y,x)",
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["x", "y"]}]},
            id="in",
        ),
        pytest.param(
            "a notin (x)",
            {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["x"]}]},
            id="notin",
        ),
        pytest.param("a", {"matchExpressions": [{"key": "a", "operator": "Exists"}]}, id="exists"),
        pytest.param(
            "!a", {"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, id="dne"
        ),
        pytest.param(
            "x in ()",
            {"matchExpressions": [{"key": "x", "operator": "In", "values": [""]}]},
            id="in-empty-value",
        ),
        pytest.param(
            "baz in (norf,qux),foo=bar",
            {
                "matchLabels": {"foo": "bar"},
                "matchExpressions": [{"key": "baz", "operator": "In", "values": ["norf", "qux"]}],
            },
            id="mixed",
        ),
    ],
)
def test_to_label_selector(text: str, expected: dict[str, object]) -> None:
    assert parse_selector(text).to_label_selector() == expected
    assert parse_to_label_selector(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("a!=b", '"!=" is not a valid label selector operator', id="neq"),
        pytest.param("a>1", '"gt" isn\'t supported in label selectors', id="gt"),
        pytest.param("b,a<1", '"lt" isn\'t supported in label selectors', id="lt"),
        pytest.param(
            "=x",
            'couldn\'t parse the selector string "=x": '
            "found '=', expected: !, identifier, or 'end of string'",
            id="parse-error-wrapped",
        ),
    ],
)
def test_to_label_selector_errors(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_to_label_selector(text)
    assert str(caught.value) == message


# --- hypothesis: generated selectors --------------------------------------------------------

_ALNUM = "abcxyzABZ019"
_LOWER = "abcxyz019"


def _bracketed(edges: str, middle: str, max_middle: int) -> st.SearchStrategy[str]:
    """One edge character, or edge + middle characters + edge (the label-name shape)."""
    edge = st.sampled_from(edges)
    return st.one_of(
        edge,
        st.builds(lambda a, m, b: a + m + b, edge, st.text(middle, max_size=max_middle), edge),
    )


_DNS_LABEL = _bracketed(_LOWER, _LOWER + "-", 6)
_NAME = _bracketed(_ALNUM, _ALNUM + "-_.", 12)
_KEYS = st.one_of(
    st.sampled_from(["a", "b", "app", "in", "notin", "example.com/tier", "x.y/z_1"]),
    _NAME,
    st.builds(
        lambda labels, name: ".".join(labels) + "/" + name,
        st.lists(_DNS_LABEL, min_size=1, max_size=3),
        _NAME,
    ),
)
_VALUES = st.one_of(st.sampled_from(["", "v", "w", "1", "in", "notin", "a.b-c_d"]), _NAME)
_INTEGERS = st.one_of(
    st.integers(0, 2**63 - 1).map(str), st.sampled_from(["0", "007", "1", "2", "10"])
)


@st.composite
def _requirements(draw: st.DrawFn) -> Requirement:
    key = draw(_KEYS)
    op = draw(st.sampled_from(list(Operator)))
    if op in (EXISTS, DNE):
        values: list[str] = []
    elif op in (GT, LT):
        values = [draw(_INTEGERS)]
    elif op in (IN, NOTIN):
        values = draw(st.lists(_VALUES, min_size=1, max_size=4))
    else:
        values = [draw(_VALUES)]
    return new_requirement(key, op, values)


_SELECTORS = st.lists(_requirements(), max_size=6).map(
    lambda reqs: Selector(tuple(sorted(reqs, key=lambda r: r.key)))
)
_SPACES = st.sampled_from(["", " ", "\t", "  ", "\n", "\r\n "])


def _tokens(requirement: Requirement) -> list[str]:
    """The requirement as tokens (empty values are no token at all)."""
    op = requirement.operator
    if op is EXISTS:
        return [requirement.key]
    if op is DNE:
        return ["!", requirement.key]
    if op in (IN, NOTIN):
        inner: list[str] = []
        for index, value in enumerate(sorted(requirement.values)):
            if index:
                inner.append(",")
            if value:
                inner.append(value)
        return [requirement.key, op.value, "(", *inner, ")"]
    symbol = {EQ: "=", DEQ: "==", NEQ: "!=", GT: ">", LT: "<"}[op]
    return [requirement.key, symbol, *[v for v in requirement.values if v]]


def _is_word(token: str) -> bool:
    return token not in {"!", "=", "==", "!=", ">", "<", "(", ")", ","}


@given(_SELECTORS)
def test_property_round_trip_and_canonical(selector: Selector) -> None:
    text = str(selector)
    parsed = parse_selector(text)
    assert parsed == selector
    assert str(parsed) == text
    assert str(parse_selector(str(parsed))) == text


@given(_SELECTORS, st.data())
def test_property_whitespace_and_order_do_not_matter(
    selector: Selector, data: st.DataObject
) -> None:
    requirements = list(selector.requirements)
    if len({r.key for r in requirements}) == len(requirements):
        requirements = data.draw(st.permutations(requirements))
    pieces: list[str] = []
    for index, requirement in enumerate(requirements):
        if index:
            pieces.append(data.draw(_SPACES) + "," + data.draw(_SPACES))
        previous = ""
        for token in _tokens(requirement):
            gap = data.draw(_SPACES)
            if previous and _is_word(previous) and _is_word(token) and not gap:
                gap = " "
            pieces.append(gap + token)
            previous = token
    text = data.draw(_SPACES) + "".join(pieces) + data.draw(_SPACES)
    assert parse_selector(text) == selector


_INT_LABEL = re.compile(r"[+-]?[0-9]+")


def _reference_matches(selector: Selector, labels: dict[str, str]) -> bool:
    """Label-selector semantics written out directly from the upstream doc comments."""
    for requirement in selector.requirements:
        present = requirement.key in labels
        value = labels.get(requirement.key, "")
        op = requirement.operator
        if op in (EQ, DEQ, IN):
            ok = present and value in requirement.values
        elif op in (NEQ, NOTIN):
            ok = not present or value not in requirement.values
        elif op is EXISTS:
            ok = present
        elif op is DNE:
            ok = not present
        else:
            ok = (
                present
                and _INT_LABEL.fullmatch(value) is not None
                and -(2**63) <= int(value) < 2**63
                and (
                    int(value) > int(requirement.values[0])
                    if op is GT
                    else int(value) < int(requirement.values[0])
                )
            )
        if not ok:
            return False
    return True


_LABEL_VALUES = st.one_of(
    _VALUES, _INTEGERS, st.sampled_from(["-3", "+4", "1e3", "9223372036854775808", " 5", "3_0"])
)


@given(_SELECTORS, st.data())
def test_property_matches_agrees_with_reference(selector: Selector, data: st.DataObject) -> None:
    keys = [r.key for r in selector.requirements] + ["other"]
    labels = data.draw(st.dictionaries(st.sampled_from(keys), _LABEL_VALUES, max_size=len(keys)))
    assert selector.matches(labels) is _reference_matches(selector, labels)
    assert all(r.matches(labels) for r in selector.requirements) is selector.matches(labels)


def _attempt(parse: Callable[[str], T], text: str) -> T | SelectorError:
    """The parse result, or the SelectorError it raised (anything else propagates)."""
    try:
        return parse(text)
    except SelectorError as err:
        return err


_GRAMMAR_PIECES = st.sampled_from(
    [
        "x",
        "a/b",
        "A/",
        "in",
        "notin",
        "(",
        ")",
        ",",
        "=",
        "==",
        "!",
        "!=",
        ">",
        "<",
        " ",
        "\t",
        "\x00",
        "1",
        "-1",
        "\u00e9",
        "\\",
        "k" * 64,
        "v.",
        "",
    ]
)


@given(st.one_of(st.text(max_size=40), st.lists(_GRAMMAR_PIECES, max_size=12).map("".join)))
def test_property_parser_is_total(text: str) -> None:
    """Any text either parses (and then re-parses from its canonical form) or is a SelectorError."""
    outcome = _attempt(parse_selector, text)
    if isinstance(outcome, SelectorError):
        assert str(outcome)
    else:
        assert parse_selector(str(outcome)) == outcome
