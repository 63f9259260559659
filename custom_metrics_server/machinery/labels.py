"""Kubernetes label selectors: requirements, matching and canonical text.

PURE: standard library only, no I/O. This module owns the values of a label selector, a port of
apimachinery `pkg/labels/selector.go`'s `Requirement` and `internalSelector` with
`pkg/selection/operator.go`: `new_requirement` (`labels.NewRequirement`, with the exact
validation messages), matching, `String()` and `to_label_selector()` (metav1
`ParseToLabelSelector`'s conversion, `pkg/apis/meta/v1/helpers.go`). The text grammar (lexer,
parser) is `label_parser`; field selectors are `fields`.

Upstream quirks kept on purpose: `!=` and `notin` match objects lacking the key; `x>1` compares
as 64-bit integers and never matches a value that is not one.

Cost: `Requirement.matches` is O(1) (one lookup, one set probe); `Selector.matches` is
O(requirements) and stops at the first miss (the query path's per-object cost).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from typing import Final

from custom_metrics_server.machinery.gostrings import go_quote, parse_int64
from custom_metrics_server.machinery.validation import (
    SelectorError,
    aggregate,
    invalid,
    label_value_errors,
    qualified_name_errors,
)

__all__ = [
    "EVERYTHING",
    "SET_BASED",
    "Operator",
    "Requirement",
    "Selector",
    "new_requirement",
]


class Operator(enum.Enum):
    """`selection.Operator`; values are upstream's operator strings."""

    EQUALS = "="
    DOUBLE_EQUALS = "=="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"
    GREATER_THAN = "gt"
    LESS_THAN = "lt"


_POSITIVE: Final = frozenset({Operator.EQUALS, Operator.DOUBLE_EQUALS, Operator.IN})
_NEGATIVE: Final = frozenset({Operator.NOT_EQUALS, Operator.NOT_IN})
_ORDERING: Final = frozenset({Operator.GREATER_THAN, Operator.LESS_THAN})
SET_BASED: Final = frozenset({Operator.IN, Operator.NOT_IN})
_INFIX: Final = {
    Operator.EQUALS: "=",
    Operator.DOUBLE_EQUALS: "==",
    Operator.NOT_EQUALS: "!=",
    Operator.GREATER_THAN: ">",
    Operator.LESS_THAN: "<",
    Operator.IN: " in ",
    Operator.NOT_IN: " notin ",
}


@dataclasses.dataclass(frozen=True, slots=True)
class Requirement:
    """One label requirement (`labels.Requirement`); build checked ones with `new_requirement`."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()
    _value_set: frozenset[str] = dataclasses.field(
        default_factory=frozenset, init=False, repr=False, compare=False
    )
    _bound: int | None = dataclasses.field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.values, tuple):
            object.__setattr__(self, "values", tuple(self.values))
        object.__setattr__(self, "_value_set", frozenset(self.values))
        if self.operator in _ORDERING and len(self.values) == 1:
            object.__setattr__(self, "_bound", parse_int64(self.values[0]))

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether `labels` satisfy this requirement; O(1) (one lookup, one set probe)."""
        operator = self.operator
        if operator is Operator.EXISTS:
            return self.key in labels
        if operator is Operator.DOES_NOT_EXIST:
            return self.key not in labels
        value = labels.get(self.key)
        if operator in _POSITIVE:
            return value is not None and value in self._value_set
        if operator in _NEGATIVE:
            return value is None or value not in self._value_set
        bound = self._bound
        if value is None or bound is None:
            return False
        number = parse_int64(value)
        if number is None:
            return False
        return number > bound if operator is Operator.GREATER_THAN else number < bound

    def __str__(self) -> str:
        """Upstream `Requirement.String()`: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `!k`, `k>1`."""
        operator = self.operator
        if operator is Operator.EXISTS:
            return self.key
        if operator is Operator.DOES_NOT_EXIST:
            return "!" + self.key
        values = self.values
        shown = values[0] if len(values) == 1 else ",".join(sorted(values))
        if operator in SET_BASED:
            return f"{self.key}{_INFIX[operator]}({shown})"
        return f"{self.key}{_INFIX[operator]}{shown}"


def new_requirement(
    key: str, operator: Operator, values: Sequence[str] = (), *, check_key: bool = True
) -> Requirement:
    """`labels.NewRequirement`: validate and build a requirement, or raise `SelectorError`.

    `check_key=False` skips the key check (the parser has checked it, with its own message).
    O(len(values) log len(values)).
    """
    errs: list[str] = []
    if check_key:
        key_errs = qualified_name_errors(key)
        if key_errs:
            errs.append(invalid("key", key, "; ".join(key_errs)))
    if operator in SET_BASED:
        if not values:
            errs.append(
                invalid("values", values, "for 'in', 'notin' operators, values set can't be empty")
            )
    elif operator in (Operator.EQUALS, Operator.DOUBLE_EQUALS, Operator.NOT_EQUALS):
        if len(values) != 1:
            errs.append(
                invalid("values", values, "exact-match compatibility requires one single value")
            )
    elif operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST):
        if values:
            errs.append(
                invalid("values", values, "values set must be empty for exists and does not exist")
            )
    else:  # GREATER_THAN, LESS_THAN
        if len(values) != 1:
            errs.append(
                invalid("values", values, "for 'Gt', 'Lt' operators, exactly one value is required")
            )
        errs.extend(
            invalid(
                f"values[{index}]", value, "for 'Gt', 'Lt' operators, the value must be an integer"
            )
            for index, value in enumerate(values)
            if parse_int64(value) is None
        )
    for index, value in enumerate(values):
        value_errs = label_value_errors(value)
        if value_errs:
            errs.append(invalid(f"values[{index}][{key}]", value, "; ".join(value_errs)))
    if errs:
        raise SelectorError(aggregate(errs))
    return Requirement(key, operator, tuple(sorted(set(values))))


_LABEL_SELECTOR_OPERATORS: Final = {
    Operator.IN: "In",
    Operator.NOT_IN: "NotIn",
    Operator.EXISTS: "Exists",
    Operator.DOES_NOT_EXIST: "DoesNotExist",
}


@dataclasses.dataclass(frozen=True, slots=True)
class Selector:
    """A parsed label selector: the AND of its requirements, sorted by key as upstream parses."""

    requirements: tuple[Requirement, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.requirements, tuple):
            object.__setattr__(self, "requirements", tuple(self.requirements))

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether `labels` satisfy every requirement; O(requirements), stops at the first miss."""
        return all(requirement.matches(labels) for requirement in self.requirements)

    def is_everything(self) -> bool:
        """Upstream `Empty()`: no requirement, so every object matches."""
        return not self.requirements

    def __str__(self) -> str:
        """Upstream `internalSelector.String()`: the canonical form clients send."""
        return ",".join(str(requirement) for requirement in self.requirements)

    def equality_terms(self) -> list[tuple[str, frozenset[str]]]:
        """(key, allowed values) of each `=`, `==` and `in` requirement, for index lookups."""
        return [
            (requirement.key, requirement._value_set)
            for requirement in self.requirements
            if requirement.operator in _POSITIVE
        ]

    def requires_exact(self, label: str) -> str | None:
        """Upstream `RequiresExactMatch`: the single value the first `label` term pins, or None."""
        for requirement in self.requirements:
            if requirement.key == label:
                if requirement.operator in _POSITIVE and len(requirement.values) == 1:
                    return requirement.values[0]
                return None
        return None

    def to_label_selector(self) -> dict[str, object]:
        """metav1 `ParseToLabelSelector` as JSON (omitempty); the empty selector gives `{}`.

        `!=` raises `"!=" is not a valid label selector operator`; `gt`/`lt` raise
        `"gt" isn't supported in label selectors`. Repeated `=` keys keep the last value.
        """
        match_labels: dict[str, str] = {}
        match_expressions: list[dict[str, object]] = []
        for requirement in self.requirements:
            operator = requirement.operator
            if operator is Operator.EQUALS or operator is Operator.DOUBLE_EQUALS:
                if len(requirement._value_set) != 1:
                    raise SelectorError("equals operator must have exactly one value")
                match_labels[requirement.key] = requirement.values[0]
                continue
            name = _LABEL_SELECTOR_OPERATORS.get(operator)
            if name is None:
                quoted = go_quote(operator.value)
                if operator in _ORDERING:
                    raise SelectorError(f"{quoted} isn't supported in label selectors")
                raise SelectorError(f"{quoted} is not a valid label selector operator")
            expression: dict[str, object] = {"key": requirement.key, "operator": name}
            if requirement._value_set:
                expression["values"] = sorted(requirement._value_set)
            match_expressions.append(expression)
        result: dict[str, object] = {}
        if match_labels:
            result["matchLabels"] = match_labels
        if match_expressions:
            result["matchExpressions"] = match_expressions
        return result


EVERYTHING: Final = Selector(())
