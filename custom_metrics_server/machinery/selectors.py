"""Kubernetes label selectors and field selectors: parsing, matching, canonical text.

PURE: standard library only, no I/O. This module owns the selector grammar of the served API:

* label selectors: a port of apimachinery `pkg/labels/selector.go` (lexer, parser, `Requirement`,
  `internalSelector`), `pkg/selection/operator.go`, and the label key/value checks of
  `pkg/util/validation` with their exact messages, so a `SelectorError` carries the same text
  kube-apiserver puts in a 400 Status;
* `Selector.to_label_selector()`: metav1 `ParseToLabelSelector` (`pkg/apis/meta/v1/helpers.go`);
* field selectors: `pkg/fields/selector.go` `ParseSelector` with its backslash escaping, followed
  by `pkg/runtime/conversion.go` `DefaultMetaV1FieldSelectorConversion` (only `metadata.name`
  and `metadata.namespace` are known).

Upstream quirks kept on purpose: a NUL character ends a label selector where a token may start;
`!=` and `notin` match objects lacking the key; `in ()` means "in the empty-string value";
`x>1,2` is `x>1` plus "key 2 exists"; lengths are counted in UTF-8 bytes as Go does.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

__all__ = [
    "EVERYTHING",
    "FIELD_EVERYTHING",
    "KNOWN_FIELD_SELECTORS",
    "FieldRequirement",
    "FieldSelector",
    "Operator",
    "Requirement",
    "Selector",
    "SelectorError",
    "escape_field_value",
    "new_requirement",
    "parse_field_selector",
    "parse_field_selector_cached",
    "parse_selector",
    "parse_selector_cached",
    "parse_to_label_selector",
    "unescape_field_value",
]


class SelectorError(ValueError):
    """A selector that does not parse or convert; `str(err)` is upstream's exact message."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


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
_SET_BASED: Final = frozenset({Operator.IN, Operator.NOT_IN})
_INFIX: Final = {
    Operator.EQUALS: "=",
    Operator.DOUBLE_EQUALS: "==",
    Operator.NOT_EQUALS: "!=",
    Operator.GREATER_THAN: ">",
    Operator.LESS_THAN: "<",
    Operator.IN: " in ",
    Operator.NOT_IN: " notin ",
}
# labels.binaryOperators, in upstream order (used verbatim in a parse error).
_BINARY_OPERATORS: Final = "in, notin, =, ==, !=, gt, lt"


# --- Go formatting helpers ------------------------------------------------------------------

_GO_ESCAPES: Final = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    '"': '\\"',
    "\\": "\\\\",
}


def go_quote(text: str) -> str:
    """Go `%q` / `strconv.Quote` of a string."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    out = ['"']
    for ch in text:
        escaped = _GO_ESCAPES.get(ch)
        if escaped is not None:
            out.append(escaped)
        elif ch.isprintable():
            out.append(ch)
        else:
            code = ord(ch)
            if code < 0x20 or code == 0x7F:
                out.append(f"\\x{code:02x}")
            elif 0xDC80 <= code <= 0xDCFF:  # a surrogate-escaped byte: Go sees invalid UTF-8
                out.append(f"\\x{code - 0xDC00:02x}")
            elif code < 0x10000:
                out.append(f"\\u{code:04x}")
            else:
                out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _go_json(values: Sequence[str]) -> str:
    """Go `json.Marshal` of a []string (HTML-safe escaping as encoding/json does)."""
    text = json.dumps(list(values), ensure_ascii=False, separators=(",", ":"))
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _invalid(path: str, value: str | Sequence[str], detail: str) -> str:
    """`field.Invalid(path, value, detail).Error()`."""
    shown = go_quote(value) if isinstance(value, str) else _go_json(value)
    return f"{path}: Invalid value: {shown}: {detail}"


def _aggregate(messages: Iterable[str]) -> str:
    """`field.ErrorList.ToAggregate().Error()`: de-duplicated, bracketed when several."""
    unique = list(dict.fromkeys(messages))
    if len(unique) == 1:
        return unique[0]
    return "[" + ", ".join(unique) + "]"


def _byte_len(text: str) -> int:
    """Go `len(string)`: UTF-8 bytes."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


_INT_RE: Final = re.compile(r"([+-]?)0*([0-9]+)")
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1


def _parse_int64(text: str) -> int | None:
    """Go `strconv.ParseInt(text, 10, 64)`, or None where Go returns an error."""
    match = _INT_RE.fullmatch(text)
    if match is None or len(match.group(2)) > 19:
        return None
    number = int(match.group(1) + match.group(2))
    return number if _INT64_MIN <= number <= _INT64_MAX else None


# --- pkg/util/validation --------------------------------------------------------------------

_QNAME_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QNAME_RE: Final = re.compile(_QNAME_FMT)
_QNAME_ERR: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_QNAME_MAX: Final = 63
_LABEL_VALUE_FMT: Final = "(" + _QNAME_FMT + ")?"
_LABEL_VALUE_RE: Final = re.compile(_LABEL_VALUE_FMT)
_LABEL_VALUE_ERR: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_MAX: Final = 63
_DNS1123_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT: Final = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_RE: Final = re.compile(_DNS1123_SUBDOMAIN_FMT)
_DNS1123_SUBDOMAIN_ERR: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MAX: Final = 253


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """`validation.RegexError`."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{example}', " for example in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _max_len_error(length: int) -> str:
    return f"must be no more than {length} characters"


def _dns1123_subdomain_errors(value: str) -> list[str]:
    """`validation.IsDNS1123Subdomain`."""
    errs = []
    if _byte_len(value) > _DNS1123_SUBDOMAIN_MAX:
        errs.append(_max_len_error(_DNS1123_SUBDOMAIN_MAX))
    if _DNS1123_SUBDOMAIN_RE.fullmatch(value) is None:
        errs.append(_regex_error(_DNS1123_SUBDOMAIN_ERR, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def _qualified_name_errors(value: str) -> list[str]:
    """`validation.IsQualifiedName`: a label key is `[dns-subdomain "/"] name`."""
    parts = value.split("/")
    errs: list[str] = []
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + msg for msg in _dns1123_subdomain_errors(prefix))
    else:
        return [
            "a qualified name "
            + _regex_error(_QNAME_ERR, _QNAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif _byte_len(name) > _QNAME_MAX:
        errs.append("name part " + _max_len_error(_QNAME_MAX))
    if _QNAME_RE.fullmatch(name) is None:
        errs.append(
            "name part " + _regex_error(_QNAME_ERR, _QNAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def _label_value_errors(value: str) -> list[str]:
    """`validation.IsValidLabelValue`."""
    errs = []
    if _byte_len(value) > _LABEL_VALUE_MAX:
        errs.append(_max_len_error(_LABEL_VALUE_MAX))
    if _LABEL_VALUE_RE.fullmatch(value) is None:
        errs.append(
            _regex_error(_LABEL_VALUE_ERR, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345")
        )
    return errs


# --- label selector types -------------------------------------------------------------------


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
            object.__setattr__(self, "_bound", _parse_int64(self.values[0]))

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
        number = _parse_int64(value)
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
        if operator in _SET_BASED:
            return f"{self.key}{_INFIX[operator]}({shown})"
        return f"{self.key}{_INFIX[operator]}{shown}"


def new_requirement(key: str, operator: Operator, values: Sequence[str] = ()) -> Requirement:
    """`labels.NewRequirement`: validate and build a requirement, or raise `SelectorError`."""
    return _new_requirement(key, operator, values, check_key=True)


def _new_requirement(
    key: str, operator: Operator, values: Sequence[str], *, check_key: bool
) -> Requirement:
    errs: list[str] = []
    if check_key:
        key_errs = _qualified_name_errors(key)
        if key_errs:
            errs.append(_invalid("key", key, "; ".join(key_errs)))
    if operator in _SET_BASED:
        if not values:
            errs.append(
                _invalid("values", values, "for 'in', 'notin' operators, values set can't be empty")
            )
    elif operator in (Operator.EQUALS, Operator.DOUBLE_EQUALS, Operator.NOT_EQUALS):
        if len(values) != 1:
            errs.append(
                _invalid("values", values, "exact-match compatibility requires one single value")
            )
    elif operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST):
        if values:
            errs.append(
                _invalid("values", values, "values set must be empty for exists and does not exist")
            )
    else:  # GREATER_THAN, LESS_THAN
        if len(values) != 1:
            errs.append(
                _invalid(
                    "values", values, "for 'Gt', 'Lt' operators, exactly one value is required"
                )
            )
        errs.extend(
            _invalid(
                f"values[{index}]", value, "for 'Gt', 'Lt' operators, the value must be an integer"
            )
            for index, value in enumerate(values)
            if _parse_int64(value) is None
        )
    for index, value in enumerate(values):
        value_errs = _label_value_errors(value)
        if value_errs:
            errs.append(_invalid(f"values[{index}][{key}]", value, "; ".join(value_errs)))
    if errs:
        raise SelectorError(_aggregate(errs))
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
            return _new_requirement(key, operator, (), check_key=False)
        operator = self.parse_operator()
        values = self.parse_values() if operator in _SET_BASED else self.parse_exact_value()
        return _new_requirement(key, operator, sorted(values), check_key=False)

    def parse_key_and_infer_operator(self) -> tuple[str, Operator | None]:
        operator = None
        kind, literal = self.consume()
        if kind == _BANG:
            operator = Operator.DOES_NOT_EXIST
            kind, literal = self.consume()
        if kind != _IDENT:
            raise _RequirementError(f"found '{literal}', expected: identifier")
        errs = _qualified_name_errors(literal)
        if errs:
            raise _RequirementError(_invalid("<nil>", literal, "; ".join(errs)))
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


# --- field selectors ------------------------------------------------------------------------

KNOWN_FIELD_SELECTORS: Final = ("metadata.name", "metadata.namespace")


@dataclasses.dataclass(frozen=True, slots=True)
class FieldRequirement:
    """One field term: `operator` is "=" (upstream hasTerm, also spelt "==") or "!="."""

    field: str
    operator: str
    value: str

    def matches(self, fields: Mapping[str, str]) -> bool:
        """Upstream term `Matches`: a missing field reads as ""; O(1)."""
        actual = fields.get(self.field, "")
        return actual != self.value if self.operator == "!=" else actual == self.value

    def __str__(self) -> str:
        """Upstream term `String()`: `field=value` or `field!=value`, value escaped."""
        symbol = "!=" if self.operator == "!=" else "="
        return f"{self.field}{symbol}{escape_field_value(self.value)}"


@dataclasses.dataclass(frozen=True, slots=True)
class FieldSelector:
    """A parsed field selector: the AND of its terms, sorted by their source text."""

    requirements: tuple[FieldRequirement, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.requirements, tuple):
            object.__setattr__(self, "requirements", tuple(self.requirements))

    def requires_exact(self, field: str) -> str | None:
        """Upstream `RequiresExactMatch`: the value of the first `field=` term, or None."""
        for requirement in self.requirements:
            if requirement.field == field and requirement.operator != "!=":
                return requirement.value
        return None

    def matches(self, fields: Mapping[str, str]) -> bool:
        """Whether every term holds; O(terms)."""
        return all(requirement.matches(fields) for requirement in self.requirements)

    def is_everything(self) -> bool:
        """No terms: every object matches."""
        return not self.requirements

    def __str__(self) -> str:
        """Upstream `String()`: terms joined by ",", values escaped."""
        return ",".join(str(requirement) for requirement in self.requirements)


FIELD_EVERYTHING: Final = FieldSelector(())


def escape_field_value(value: str) -> str:
    """`fields.EscapeValue`: backslash-escape `\\`, `,` and `=`."""
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def unescape_field_value(value: str) -> str:
    """`fields.UnescapeValue`, raising `SelectorError` with upstream's message."""
    if "\\" not in value and "," not in value and "=" not in value:
        return value
    out: list[str] = []
    in_slash = False
    for char in value:
        if in_slash:
            if char not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence: \\{char}")
            out.append(char)
            in_slash = False
        elif char == "\\":
            in_slash = True
        elif char in ",=":
            raise SelectorError(
                f"invalid field selector: unescaped character in value: {ord(char)}"
            )
        else:
            out.append(char)
    if in_slash:
        raise SelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def split_terms(text: str) -> list[str]:
    """Upstream `splitTerms`: split on commas not escaped by a backslash."""
    if not text:
        return []
    if "\\" not in text:
        return text.split(",")
    terms: list[str] = []
    start = 0
    in_slash = False
    for index, char in enumerate(text):
        if in_slash:
            in_slash = False
        elif char == "\\":
            in_slash = True
        elif char == ",":
            terms.append(text[start:index])
            start = index + 1
    terms.append(text[start:])
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    """Upstream `splitTerm`: split at the first `!=`, `==` or `=` (checked in that order)."""
    equals = term.find("=")
    if equals < 0:
        return None
    if equals > 0 and term[equals - 1] == "!":
        return term[: equals - 1], "!=", term[equals + 1 :]
    if term.startswith("==", equals):
        return term[:equals], "==", term[equals + 2 :]
    return term[:equals], "=", term[equals + 1 :]


def parse_field_selector(text: str) -> FieldSelector:
    """`fields.ParseSelector` then the metav1 field-label check; O(n log n) in the term count."""
    terms = split_terms(text)
    terms.sort()
    requirements: list[FieldRequirement] = []
    for term in terms:
        if not term:
            continue
        split = _split_term(term)
        if split is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        field, operator, raw_value = split
        value = unescape_field_value(raw_value)
        if not field and not value:
            continue  # upstream Transform drops a term whose field and value are both empty
        requirements.append(FieldRequirement(field, "!=" if operator == "!=" else "=", value))
    for requirement in requirements:
        if requirement.field not in KNOWN_FIELD_SELECTORS:
            raise SelectorError(
                f"{go_quote(requirement.field)} is not a known field selector: "
                'only "metadata.name", "metadata.namespace"'
            )
    if not requirements:
        return FIELD_EVERYTHING
    return FieldSelector(tuple(requirements))


parse_field_selector_cached = functools.lru_cache(maxsize=1024)(parse_field_selector)
