"""The label selector grammar: apimachinery `labels.Parse`, lexer and parser, same messages.

PURE: standard library only, no I/O. This module owns turning a `labelSelector` text into a
`labels.Selector`: the port of `pkg/labels/selector.go`'s `Lexer` and `Parser`, whose errors
carry upstream's exact text (a `SelectorError`, which the API answers with a 400 Status), the
per-process parse cache of the serving path, and metav1 `ParseToLabelSelector`. It must not
match objects or format selectors (`labels` does).

Upstream quirks kept on purpose: a NUL character ends a label selector where a token may start;
`in ()` means "in the empty-string value"; `x>1,2` is `x>1` plus "key 2 exists"; lengths are
counted in UTF-8 bytes as Go does.

Cost: `parse_selector` is O(n + r log r + v log v) for n characters, r requirements and v
values; `parse_selector_cached` is one dict lookup for a selector seen before.
"""

from __future__ import annotations

import functools
import re
from typing import Final

from custom_metrics_server.machinery.labels import (
    EVERYTHING,
    SET_BASED,
    Operator,
    Requirement,
    Selector,
    new_requirement,
)
from custom_metrics_server.machinery.validation import (
    SelectorError,
    invalid,
    qualified_name_errors,
)

__all__ = ["parse_selector", "parse_selector_cached", "parse_to_label_selector"]

# labels.binaryOperators, in upstream order (used verbatim in a parse error).
_BINARY_OPERATORS: Final = "in, notin, =, ==, !=, gt, lt"


# --- lexer ----------------------------------------------------------------------------------

# Token kinds, numbered as upstream's Token constants.
_EOS: Final = 1
_CLOSE: Final = 2
_COMMA: Final = 3
_BANG: Final = 4
_DOUBLE_EQUALS: Final = 5
_EQUALS: Final = 6
_GREATER: Final = 7
_IDENT: Final = 8
_IN: Final = 9
_LESS: Final = 10
_NOT_EQUALS: Final = 11
_NOT_IN: Final = 12
_OPEN: Final = 13

_SYMBOLS: Final = {
    ")": _CLOSE,
    ",": _COMMA,
    "!": _BANG,
    "==": _DOUBLE_EQUALS,
    "=": _EQUALS,
    ">": _GREATER,
    "<": _LESS,
    "!=": _NOT_EQUALS,
    "(": _OPEN,
}
_KEYWORDS: Final = {"in": _IN, "notin": _NOT_IN}
_SPECIAL: Final = frozenset("=!(),<>")
_WHITESPACE: Final = frozenset(" \t\r\n")
_IDENT_RE: Final = re.compile(r"[^=!(),<> \t\r\n\x00]+")

_Token = tuple[int, str]


def _lex(text: str) -> list[_Token]:
    """Upstream `Lexer`: tokens up to and including end-of-string; O(len(text)).

    Go reads a NUL byte as end of input: where a token may start it ends the selector; right
    after a token it is consumed as a separator. Symbols are longest-match (`==`, `!=`).
    """
    tokens: list[_Token] = []
    size = len(text)
    pos = 0
    while True:
        while pos < size and text[pos] in _WHITESPACE:
            pos += 1
        if pos >= size or text[pos] == "\x00":
            tokens.append((_EOS, ""))
            return tokens
        char = text[pos]
        if char in _SPECIAL:
            pair = text[pos : pos + 2]
            literal = pair if pair in ("==", "!=") else char
            tokens.append((_SYMBOLS[literal], literal))
            pos += len(literal)
        else:
            match = _IDENT_RE.match(text, pos)
            literal = match.group() if match is not None else char
            tokens.append((_KEYWORDS.get(literal, _IDENT), literal))
            pos += len(literal)
        if pos < size and text[pos] == "\x00":
            pos += 1


# --- parser ---------------------------------------------------------------------------------


class _RequirementError(Exception):
    """A failure inside one requirement; `parse` prefixes 'unable to parse requirement: '."""


class _Parser:
    """Upstream `Parser`: recursive descent over the token list, same messages, same order."""

    __slots__ = ("position", "tokens")

    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.position = 0

    def lookahead(self, *, values: bool = True) -> _Token:
        """The next token; in a values context `in`/`notin` are identifiers."""
        kind, literal = self.tokens[self.position]
        if values and kind in (_IN, _NOT_IN):
            kind = _IDENT
        return kind, literal

    def consume(self, *, values: bool = True) -> _Token:
        token = self.lookahead(values=values)
        self.position += 1
        return token

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while True:
            kind, literal = self.lookahead()
            if kind in (_IDENT, _BANG):
                try:
                    requirements.append(self.parse_requirement())
                except (_RequirementError, SelectorError) as err:
                    raise SelectorError(f"unable to parse requirement: {err}") from None
                kind, literal = self.consume()
                if kind == _EOS:
                    return requirements
                if kind == _COMMA:
                    kind, literal = self.lookahead()
                    if kind not in (_IDENT, _BANG):
                        raise SelectorError(f"found '{literal}', expected: identifier after ','")
                else:
                    raise SelectorError(f"found '{literal}', expected: ',' or 'end of string'")
            elif kind == _EOS:
                return requirements
            else:
                raise SelectorError(
                    f"found '{literal}', expected: !, identifier, or 'end of string'"
                )

    def parse_requirement(self) -> Requirement:
        key, operator = self.parse_key_and_infer_operator()
        if operator is not None:
            return new_requirement(key, operator, (), check_key=False)
        operator = self.parse_operator()
        values = self.parse_values() if operator in SET_BASED else self.parse_exact_value()
        return new_requirement(key, operator, sorted(values), check_key=False)

    def parse_key_and_infer_operator(self) -> tuple[str, Operator | None]:
        operator = None
        kind, literal = self.consume()
        if kind == _BANG:
            operator = Operator.DOES_NOT_EXIST
            kind, literal = self.consume()
        if kind != _IDENT:
            raise _RequirementError(f"found '{literal}', expected: identifier")
        errs = qualified_name_errors(literal)
        if errs:
            raise _RequirementError(invalid("<nil>", literal, "; ".join(errs)))
        following, _ = self.lookahead()
        if following in (_EOS, _COMMA) and operator is None:
            operator = Operator.EXISTS
        return literal, operator

    def parse_operator(self) -> Operator:
        kind, literal = self.consume(values=False)
        operator = _OPERATOR_TOKENS.get(kind)
        if operator is None:
            raise _RequirementError(f"found '{literal}', expected: {_BINARY_OPERATORS}")
        return operator

    def parse_values(self) -> set[str]:
        kind, literal = self.consume()
        if kind != _OPEN:
            raise _RequirementError(f"found '{literal}' expected: '('")
        kind, literal = self.lookahead()
        if kind in (_IDENT, _COMMA):
            values = self.parse_identifiers_list()
            closing, _ = self.consume()
            if closing != _CLOSE:  # unreachable: the list only returns before a ')'
                raise _RequirementError(f"found '{literal}', expected: ')'")
            return values
        if kind == _CLOSE:
            self.consume()
            return {""}
        raise _RequirementError(f"found '{literal}', expected: ',', ')' or identifier")

    def parse_identifiers_list(self) -> set[str]:
        values: set[str] = set()
        while True:
            kind, literal = self.consume()
            if kind == _IDENT:
                values.add(literal)
                following, following_literal = self.lookahead()
                if following == _COMMA:
                    continue
                if following == _CLOSE:
                    return values
                raise _RequirementError(f"found '{following_literal}', expected: ',' or ')'")
            if kind == _COMMA:
                if not values:
                    values.add("")  # "(,"
                following, _ = self.lookahead()
                if following == _CLOSE:
                    values.add("")  # ",)"
                    return values
                if following == _COMMA:
                    self.consume()
                    values.add("")  # ",,"
            else:
                raise _RequirementError(f"found '{literal}', expected: ',', or identifier")

    def parse_exact_value(self) -> set[str]:
        kind, _ = self.lookahead()
        if kind in (_EOS, _COMMA):
            return {""}
        kind, literal = self.consume()
        if kind == _IDENT:
            return {literal}
        raise _RequirementError(f"found '{literal}', expected: identifier")


_OPERATOR_TOKENS: Final = {
    _IN: Operator.IN,
    _EQUALS: Operator.EQUALS,
    _DOUBLE_EQUALS: Operator.DOUBLE_EQUALS,
    _GREATER: Operator.GREATER_THAN,
    _LESS: Operator.LESS_THAN,
    _NOT_IN: Operator.NOT_IN,
    _NOT_EQUALS: Operator.NOT_EQUALS,
}


def parse_selector(text: str) -> Selector:
    """`labels.Parse`; O(n + r log r + v log v) for n chars, r requirements, v values."""
    requirements = _Parser(_lex(text)).parse()
    if not requirements:
        return EVERYTHING
    requirements.sort(key=_requirement_key)  # stable, as Go's insertion sort for <= 12 items
    return Selector(tuple(requirements))


def _requirement_key(requirement: Requirement) -> str:
    return requirement.key


parse_selector_cached = functools.lru_cache(maxsize=4096)(parse_selector)


def parse_to_label_selector(text: str) -> dict[str, object]:
    """metav1 `ParseToLabelSelector`: parse, then convert; parse errors are wrapped as upstream."""
    try:
        selector = parse_selector(text)
    except SelectorError as err:
        raise SelectorError(f'couldn\'t parse the selector string "{text}": {err}') from None
    return selector.to_label_selector()
