"""The parser of prometheus-adapter's Go templates: `text/template` syntax with `<<` `>>`
delimiters, to a tree of nodes.

PURE. This module owns :func:`parse`: text and actions, with `<<-`/`->>` whitespace trimming and
`<</* comments */>>`; pipelines (`.`, `.Field.Sub`, `$var`, `$var.Field`, string, raw string
and number literals, `true`/`false`/`nil`, parenthesised pipelines, `|` chaining, `$x :=` and
`$x =`); `if`/`else if`/`else`, `range` (with `$i, $v :=` and `else`) and `with` blocks. An
unknown function is refused here, at configuration load. Errors are
:class:`~.gotemplate_values.TemplateError` with text/template's messages. It must not
evaluate anything (:mod:`.gotemplate` does).

Cost: O(len(template)), once per template at configuration load.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Final

from custom_metrics_server.prometheus.gotemplate_values import FUNCTIONS, TemplateError

__all__ = [
    "LEFT",
    "RIGHT",
    "ActionNode",
    "BlockNode",
    "CallNode",
    "FieldNode",
    "LiteralNode",
    "PipelineNode",
    "TextNode",
    "parse",
]

LEFT: Final = "<<"
RIGHT: Final = ">>"


@dataclass(frozen=True, slots=True)
class FieldNode:
    """`.`, `.A.B`, `$x` or `$x.A`: base None is the dot."""

    base: str | None  # None: the dot; "$x": a variable
    path: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LiteralNode:
    """A string, number, bool or nil literal."""

    value: object


@dataclass(frozen=True, slots=True)
class CallNode:
    """A call of a builtin function with its argument operands."""

    function: str
    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class PipelineNode:
    """Commands joined by `|`, with the variables it declares or assigns."""

    commands: tuple[Any, ...]  # each a CallNode or an operand; later ones get the previous value
    declare: tuple[str, ...] = ()
    assign: bool = False


@dataclass(slots=True)
class TextNode:
    """Text outside actions, printed as is."""

    text: str


@dataclass(slots=True)
class ActionNode:
    """`<<pipeline>>`: printed unless it declares a variable."""

    pipeline: PipelineNode


@dataclass(slots=True)
class BlockNode:
    """`if`, `range` or `with`, with its body and its `else` part."""

    kind: str  # if / range / with
    pipeline: PipelineNode
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

    def pipeline(self, *, allow_declare: bool = True) -> PipelineNode:
        declare: tuple[str, ...] = ()
        assign = False
        if allow_declare:
            declare, assign = self._declaration()
        commands = [self._command()]
        while (token := self.peek()) is not None and token[0] == "pipe":
            self.take()
            commands.append(self._command())
        return PipelineNode(tuple(commands), declare, assign)

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
        if isinstance(head, CallNode) and not head.args:
            return CallNode(head.function, tuple(operands[1:]))
        if len(operands) > 1:
            raise TemplateError("can't give argument to non-function")
        return head

    def _operand(self) -> Any:
        kind, text = self.take()
        if kind == "string":
            return LiteralNode(_unquote(text))
        if kind == "raw":
            return LiteralNode(text[1:-1])
        if kind == "number":
            return LiteralNode(float(text) if "." in text else int(text))
        if kind == "lparen":
            inner = self.pipeline(allow_declare=False)
            if self.take()[0] != "rparen":
                raise TemplateError("unclosed left paren")
            return inner
        if kind == "field":
            if text == ".":
                return FieldNode(None, ())
            base, dot, rest = text.partition(".")
            path = tuple(part for part in rest.split(".") if part) if dot else ()
            return FieldNode(base or None, path)
        if kind == "var":
            return FieldNode(text, ())
        if kind == "ident":
            if text in ("true", "false"):
                return LiteralNode(text == "true")
            if text == "nil":
                return LiteralNode(None)
            if text not in FUNCTIONS:
                raise TemplateError(f'function "{text}" not defined')
            return CallNode(text, ())
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
    block: BlockNode
    in_else: bool = False
    chained: bool = False  # opened by `else if`: closed by its parent's `end`


def parse(source: str) -> list[Any]:
    """The nodes of a template: TextNode, ActionNode and BlockNode, in order."""
    parts = _split_actions(source)
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
                target().append(TextNode(text))
            continue
        words = text.strip().split(None, 1)
        keyword = words[0] if words else ""
        rest = words[1] if len(words) > 1 else ""
        if keyword in ("if", "range", "with"):
            block = BlockNode(keyword, _ActionParser(rest).pipeline())
            target().append(block)
            stack.append(_Frame(block))
        elif keyword == "else":
            if not stack or stack[-1].in_else:
                raise TemplateError("unexpected {{else}}")
            stack[-1].in_else = True
            sub = rest.split(None, 1)
            if sub and sub[0] in ("if", "with"):
                nested = BlockNode(sub[0], _ActionParser(sub[1] if len(sub) > 1 else "").pipeline())
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
            target().append(ActionNode(_ActionParser(text).pipeline()))
    if stack:
        raise TemplateError(f"unexpected EOF: unclosed {stack[-1].block.kind}")
    return root
