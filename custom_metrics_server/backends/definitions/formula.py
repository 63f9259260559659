"""A `formula` source's CEL expression: compiled once, evaluated each interval over the values
of other metrics of the namespace, with a bounded cost, never Python `eval`.

The language is CEL (the language of Kubernetes' validation rules and of KEDA's
scalingModifiers), run by the `common-expression-language` package (the Rust `cel` crate's
interpreter; docs/metric-definitions.md says why this one). Each input is a double named as in
`spec.source.formula.inputs`; the result must be a number.

What a formula may hold: numbers, its inputs, `true`/`false`, arithmetic (`+ - * / %`),
comparisons, `&& || !`, the conditional `c ? x : y`, and the functions `min`, `max`, `abs`
(any count of numbers; ours, in Python), `double` and `int`. What it may not: string, bytes,
list and map literals, member access and method calls (so no macro such as `map` or `all`
has anything to iterate), any other function. That subset is what bounds the cost: with
nothing to iterate, an evaluation visits each node of the expression once, and the expression
is at most `MAX_EXPRESSION_LENGTH` characters. CEL does not mix int and double: `a + 1` is a
type error, `a + 1.0` is right (the compile-time trial below says so).

Refused at compile time, with a reason for the definition's status: a syntax error, a name
that is not an input, a function or literal outside the subset, and a result that is not a
number when every input is 1.0 (a trial evaluation; a result that depends on the values is
checked again at each evaluation). At evaluation: a missing input, a CEL error (integer
division by zero, overflow, a type error) or a result that is not a finite number (a double
division by zero gives infinity) is a reason, never an exception.

Cost (docs/performance.md, "MetricDefinition sources"): compile O(length), about 50 us;
evaluate O(length), under 10 us for the formulas of the docs.
"""

from __future__ import annotations

import functools
import importlib
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import cel

#: The CRD's cap on `spec.source.formula.expression`, enforced here too.
MAX_EXPRESSION_LENGTH: Final = 1024
#: A reason quotes at most this much of an interpreter's message.
_MESSAGE: Final = 200

_OPERATORS: Final = frozenset(
    {
        "_+_", "_-_", "_*_", "_/_", "_%_", "-_", "!_",
        "_<_", "_<=_", "_>_", "_>=_", "_==_", "_!=_",
        "_&&_", "_||_", "_?_:_",
    }
)  # fmt: skip
_NUMERIC_FUNCTIONS: Final = frozenset({"double", "int"})
#: Characters that begin a string, bytes, list or map literal.
_LITERALS: Final = re.compile(r"[\"'\[\]{}]")
#: A `.` before a name: member access or a method call (a number's `.` is followed by a digit).
_MEMBER: Final = re.compile(r"\.\s*[A-Za-z_]")


def _numbers(name: str, args: tuple[object, ...]) -> list[int | float]:
    if not args:
        raise TypeError(f"{name}() needs at least one number")
    numbers: list[int | float] = []
    for arg in args:
        if isinstance(arg, bool) or not isinstance(arg, int | float):
            raise TypeError(f"{name}() takes numbers, not {type(arg).__name__}")
        numbers.append(arg)
    return numbers


def _min(*args: object) -> int | float:
    return min(_numbers("min", args))


def _max(*args: object) -> int | float:
    return max(_numbers("max", args))


def _abs(*args: object) -> int | float:
    if len(args) != 1:
        raise TypeError("abs() takes one number")
    return abs(_numbers("abs", args)[0])


_FUNCTIONS: Final = {"min": _min, "max": _max, "abs": _abs}
ALLOWED_FUNCTIONS: Final = frozenset(_FUNCTIONS) | _NUMERIC_FUNCTIONS


@functools.cache
def _cel() -> ModuleType:
    """The interpreter, imported at the first formula: `import cel` also loads the package's
    command line (rich, typer, prompt-toolkit, pygments: 200 ms of CPU and 28 MB), which a
    server without formulas should not pay (docs/performance.md, "MetricDefinition sources")."""
    return importlib.import_module("cel")


@dataclass(frozen=True, slots=True)
class Formula:
    """A compiled formula: `evaluate` it with its inputs' values."""

    expression: str
    inputs: frozenset[str]
    program: cel.Program

    def evaluate(self, values: Mapping[str, float]) -> float | str:
        """The formula's value over `values` (every input's), or why there is none. O(length)."""
        missing = sorted(self.inputs.difference(values))
        if missing:
            return f"no value for the input(s) {', '.join(missing)}"
        variables = {name: float(values[name]) for name in self.inputs}
        return _result(_run(self.program, variables))


def compile_formula(expression: str, inputs: Collection[str]) -> Formula | str:
    """`expression` compiled over the named inputs, or the reason it is refused. O(length)."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        return f"the formula is {len(expression)} characters, over {MAX_EXPRESSION_LENGTH}"
    literal = _LITERALS.search(expression)
    if literal is not None:
        return (
            f"the formula has {literal.group()!r} at {literal.start()}: strings, lists and maps "
            "are not part of a formula (numbers and inputs only)"
        )
    member = _MEMBER.search(expression)
    if member is not None:
        return (
            f"the formula has {member.group()!r} at {member.start()}: member access and method "
            "calls are not part of a formula"
        )
    try:
        program: cel.Program = _cel().compile(expression)
    except ValueError as error:
        return f"the formula does not parse: {_message(error)}"
    names = frozenset(inputs)
    unknown = sorted(set(program.variables()) - names)
    if unknown:
        return f"the formula names {', '.join(unknown)}, which is not an input"
    refused = sorted(set(program.functions()) - _OPERATORS - ALLOWED_FUNCTIONS)
    if refused:
        return (
            f"the formula calls {', '.join(refused)}; a formula may call only "
            f"{', '.join(sorted(ALLOWED_FUNCTIONS))}"
        )
    trial = _run(program, dict.fromkeys(names, 1.0))
    if isinstance(trial, _Failed) and trial.type_error:
        return f"the formula does not evaluate with every input 1.0: {trial.reason}"
    if not isinstance(trial, _Failed) and not _is_number(trial):
        return f"the formula's result is a {_type_name(trial)}, not a number"
    return Formula(expression, names, program)


@dataclass(frozen=True, slots=True)
class _Failed:
    reason: str
    type_error: bool


def _run(program: cel.Program, variables: dict[str, float]) -> object:
    context = _cel().Context(variables, _FUNCTIONS)
    try:
        result: object = program.execute(context)
    except ZeroDivisionError:
        return _Failed("division by zero", type_error=False)
    except OverflowError as error:
        return _Failed(f"overflow: {_message(error)}", type_error=False)
    except (TypeError, RuntimeError, ValueError) as error:
        return _Failed(_message(error), type_error=True)
    return result


def _result(result: object) -> float | str:
    if isinstance(result, _Failed):
        return f"the formula failed: {result.reason}"
    if not _is_number(result):
        return f"the formula's result is a {_type_name(result)}, not a number"
    assert isinstance(result, int | float)
    value = float(result)
    if not math.isfinite(value):
        return f"the formula's result is {value} (a division by zero?), not a finite number"
    return value


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    return type(value).__name__


def _message(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= _MESSAGE else text[: _MESSAGE - 1] + "…"
