"""A Go `text/template` subset with prometheus-adapter's `<<` `>>` delimiters.

PURE. prometheus-adapter compiles `metricsQuery` and `resources.template` with Go's
text/template, so existing configurations use its syntax and rely on its output formatting
(`<<.GroupBySlice>>` prints `[pod]`, a missing map key prints `<no value>`). This module parses
that language once at configuration load and renders it per query:

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

Cost: parsing is O(len(template)); rendering is O(output) plus the pipeline evaluations.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from custom_metrics_server.machinery.gostrings import go_quote

LEFT: Final = "<<"
RIGHT: Final = ">>"
NO_VALUE: Final = "<no value>"


class TemplateError(ValueError):
    """A template that does not parse, or that fails while rendering."""


# ---------------------------------------------------------------------------------------------
# Formatting as Go's fmt does for %v.


def go_format(value: object) -> str:
    """`fmt.Sprint(value)` for the value kinds a template sees."""
    if value is None:
        return NO_VALUE
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, Mapping):
        inner = " ".join(f"{go_format(k)}:{go_format(value[k])}" for k in sorted(value))
        return f"map[{inner}]"
    if isinstance(value, Sequence):
        return "[" + " ".join(go_format(item) for item in value) + "]"
    return str(value)


def _sprintf(fmt: str, args: Sequence[object]) -> str:
    out: list[str] = []
    index = 0
    i = 0
    while i < len(fmt):
        char = fmt[i]
        if char != "%" or i + 1 >= len(fmt):
            out.append(char)
            i += 1
            continue
        verb = fmt[i + 1]
        i += 2
        if verb == "%":
            out.append("%")
            continue
        if index >= len(args):
            out.append(f"%!{verb}(MISSING)")
            continue
        arg = args[index]
        index += 1
        if verb == "q" and isinstance(arg, str):
            out.append(go_quote(arg))
        elif verb == "d" and isinstance(arg, int) and not isinstance(arg, bool):
            out.append(str(arg))
        elif verb in "sv":
            out.append(go_format(arg))
        else:
            out.append(f"%!{verb}({type(arg).__name__}={go_format(arg)})")
    if index < len(args):
        extra = ", ".join(f"{type(a).__name__}={go_format(a)}" for a in args[index:])
        out.append(f"%!(EXTRA {extra})")
    return "".join(out)


def _truth(value: object) -> bool:
    if value is None:
        return False
    if isinstance(value, bool | int | float | str | Sequence | Mapping):
        return bool(value)
    return True


def _index(item: object, *keys: object) -> object:
    for key in keys:
        if isinstance(item, Mapping):
            item = item.get(key)
        elif isinstance(item, Sequence) and not isinstance(item, str) and isinstance(key, int):
            if not 0 <= key < len(item):
                raise TemplateError(f"error calling index: index out of range: {key}")
            item = item[key]
        else:
            raise TemplateError(f"error calling index: cannot index {go_format(item)}")
    return item


def _len(item: object) -> int:
    if isinstance(item, str | Sequence | Mapping):
        return len(item)
    raise TemplateError(f"error calling len: len of {type(item).__name__}")


def _compare(op: Callable[[Any, Any], bool]) -> Callable[..., bool]:
    def compare(left: object, *rights: object) -> bool:
        if not rights:
            raise TemplateError("missing argument for comparison")
        return any(op(left, right) for right in rights) if op is _eq else op(left, rights[0])

    return compare


def _eq(left: object, right: object) -> bool:
    return left == right


def _and(*args: object) -> object:
    result: object = None
    for arg in args:
        result = arg
        if not _truth(arg):
            return arg
    return result


def _or(*args: object) -> object:
    result: object = None
    for arg in args:
        result = arg
        if _truth(arg):
            return arg
    return result


FUNCTIONS: Final[Mapping[str, Callable[..., object]]] = {
    "index": _index,
    "len": _len,
    "print": lambda *a: "".join(go_format(x) for x in a),
    "println": lambda *a: " ".join(go_format(x) for x in a) + "\n",
    "printf": lambda fmt, *a: _sprintf(str(fmt), a),
    "eq": _compare(_eq),
    "ne": _compare(lambda a, b: a != b),
    "lt": _compare(lambda a, b: a < b),
    "le": _compare(lambda a, b: a <= b),
    "gt": _compare(lambda a, b: a > b),
    "ge": _compare(lambda a, b: a >= b),
    "and": _and,
    "or": _or,
    "not": lambda a: not _truth(a),
}

# ---------------------------------------------------------------------------------------------
# Parse tree.


@dataclass(frozen=True, slots=True)
class _Field:
    base: str | None  # None: the dot; "$x": a variable
    path: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Literal:
    value: object


@dataclass(frozen=True, slots=True)
class _Call:
    function: str
    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class _Pipeline:
    commands: tuple[Any, ...]  # each a _Call or an operand; later ones get the previous value
    declare: tuple[str, ...] = ()
    assign: bool = False


@dataclass(slots=True)
class _Text:
    text: str


@dataclass(slots=True)
class _Action:
    pipeline: _Pipeline


@dataclass(slots=True)
class _Block:
    kind: str  # if / range / with
    pipeline: _Pipeline
    body: list[Any] = field(default_factory=list)
    otherwise: list[Any] = field(default_factory=list)


_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>"(?:[^"\\\n]|\\.)*")
      | (?P<raw>`[^`]*`)
      | (?P<number>-?\d+(?:\.\d+)?)
      | (?P<decl>:=)
      | (?P<assign>=)
      | (?P<pipe>\|)
      | (?P<lparen>\()
      | (?P<rparen>\))
      | (?P<comma>,)
      | (?P<field>(?:\$[A-Za-z0-9_]*)?(?:\.[A-Za-z_][A-Za-z0-9_]*)+|\.)
      | (?P<var>\$[A-Za-z0-9_]*)
      | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)


def _unquote(text: str) -> str:
    body = text[1:-1]
    try:
        return body.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError as err:  # pragma: no cover - the token regex prevents most
        raise TemplateError(f"bad string literal {text}") from err


def _tokens(source: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    source = source.rstrip()
    while pos < len(source):
        match = _TOKEN.match(source, pos)
        if match is None or match.end() == pos:
            raise TemplateError(f"unexpected {source[pos:].strip()[:20]!r} in action")
        kind = match.lastgroup
        assert kind is not None
        out.append((kind, match.group(kind)))
        pos = match.end()
    return out


class _ActionParser:
    def __init__(self, source: str) -> None:
        self.tokens = _tokens(source)
        self.pos = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise TemplateError("unexpected end of action")
        self.pos += 1
        return token

    def pipeline(self, *, allow_declare: bool = True) -> _Pipeline:
        declare: tuple[str, ...] = ()
        assign = False
        if allow_declare:
            declare, assign = self._declaration()
        commands = [self._command()]
        while (token := self.peek()) is not None and token[0] == "pipe":
            self.take()
            commands.append(self._command())
        return _Pipeline(tuple(commands), declare, assign)

    def _declaration(self) -> tuple[tuple[str, ...], bool]:
        names: list[str] = []
        start = self.pos
        while (token := self.peek()) is not None and token[0] == "var":
            names.append(self.take()[1])
            nxt = self.peek()
            if nxt is not None and nxt[0] == "comma":
                self.take()
                continue
            if nxt is not None and nxt[0] in ("decl", "assign"):
                self.take()
                return tuple(names), nxt[0] == "assign"
            break
        self.pos = start
        return (), False

    def _command(self) -> Any:
        operands: list[Any] = []
        while (token := self.peek()) is not None and token[0] not in ("pipe", "rparen"):
            operands.append(self._operand())
        if not operands:
            raise TemplateError("missing value for command")
        head = operands[0]
        if isinstance(head, _Call) and not head.args:
            return _Call(head.function, tuple(operands[1:]))
        if len(operands) > 1:
            raise TemplateError("can't give argument to non-function")
        return head

    def _operand(self) -> Any:
        kind, text = self.take()
        if kind == "string":
            return _Literal(_unquote(text))
        if kind == "raw":
            return _Literal(text[1:-1])
        if kind == "number":
            return _Literal(float(text) if "." in text else int(text))
        if kind == "lparen":
            inner = self.pipeline(allow_declare=False)
            if self.take()[0] != "rparen":
                raise TemplateError("unclosed left paren")
            return inner
        if kind == "field":
            if text == ".":
                return _Field(None, ())
            base, dot, rest = text.partition(".")
            path = tuple(part for part in rest.split(".") if part) if dot else ()
            return _Field(base or None, path)
        if kind == "var":
            return _Field(text, ())
        if kind == "ident":
            if text in ("true", "false"):
                return _Literal(text == "true")
            if text == "nil":
                return _Literal(None)
            if text not in FUNCTIONS:
                raise TemplateError(f'function "{text}" not defined')
            return _Call(text, ())
        raise TemplateError(f"unexpected {text!r} in operand")


_KEYWORDS: Final = ("if", "range", "with", "else", "end")


def _split_actions(source: str) -> list[tuple[bool, str]]:
    """[(is_action, text)] with comments dropped and `<<-`/`->>` trimming applied."""
    parts: list[tuple[bool, str]] = []
    pos = 0
    trim_next = False
    while True:
        start = source.find(LEFT, pos)
        text = source[pos:] if start < 0 else source[pos:start]
        if trim_next:
            text = text.lstrip()
        if start < 0:
            parts.append((False, text))
            return parts
        inner = start + len(LEFT)
        if source[inner : inner + 1] == "-" and source[inner + 1 : inner + 2] in (" ", "\t", "\n"):
            text = text.rstrip()
            inner += 1
        parts.append((False, text))
        body_start = inner + len(source[inner:]) - len(source[inner:].lstrip())
        comment = source.startswith("/*", body_start)
        if comment:
            close = source.find("*/", body_start + 2)
            if close < 0:
                raise TemplateError("unclosed comment")
            end = source.find(RIGHT, close + 2)
        else:
            end = source.find(RIGHT, inner)
        if end < 0:
            raise TemplateError("unclosed action")
        trim_next = end - 2 >= inner and source[end - 1] == "-" and source[end - 2] in " \t\n"
        if not comment:
            parts.append((True, source[inner : end - 1] if trim_next else source[inner:end]))
        pos = end + len(RIGHT)


@dataclass(slots=True)
class _Frame:
    block: _Block
    in_else: bool = False
    chained: bool = False  # opened by `else if`: closed by its parent's `end`


class Template:
    """A parsed template; `render(data)` executes it like `template.Execute`."""

    def __init__(self, source: str, *, name: str = "template") -> None:
        self.source = source
        self.name = name
        try:
            self._nodes = self._parse(_split_actions(source))
        except TemplateError as err:
            raise TemplateError(f"template: {name}: {err}") from None

    @staticmethod
    def _parse(parts: list[tuple[bool, str]]) -> list[Any]:
        root: list[Any] = []
        stack: list[_Frame] = []

        def target() -> list[Any]:
            if not stack:
                return root
            top = stack[-1]
            return top.block.otherwise if top.in_else else top.block.body

        for is_action, text in parts:
            if not is_action:
                if text:
                    target().append(_Text(text))
                continue
            words = text.strip().split(None, 1)
            keyword = words[0] if words else ""
            rest = words[1] if len(words) > 1 else ""
            if keyword in ("if", "range", "with"):
                block = _Block(keyword, _ActionParser(rest).pipeline())
                target().append(block)
                stack.append(_Frame(block))
            elif keyword == "else":
                if not stack or stack[-1].in_else:
                    raise TemplateError("unexpected {{else}}")
                stack[-1].in_else = True
                sub = rest.split(None, 1)
                if sub and sub[0] in ("if", "with"):
                    nested = _Block(
                        sub[0], _ActionParser(sub[1] if len(sub) > 1 else "").pipeline()
                    )
                    target().append(nested)
                    stack.append(_Frame(nested, chained=True))
                elif rest.strip():
                    raise TemplateError(f"unexpected {rest.strip()!r} after else")
            elif keyword == "end":
                if not stack:
                    raise TemplateError("unexpected {{end}}")
                while stack.pop().chained:
                    pass
            elif not text.strip():
                raise TemplateError("missing value for command")
            else:
                target().append(_Action(_ActionParser(text).pipeline()))
        if stack:
            raise TemplateError(f"unexpected EOF: unclosed {stack[-1].block.kind}")
        return root

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
            if isinstance(node, _Text):
                out.append(node.text)
            elif isinstance(node, _Action):
                value = self._pipeline(node.pipeline, dot, scope)
                if not node.pipeline.declare:
                    out.append(go_format(value))
            else:
                self._block(node, dot, scope, out)

    def _block(self, block: _Block, dot: object, scope: dict[str, object], out: list[str]) -> None:
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
        if _truth(value):
            self._run(block.body, value if block.kind == "with" else dot, inner, out)
        else:
            self._run(block.otherwise, dot, scope, out)

    def _pipeline(self, pipeline: _Pipeline, dot: object, scope: dict[str, object]) -> object:
        value = self._evaluate(pipeline, dot, scope)
        for name in pipeline.declare:
            if pipeline.assign and name not in scope:
                raise TemplateError(f"undefined variable: {name}")
            scope[name] = value
        return value

    def _evaluate(self, pipeline: _Pipeline, dot: object, scope: dict[str, object]) -> object:
        value: object = None
        for position, command in enumerate(pipeline.commands):
            final = (value,) if position else ()
            value = self._command(command, dot, scope, final)
        return value

    def _command(
        self, command: Any, dot: object, scope: dict[str, object], final: tuple[object, ...]
    ) -> object:
        if isinstance(command, _Call):
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
        if isinstance(operand, _Literal):
            return operand.value
        if isinstance(operand, _Pipeline):
            return self._evaluate(operand, dot, dict(scope))
        if isinstance(operand, _Field):
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
