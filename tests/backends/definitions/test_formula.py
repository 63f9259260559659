"""CEL formulas of the `formula` source (backends/definitions/formula.py): compiled once,
evaluated over named numbers; every failure a reason, never an exception."""

from __future__ import annotations

import time

import pytest

from custom_metrics_server.backends.definitions.formula import (
    MAX_EXPRESSION_LENGTH,
    Formula,
    compile_formula,
)

VALUES = {"a": 12.0, "b": 3.0, "orders": 10.0, "workers": 0.0}

EVALUATED = [
    ("orders / max(workers, 1.0)", 10.0),
    ("a + b * 2.0", 18.0),
    ("(a - b) / b", 3.0),
    ("-a", -12.0),
    ("a > 10.0 ? a : b", 12.0),
    ("a > 100.0 ? a : b", 3.0),
    ("a > 10 ? a : b", 12.0),  # CEL compares int with double; it does not add them
    ("a > b && b > 1.0 ? 1.0 : 0.0", 1.0),
    ("!(a > b) ? 1.0 : 0.0", 0.0),
    ("min(a, b)", 3.0),
    ("max(a, b, 40.0)", 40.0),
    ("min(a, 2)", 2.0),
    ("abs(b - a)", 9.0),
    ("double(int(a) / 5)", 2.0),
    ("int(a) % 5", 2.0),
    ("1.5e3 * b", 4500.0),
    ("42", 42.0),
]


@pytest.mark.parametrize(("expression", "expected"), EVALUATED)
def test_formulas_evaluate_over_their_inputs(expression: str, expected: float) -> None:
    formula = compile_formula(expression, ["a", "b", "orders", "workers"])
    assert isinstance(formula, Formula), formula
    assert formula.evaluate(VALUES) == expected


def test_one_compiled_formula_serves_many_values() -> None:
    formula = compile_formula("a > 10.0 ? a : b", ["a", "b"])
    assert isinstance(formula, Formula)
    assert [formula.evaluate({"a": a, "b": -1.0}) for a in (5.0, 10.0, 11.0)] == [-1.0, -1.0, 11.0]


REFUSED = [
    ("a +", "does not parse"),
    ("a + c", "names c, which is not an input"),
    ("a + 1", "does not evaluate with every input 1.0"),
    ("a > b", "result is a bool"),
    ("true", "result is a bool"),
    ("null", "result is a null"),
    ('size("abc")', "strings, lists and maps"),
    ("b'x'", "strings, lists and maps"),
    ("[1.0, 2.0].map(x, x * a)", "strings, lists and maps"),
    ("{1: a}", "strings, lists and maps"),
    ("a.map(x, x)", "member access and method calls"),
    ("a . b", "member access and method calls"),
    ("dyn(a)", "calls dyn"),
    ("type(a) == double ? 1.0 : 0.0", "names double"),
    ("unknown(a)", "calls unknown"),
    ("a" + " + a" * MAX_EXPRESSION_LENGTH, f"over {MAX_EXPRESSION_LENGTH}"),
]


@pytest.mark.parametrize(("expression", "because"), REFUSED)
def test_formulas_outside_the_subset_are_refused_with_a_reason(
    expression: str, because: str
) -> None:
    refused = compile_formula(expression, ["a", "b"])
    assert isinstance(refused, str)
    assert because in refused


FAILING = [
    ("a / b", {"a": 1.0, "b": 0.0}, "not a finite number"),
    ("-a / b", {"a": 1.0, "b": 0.0}, "not a finite number"),
    ("b / b", {"a": 1.0, "b": 0.0}, "not a finite number"),  # NaN
    ("double(int(a) / int(b))", {"a": 1.0, "b": 0.0}, "division by zero"),
    ("double(int(a) * int(a))", {"a": 4e18, "b": 0.0}, "overflow"),
    # Results whose type depends on the values: the trial with every input 1.0 passes.
    ("a >= b ? a : a > 0.0", {"a": 0.0, "b": 1.0}, "result is a bool"),
    ("a >= b ? a : null", {"a": 0.0, "b": 1.0}, "result is a null"),
    ("a * b", {"a": 1.0}, "no value for the input(s) b"),
]


@pytest.mark.parametrize(("expression", "values", "because"), FAILING)
def test_evaluation_failures_are_reasons(
    expression: str, values: dict[str, float], because: str
) -> None:
    formula = compile_formula(expression, ["a", "b"])
    assert isinstance(formula, Formula), formula
    reason = formula.evaluate(values)
    assert isinstance(reason, str)
    assert because in reason


def test_the_longest_formula_costs_a_bounded_cpu_time() -> None:
    """Nothing in the subset iterates, so the longest formula allowed is evaluated in a time
    linear in its length; the bound (2 s of CPU for 100 evaluations) is far from the few
    milliseconds measured and from a runaway loop."""
    terms = (MAX_EXPRESSION_LENGTH - 1) // 4
    formula = compile_formula("a" + " + a" * terms, ["a"])
    assert isinstance(formula, Formula)
    started = time.process_time()
    for _ in range(100):
        assert formula.evaluate({"a": 1.0}) == terms + 1.0
    assert time.process_time() - started < 2.0
