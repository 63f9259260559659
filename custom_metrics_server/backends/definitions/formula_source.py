"""The `formula` source: a CEL expression over other External metrics of the definition's
namespace (docs/metric-definitions.md, "Source `formula`"), on `formula.py`.

The maker compiles the expression once (a new generation of the definition is a new source,
compiled again) and refuses, `InvalidFormula`, what does not compile or names its own metric.
Each `interval` the source reads every input's value through `SourceTools.external_value`
(the sum of that metric's values served by another definition of **the same namespace**: the
namespace is the definition's, never the spec's) and evaluates; a missing input or a failed
evaluation is the source's error, with the reason, and no value.

Cycles (a formula reading a formula that reads it, at any depth) are refused by the catalog
(`formula_cycles`, run when a namespace's definitions change): each formula on a cycle is not
valid, `InvalidFormula`, the cycle named. Evaluation itself never recurses: an input's value is
what its definition holds from its own last read.

Cost: the maker O(length of the expression); a refresh O(inputs + length);
`formula_cycles` O(formulas^2 x inputs) per namespace change (at most the namespace's
`definitions` limit of formulas).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from custom_metrics_server.backends.definitions.formula import Formula, compile_formula
from custom_metrics_server.backends.definitions.polled import Polled
from custom_metrics_server.backends.definitions.source import SourceError, SourceTools, Value
from custom_metrics_server.backends.definitions.spec import Definition, Refused

__all__ = ["FormulaSource", "formula_cycles", "formula_inputs", "make_formula"]

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

    async def read(self) -> list[Value]:
        """The inputs' values now, and the formula over them."""
        now = self.clock()
        values: dict[str, float] = {}
        missing = []
        for name, metric in self.inputs.items():
            found = self._external_value(self.namespace, metric, now)
            if found is None:
                missing.append(f"{name} ({metric})")
            else:
                values[name] = found
        if missing:
            raise SourceError(
                f"no value for the input(s) {', '.join(missing)} in namespace {self.namespace}"
            )
        result = self.formula.evaluate(values)
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
