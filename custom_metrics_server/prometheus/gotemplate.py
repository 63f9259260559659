"""A Go `text/template` subset with prometheus-adapter's `<<` `>>` delimiters.

PURE. prometheus-adapter compiles `metricsQuery` and `resources.template` with Go's
text/template, so existing configurations use its syntax and rely on its output formatting
(`<<.GroupBySlice>>` prints `[pod]`, a missing map key prints `<no value>`). This module parses
that language once at configuration load and renders it per query. This module owns
:class:`Template` (parse once with :func:`.gotemplate_parse.parse`, then execute like
`template.Execute`) and :class:`Fields` (struct-like data); values, printing and the builtins
are :mod:`.gotemplate_values`. The language:

* text and actions, with `<<-`/`->>` whitespace trimming and `<</* comments */>>`;
* pipelines: `.`, `.Field`, `.Field.Sub`, `$var`, `$var.Field`, string (`"..."`, raw), number,
  `true`/`false`/`nil` literals, parenthesised pipelines, `|` chaining;
* `if`/`else if`/`else`, `range` (over lists and maps, with `$i, $v :=`, with `else`), `with`,
  variable declaration `$x := ...` and assignment `$x = ...`;
* the built-in functions `index`, `len`, `print`, `printf`, `println`, `eq`, `ne`, `lt`, `le`,
  `gt`, `ge`, `and`, `or`, `not`, `join` (absent from Go's builtins, but a common mistake users
  make; it is refused at load like any unknown function).

Go's `fmt` rules for `%v` are followed for the values the adapter passes: strings, string
lists, string maps (sorted keys) and integers.

It must not know prometheus-adapter's rules (:mod:`.rules` gives templates their data).

Cost: parsing is O(len(template)); rendering is O(output) plus the pipeline evaluations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from custom_metrics_server.prometheus.gotemplate_parse import (
    ActionNode,
    BlockNode,
    CallNode,
    FieldNode,
    LiteralNode,
    PipelineNode,
    TextNode,
    parse,
)
from custom_metrics_server.prometheus.gotemplate_values import (
    FUNCTIONS,
    TemplateError,
    go_format,
    truth,
)

__all__ = ["Fields", "Template"]


class Template:
    """A parsed template; `render(data)` executes it like `template.Execute`."""

    def __init__(self, source: str, *, name: str = "template") -> None:
        self.source = source
        self.name = name
        try:
            self._nodes = parse(source)
        except TemplateError as err:
            raise TemplateError(f"template: {name}: {err}") from None

    def render(self, data: object) -> str:
        """Execute with `data` as the dot; raises TemplateError like `Execute`'s errors."""
        out: list[str] = []
        try:
            self._run(self._nodes, data, {"$": data}, out)
        except TemplateError as err:
            raise TemplateError(f"template: {self.name}: {err}") from None
        return "".join(out)

    def _run(self, nodes: list[Any], dot: object, scope: dict[str, object], out: list[str]) -> None:
        for node in nodes:
            if isinstance(node, TextNode):
                out.append(node.text)
            elif isinstance(node, ActionNode):
                value = self._pipeline(node.pipeline, dot, scope)
                if not node.pipeline.declare:
                    out.append(go_format(value))
            else:
                self._block(node, dot, scope, out)

    def _block(
        self, block: BlockNode, dot: object, scope: dict[str, object], out: list[str]
    ) -> None:
        inner = dict(scope)
        if block.kind == "range":
            value = self._evaluate(block.pipeline, dot, inner)
            items: list[tuple[object, object]]
            if isinstance(value, Mapping):
                items = [(key, value[key]) for key in sorted(value)]
            elif isinstance(value, Sequence) and not isinstance(value, str):
                items = list(enumerate(value))
            elif value is None:
                items = []
            elif isinstance(value, int) and not isinstance(value, bool):
                items = [(i, i) for i in range(value)]
            else:
                raise TemplateError(f"range can't iterate over {go_format(value)}")
            if not items:
                self._run(block.otherwise, dot, scope, out)
                return
            names = block.pipeline.declare
            for key, item in items:
                if len(names) == 1:
                    inner[names[0]] = item
                elif len(names) == 2:
                    inner[names[0]] = key
                    inner[names[1]] = item
                self._run(block.body, item, inner, out)
            return
        value = self._pipeline(block.pipeline, dot, inner)
        if truth(value):
            self._run(block.body, value if block.kind == "with" else dot, inner, out)
        else:
            self._run(block.otherwise, dot, scope, out)

    def _pipeline(self, pipeline: PipelineNode, dot: object, scope: dict[str, object]) -> object:
        value = self._evaluate(pipeline, dot, scope)
        for name in pipeline.declare:
            if pipeline.assign and name not in scope:
                raise TemplateError(f"undefined variable: {name}")
            scope[name] = value
        return value

    def _evaluate(self, pipeline: PipelineNode, dot: object, scope: dict[str, object]) -> object:
        value: object = None
        for position, command in enumerate(pipeline.commands):
            final = (value,) if position else ()
            value = self._command(command, dot, scope, final)
        return value

    def _command(
        self, command: Any, dot: object, scope: dict[str, object], final: tuple[object, ...]
    ) -> object:
        if isinstance(command, CallNode):
            args = [self._operand(arg, dot, scope) for arg in command.args]
            args.extend(final)
            try:
                return FUNCTIONS[command.function](*args)
            except TemplateError:
                raise
            except TypeError as err:
                raise TemplateError(f"wrong arguments for {command.function}: {err}") from None
        if final:
            raise TemplateError("can't give argument to non-function")
        return self._operand(command, dot, scope)

    def _operand(self, operand: Any, dot: object, scope: dict[str, object]) -> object:
        if isinstance(operand, LiteralNode):
            return operand.value
        if isinstance(operand, PipelineNode):
            return self._evaluate(operand, dot, dict(scope))
        if isinstance(operand, FieldNode):
            if operand.base is None:
                value = dot
            elif operand.base in scope:
                value = scope[operand.base]
            else:
                raise TemplateError(f"undefined variable: {operand.base}")
            for name in operand.path:
                value = _field(value, name)
            return value
        raise TemplateError(f"cannot evaluate {operand!r}")  # pragma: no cover


def _field(value: object, name: str) -> object:
    if isinstance(value, Mapping):
        if name in value:
            return value[name]
        if isinstance(value, Fields):
            raise TemplateError(f"can't evaluate field {name} in type {value.type_name}")
        return None
    raise TemplateError(f"can't evaluate field {name} in type {type(value).__name__}")


class Fields(dict[str, object]):
    """The data of a template execution: a struct whose unknown fields are an error (as Go's
    `can't evaluate field X in type T`), unlike a map whose missing keys print `<no value>`."""

    strict = True

    def __init__(self, type_name: str, values: Mapping[str, object]) -> None:
        super().__init__(values)
        self.type_name = type_name
