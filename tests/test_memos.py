"""Every memo of a pure function (a `functools.lru_cache`) gives what the function gives: asked
through random inputs, twice, and after inputs equal to them but written differently (an lru
cache keys by equality: `Decimal("1.5")` and `Decimal("1.50")` are one key, so their answers
must be one answer). The stateful caches have their own differential tests (docs/architecture.md,
"Caches")."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custom_metrics_server.api import negotiation, protowire, render_cache
from custom_metrics_server.backends.passthrough import decode
from custom_metrics_server.machinery import fields, label_parser, quantity
from custom_metrics_server.metrics_api import request as metrics_request
from custom_metrics_server.resources import pod_view

ACCEPTS = st.sampled_from(
    [
        "",
        "*/*",
        "application/json",
        "application/json;q=0.5, application/vnd.kubernetes.protobuf",
        "application/json;as=Table;g=meta.k8s.io;v=v1",
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        "text/html",
        "application/yaml, */*;q=0.1",
    ]
) | st.text(max_size=40)
SELECTORS = st.sampled_from(
    ["", "a=b", "a in (x,y),b!=c", "!a", "a", "x==y,z notin (1)", "bad selector ("]
) | st.text(max_size=20)


def same(memo: Any, *args: Any, **kwargs: Any) -> None:
    """`memo` answers as the function it wraps, or raises as it does."""
    function: Callable[..., Any] = memo.__wrapped__
    try:
        expected: Any = function(*args, **kwargs)
    except Exception as err:  # the memo must fail the same way (lru_cache keeps no failure)
        with pytest.raises(type(err)):
            memo(*args, **kwargs)
        return
    for _ in range(2):
        found = memo(*args, **kwargs)
        if isinstance(expected, BaseException):  # an answer that is an error value (a 406)
            assert (type(found), found.args) == (type(expected), expected.args)
        else:
            assert found == expected


@settings(max_examples=200, deadline=None)
@given(
    st.decimals(allow_nan=False, allow_infinity=False, places=6)
    | st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.sampled_from(list(quantity.Format)),
)
def test_quantity_text_memo(value: Decimal | float, fmt: quantity.Format) -> None:
    same(quantity._format_cached, value, fmt)
    if isinstance(value, Decimal):  # an equal value written with more zeros: one cache key
        zeros = value + Decimal("0E-9")
        if zeros == value:
            same(quantity._format_cached, zeros, fmt)


@settings(max_examples=100, deadline=None)
@given(SELECTORS)
def test_selector_parse_memos(text: str) -> None:
    same(label_parser.parse_selector_cached, text)
    same(fields.parse_field_selector_cached, text)


USER_AGENTS = st.sampled_from(
    ["", "curl/8.5.0", "Mozilla/5.0 (X11)", "Wget/1.21", "kubectl/v1.32.4 (linux/amd64)"]
) | st.text(max_size=20)


@settings(max_examples=100, deadline=None)
@given(ACCEPTS, st.booleans(), USER_AGENTS, st.sampled_from([None, True, False]))
def test_negotiation_memos(
    accept: str, aggregated: bool, user_agent: str, asked: bool | None
) -> None:
    same(negotiation._negotiate, accept)
    same(negotiation.metric_representation, accept, user_agent, asked)
    same(negotiation.accept_clauses, accept)
    same(negotiation.go_accept_clauses, accept)
    same(negotiation._negotiate_discovery, accept, aggregated=aggregated)
    same(metrics_request._negotiate, accept)


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(["v1", "custom.metrics.k8s.io/v1beta2", "metrics.k8s.io/v1beta1"]),
    st.sampled_from(["MetricValueList", "Status", "PodMetrics"]),
    st.integers(-1, 4_102_444_800),
    st.sampled_from(["0s", "15s", "1m30s", "-2h", "bad"]),
    st.sampled_from(["100m", "1.5", "128Mi", "1e3", "-2", "bad", "0.1Ki"]),
)
def test_encoding_memos(api_version: str, kind: str, second: int, duration: str, text: str) -> None:
    same(protowire._envelope_head, api_version, kind)
    same(protowire._time_body, render_cache.rfc3339_second(max(second, 0)))
    same(protowire._duration_body, duration)
    same(render_cache.rfc3339_second, max(second, 0))
    same(pod_view._parse_text, text)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.sampled_from(["1", "100m", "0m", "-3", "1.5", "1500m", "2Ki", "1e3", "bad", "0.1"])
        | st.from_regex(r"-?[0-9]{1,17}m?", fullmatch=True),
        max_size=10,
    ),
    st.lists(
        st.sampled_from(["2026-01-02T03:04:05Z", "2026-01-02T03:04:05+01:00", "bad", ""]),
        max_size=4,
    ),
)
def test_pass_through_decode_memos(quantities: list[str], times: list[str]) -> None:
    """The pass-through's memoised quantity and time parsing, warm, against the parser
    (`Quantity.parse`, `datetime.fromisoformat`) itself."""
    for text in quantities * 2:
        try:
            expected: object = quantity.Quantity.parse(text).value
        except (ValueError, ArithmeticError):
            expected = None
        found = decode._quantity(text)
        assert found == expected, text
    for text in times * 2:
        try:
            moment: float | None = dt.datetime.fromisoformat(text).timestamp()
        except ValueError:
            moment = None
        assert decode._time_of(text) == moment
