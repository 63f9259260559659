"""The `formula` source: a CEL expression over other External metrics of the definition's
namespace (docs/metric-definitions.md, "Source `formula`"), on `formula.py`.

The maker compiles the expression once (a new generation of the definition is a new source,
compiled again) and refuses, `InvalidFormula`, what does not compile or names its own metric.
Each `interval` the source reads every input's value in **the definition's namespace** (never
the spec's, never another) and evaluates:

* an input a definition of the namespace serves: the sum of that definition's External values,
  from memory (`SourceTools.external_value`);
* any other input: the platform's External metric of that name in the namespace, its series
  summed, read through the server's engine (`SourceTools.platform_value`, `PlatformInputs`:
  the routes, deadlines and failure policies of a request apply), and only when the platform
  lists it in `formulaPlatformInputs` (such a metric may hold more than the namespace's own
  data: a cluster-wide queue).

A missing input, an input the engine failed on (its reason) or a failed evaluation is the
source's error, with the reason, and no value.

The catalog refuses (`formula_refusals`, run when a namespace's definitions change): a formula
on a cycle of inputs (a formula reading a formula that reads it, at any depth), `InvalidFormula`
with the cycle named; a formula with an input no definition of the namespace serves and the
platform does not allow, `InputNotAllowed` naming the input. Evaluation itself never recurses:
a definition's value is what it holds from its own last read, and the engine never reads the
definitions backend for a formula (`plugins.external_reads`).

Cost: the maker O(length of the expression); a refresh O(inputs + length), plus one engine
read per platform input, concurrently; `formula_refusals` O(formulas^2 x inputs) per namespace
change (at most the namespace's `definitions` limit of formulas).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Final

from custom_metrics_server.backends.definitions.formula import Formula, compile_formula
from custom_metrics_server.backends.definitions.polled import Polled
from custom_metrics_server.backends.definitions.source import SourceError, SourceTools, Value
from custom_metrics_server.backends.definitions.spec import Definition, Refused
from custom_metrics_server.domain import ExternalSample
from custom_metrics_server.errors import StatusError

__all__ = [
    "ExternalRead",
    "FormulaSource",
    "PlatformInputs",
    "formula_cycles",
    "formula_inputs",
    "formula_refusals",
    "make_formula",
]

#: (namespace, metric) -> the server's answer to that External metric with no selector.
ExternalRead = Callable[[str, str], Awaitable[Sequence[ExternalSample]]]

#: The CRD's cap on `spec.source.formula.inputs`, enforced here too.
MAX_INPUTS: Final = 16


def formula_inputs(definition: Definition) -> dict[str, str]:
    """A formula definition's inputs, name -> metric; `Refused` (InvalidFormula) when
    malformed. O(inputs)."""
    raw = definition.source_spec.get("inputs")
    if not isinstance(raw, list) or not raw:
        raise Refused("InvalidFormula", "spec.source.formula.inputs: at least one input")
    if len(raw) > MAX_INPUTS:
        raise Refused("InvalidFormula", f"spec.source.formula.inputs: at most {MAX_INPUTS}")
    inputs: dict[str, str] = {}
    for index, item in enumerate(raw):
        name = item.get("name") if isinstance(item, Mapping) else None
        metric = item.get("metricName") if isinstance(item, Mapping) else None
        if not isinstance(name, str) or not isinstance(metric, str) or not name or not metric:
            raise Refused(
                "InvalidFormula", f"spec.source.formula.inputs[{index}]: a name and a metricName"
            )
        if name in inputs:
            raise Refused("InvalidFormula", f"spec.source.formula.inputs: {name} given twice")
        if metric == definition.metric:
            raise Refused(
                "InvalidFormula",
                f"spec.source.formula.inputs[{index}]: {metric} is this definition's own metric",
            )
        inputs[name] = metric
    return inputs


class PlatformInputs:
    """The platform's External metrics a formula may read (`allows`: the entry's
    `formulaPlatformInputs`), read through the server's engine once it exists (`connect`, by
    `plugins.external_reads`). PURE: the read is the engine's."""

    def __init__(self, allows: Callable[[str], bool]) -> None:
        self.allows = allows
        self._read: ExternalRead | None = None

    def connect(self, read: ExternalRead) -> None:
        """Read through `read` from now on."""
        self._read = read

    async def value(self, namespace: str, metric: str) -> float | None:
        """The sum of the platform's series of `metric` in `namespace` (no selector), None
        without one; `SourceError` when not allowed or when the engine failed (its reason).
        O(series)."""
        if not self.allows(metric):
            raise SourceError(not_allowed(namespace, metric))
        if self._read is None:
            raise SourceError("the server's other backends are not connected yet")
        try:
            samples = await self._read(namespace, metric)
        except StatusError as err:
            raise SourceError(err.message) from err
        return math.fsum(float(sample.value) for sample in samples) if samples else None


def not_allowed(namespace: str, metric: str) -> str:
    """Why an input no definition serves is not read from the platform."""
    return (
        f"no definition of namespace {namespace} serves {metric}, and the platform does not "
        f"let formulas read its External metric {metric} (formulaPlatformInputs)"
    )


class FormulaSource(Polled):
    """One definition's compiled formula (see the module)."""

    def __init__(
        self, definition: Definition, formula: Formula, inputs: dict[str, str], tools: SourceTools
    ) -> None:
        super().__init__(definition.interval)
        self.namespace = definition.namespace
        self.formula = formula
        self.inputs = inputs
        self._external_value = tools.external_value
        self._defines = tools.defines
        self._platform_value = tools.platform_value

    async def _platform(self, name: str, metric: str) -> float | str | None:
        """A platform input's value, or why it has none (naming the input)."""
        assert self._platform_value is not None
        try:
            return await self._platform_value(self.namespace, metric)
        except SourceError as err:
            return f"input {name} ({metric}): {err}"

    async def read(self) -> list[Value]:
        """The inputs' values now, and the formula over them."""
        now = self.clock()
        values: dict[str, float | str | None] = {}
        platform: dict[str, str] = {}
        for name, metric in self.inputs.items():
            found = self._external_value(self.namespace, metric, now)
            if (
                found is None
                and self._platform_value is not None
                and not self._defines(self.namespace, metric)
            ):
                platform[name] = metric
            else:
                values[name] = found
        if platform:
            read = await asyncio.gather(*(self._platform(n, m) for n, m in platform.items()))
            values.update(zip(platform, read, strict=True))
        missing = [f"{name} ({self.inputs[name]})" for name, v in values.items() if v is None]
        problems = [v for v in values.values() if isinstance(v, str)]
        if missing:
            problems.insert(
                0, f"no value for the input(s) {', '.join(missing)} in namespace {self.namespace}"
            )
        if problems:
            raise SourceError("; ".join(problems))
        result = self.formula.evaluate(
            {name: v for name, v in values.items() if v is not None and not isinstance(v, str)}
        )
        if isinstance(result, str):
            raise SourceError(result)
        return [Value(result, now)]


def make_formula(definition: Definition, tools: SourceTools) -> FormulaSource:
    """The `SourceMaker` of `Formula`: compiled once, here."""
    inputs = formula_inputs(definition)
    expression = definition.source_spec.get("expression")
    if not isinstance(expression, str) or not expression.strip():
        raise Refused("InvalidFormula", "spec.source.formula.expression is required")
    compiled = compile_formula(expression, inputs)
    if isinstance(compiled, str):
        raise Refused("InvalidFormula", f"spec.source.formula.expression: {compiled}")
    return FormulaSource(definition, compiled, inputs, tools)


def formula_cycles(definitions: Iterable[Definition]) -> dict[str, str]:
    """Of one namespace's serving definitions, the metrics of the formulas on a cycle of
    inputs, each with a message naming its cycle. O(formulas^2 x inputs)."""
    graph: dict[str, list[str]] = {}
    for definition in definitions:
        if definition.source_type != "Formula":
            continue
        try:
            graph[definition.metric] = sorted(set(formula_inputs(definition).values()))
        except Refused:
            continue  # refused by its maker, with its own reason
    found: dict[str, str] = {}
    for start in sorted(graph):
        # Breadth-first from its inputs: on a cycle exactly when it reaches itself.
        parent: dict[str, str] = {}
        queue = [start]
        while queue and start not in parent:
            metric = queue.pop(0)
            for target in graph.get(metric, ()):
                if target not in parent:
                    parent[target] = metric
                    queue.append(target)
        if start in parent:
            chain = [start]
            while True:
                chain.append(parent[chain[-1]])
                if chain[-1] == start:
                    break
            found[start] = "its inputs form a cycle: " + " -> ".join(reversed(chain))
    return found


def formula_refusals(
    definitions: Iterable[Definition], allows: Callable[[str], bool]
) -> dict[str, tuple[str, str]]:
    """Of one namespace's serving definitions, the metrics of the formulas refused, each
    with (reason, message): on a cycle of inputs, `InvalidFormula` (`formula_cycles`); with an
    input no definition of the namespace serves and the platform does not allow (`allows`),
    `InputNotAllowed` naming the input. O(formulas^2 x inputs)."""
    serving = list(definitions)
    served = {definition.metric for definition in serving}
    found = {
        metric: ("InvalidFormula", message) for metric, message in formula_cycles(serving).items()
    }
    for definition in serving:
        if definition.source_type != "Formula" or definition.metric in found:
            continue
        try:
            inputs = formula_inputs(definition)
        except Refused:
            continue  # refused by its maker, with its own reason
        for name, metric in inputs.items():
            if metric not in served and not allows(metric):
                found[definition.metric] = (
                    "InputNotAllowed",
                    f"input {name} ({metric}): {not_allowed(definition.namespace, metric)}",
                )
                break
    return found
