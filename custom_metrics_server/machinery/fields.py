"""Kubernetes field selectors: apimachinery `fields.ParseSelector` and the metav1 field check.

PURE: standard library only, no I/O. This module owns the field selector of the served API: a
port of `pkg/fields/selector.go` (`ParseSelector` with its backslash escaping, `splitTerms`,
`splitTerm`, `EscapeValue`/`UnescapeValue`, `RequiresExactMatch`, matching) followed by
`pkg/runtime/conversion.go` `DefaultMetaV1FieldSelectorConversion` (only `metadata.name` and
`metadata.namespace` are known). Errors are `SelectorError`s with upstream's text. It must not
know label selectors (`labels`).

Cost: parsing is O(n log n) in the number of terms (upstream sorts them); matching is
O(terms), one dict lookup each.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Final

from custom_metrics_server.machinery.gostrings import go_quote
from custom_metrics_server.machinery.validation import SelectorError

__all__ = [
    "FIELD_EVERYTHING",
    "KNOWN_FIELD_SELECTORS",
    "FieldRequirement",
    "FieldSelector",
    "escape_field_value",
    "parse_field_selector",
    "parse_field_selector_cached",
    "split_term",
    "split_terms",
    "unescape_field_value",
]

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


def split_term(term: str) -> tuple[str, str, str] | None:
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
        split = split_term(term)
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
