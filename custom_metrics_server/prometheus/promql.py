"""PromQL fragments built from Kubernetes selectors: label matchers and range windows.

PURE. Every value that reaches a query goes through `go_quote` (PromQL string literals use Go's
escaping: `strconv.Unquote` parses them), and values inside a regex matcher are first escaped
with Go's `regexp.QuoteMeta`, so no selector value can change the shape of a query.

Deliberate difference from prometheus-adapter: it passes `in`/`notin` and single `=` values
through as regular expressions ("a passthrough for their label selector"); here a value is
always a literal, as a Kubernetes label selector means.

Cost: O(total length of the selector) per call.
"""

from __future__ import annotations

import re
from typing import Final

from custom_metrics_server.errors import BadRequest
from custom_metrics_server.machinery.durations import parse_prometheus_duration
from custom_metrics_server.machinery.gostrings import go_quote
from custom_metrics_server.machinery.labels import Operator, Selector

#: A Prometheus label name (`model.LabelNameRE`).
LABEL_NAME: Final = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_REGEX_SPECIAL: Final = frozenset("\\.+*?()|[]{}^$")
_RANGE: Final = re.compile(r"\[\s*((?:\d+(?:ms|[smhdwy]))+)\s*(?::[^\]]*)?\]")


def quote_meta(text: str) -> str:
    """Go `regexp.QuoteMeta`: escape every regex metacharacter."""
    return "".join("\\" + ch if ch in _REGEX_SPECIAL else ch for ch in text)


def eq(label: str, value: str) -> str:
    """`label="value"` (prometheus-adapter `LabelEq`)."""
    return f"{label}={go_quote(value)}"


def neq(label: str, value: str) -> str:
    """`label!="value"`."""
    return f"{label}!={go_quote(value)}"


def matches(label: str, regex: str) -> str:
    """`label=~"regex"`."""
    return f"{label}=~{go_quote(regex)}"


def not_matches(label: str, regex: str) -> str:
    """`label!~"regex"`."""
    return f"{label}!~{go_quote(regex)}"


def any_of(values: tuple[str, ...] | list[str]) -> str:
    """A fully anchored (PromQL anchors regex matchers) alternation of literal values."""
    return "|".join(quote_meta(value) for value in sorted(values))


def selector_matchers(selector: Selector, *, what: str) -> list[tuple[str, str, str]]:
    """(label, matcher expression, LabelValuesByName value) for each requirement, in order.

    Raises `BadRequest` (400) for a key that is no Prometheus label name or an operator PromQL
    cannot express (`gt`, `lt`): silently dropping a term would widen the answer.
    """
    out: list[tuple[str, str, str]] = []
    for requirement in selector.requirements:
        key = requirement.key
        if not LABEL_NAME.fullmatch(key):
            raise BadRequest(
                f"{what}: {key!r} is not a valid Prometheus label name "
                "([a-zA-Z_][a-zA-Z0-9_]*), so it cannot select Prometheus series"
            )
        values = requirement.values
        operator = requirement.operator
        joined = "|".join(sorted(values))
        if operator in (Operator.EQUALS, Operator.DOUBLE_EQUALS) or (
            operator is Operator.IN and len(values) == 1
        ):
            expression = eq(key, values[0])
        elif operator is Operator.IN:
            expression = matches(key, any_of(values))
        elif operator is Operator.NOT_EQUALS or (operator is Operator.NOT_IN and len(values) == 1):
            expression = neq(key, values[0])
        elif operator is Operator.NOT_IN:
            expression = not_matches(key, any_of(values))
        elif operator is Operator.EXISTS:
            expression = neq(key, "")
        elif operator is Operator.DOES_NOT_EXIST:
            expression = eq(key, "")
        else:
            raise BadRequest(
                f"{what}: the operator {operator.value!r} of {str(requirement)!r} cannot be "
                "expressed as a Prometheus label matcher"
            )
        out.append((key, expression, joined))
    return out


def range_window(query: str) -> int | None:
    """The longest range selector (`[2m]`, `[5m:30s]`) of a query, in whole seconds.

    This is the `windowSeconds` of a rate: the span of samples the value summarises. None when
    the query has no range (a gauge read as is).
    """
    longest: float | None = None
    for match in _RANGE.finditer(query):
        seconds = parse_prometheus_duration(match.group(1))
        longest = seconds if longest is None else max(longest, seconds)
    if longest is None:
        return None
    return max(1, round(longest))
