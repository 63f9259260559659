"""The literal prefix the route index files a `metricRegex` under (`query.regex_prefix`).

The table pins the prefixes the index used when it read them with the standard library's
private regex parser (each row was checked against it before the switch), and the property
test checks the one thing that matters for routing: every name the pattern matches starts with
the prefix (a prefix too long would hide the route from a name it matches).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custom_metrics_server.query.regex_prefix import literal_prefix
from custom_metrics_server.query.routes import Route, RouteIndex, glob_pattern

TABLE = [
    ("http_requests", "http_requests"),
    ("http_.*", "http_"),
    (glob_pattern("queue_?_depth"), "queue_"),
    (glob_pattern("a.b*"), "a.b"),
    ("queue_(depth|age)_.*", "queue_"),
    ("(?i)http_.*", ""),
    ("(?x)http _ .*  # a comment", "http_"),
    ("(?s)ab.c", "ab"),
    ("^http_.*", ""),
    ("abc*", "ab"),
    ("ab+c", "a"),
    ("ab?c", "a"),
    ("ab{2}c", "a"),
    ("a{", "a{"),
    ("a{,}b", ""),
    ("a*?b", ""),
    ("abc|abd|abe", "ab"),
    ("abc|xyz", ""),
    ("abc|ab", "ab"),
    ("ab|ab*", "a"),
    ("ab(c)|ab(d)", "ab"),
    (r"a\.b", "a.b"),
    (r"ab\|c", "ab|c"),
    (r"x\-y", "x-y"),
    (r"a\db", "a"),
    (r"\w+", ""),
    (r"\n_x", "\n_x"),
    (r"a\x41", "aA"),
    ("[a]bc", "abc"),
    ("x[ab]c", "x"),
    ("(?:abc)def", "abcdef"),
    ("(?:ab|ac)d", "a"),
    ("(?:abc)*d", ""),
    ("a(?i:b)c", "a"),
    ("a(b|c)d", "a"),
    ("(abc)", ""),
    ("a$", "a"),
    ("é_ü.*", "é_ü"),
    ("", ""),
    (".*", ""),
    ("abc(?i)", ""),  # invalid: global flags not at the start
    ("a[", ""),  # invalid
]


@pytest.mark.parametrize(("pattern", "prefix"), TABLE)
def test_the_prefix_is_the_literal_start_of_the_pattern(pattern: str, prefix: str) -> None:
    assert literal_prefix(pattern) == prefix


ATOMS = st.sampled_from(
    ["a", "b", "_", ".", r"\.", "[ab]", "[a]", "(?:ab)", "(?:a|ab)", "(a|b)", r"\d", "{", "é"]
)
QUANTIFIERS = st.sampled_from(["", "", "", "*", "+", "?", "{2}", "{0,1}", "*?"])


@st.composite
def patterns(draw: st.DrawFn) -> str:
    branches = [
        "".join(draw(ATOMS) + draw(QUANTIFIERS) for _ in range(draw(st.integers(0, 5))))
        for _ in range(draw(st.integers(1, 3)))
    ]
    return "|".join(branches)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_every_match_starts_with_the_prefix(data: st.DataObject) -> None:
    pattern = data.draw(patterns())
    try:
        re.compile(pattern)
    except re.error:
        return
    prefix = literal_prefix(pattern)
    for _ in range(5):
        name = data.draw(st.from_regex(pattern, fullmatch=True))
        assert name.startswith(prefix), (pattern, prefix, name)


def test_the_index_finds_a_regex_route_by_its_prefix_and_no_other() -> None:
    routes = [
        Route(metric_regex="queue_(depth|age)_.*"),
        Route(metric_regex="(?:http|grpc)_requests"),
        Route(metric="orders_*"),
    ]
    index = RouteIndex(list(enumerate(routes)))
    assert index.matching("queue_depth_total") == [0]
    assert index.matching("grpc_requests") == [1]
    assert index.matching("orders_open") == [2]
    assert index.matching("queue_size") == []
