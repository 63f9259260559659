"""apimachinery's validation of label keys and values, with its exact messages.

PURE: standard library only, no I/O. This module owns the checks of `pkg/util/validation`
(`IsQualifiedName`, `IsValidLabelValue`, `IsDNS1123Subdomain`) and the way
`pkg/util/validation/field` prints an error (`field.Invalid`, an `ErrorList` aggregate), and
`SelectorError`, which carries such a message to the API (kube-apiserver puts the same text in
its 400 Status). It must not parse selectors; `labels` and `fields` do.

Cost: each check is O(len(value)) (one regex match and a length).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final

from custom_metrics_server.machinery.gostrings import go_json_strings, go_len, go_quote

__all__ = [
    "SelectorError",
    "aggregate",
    "invalid",
    "label_value_errors",
    "qualified_name_errors",
]


class SelectorError(ValueError):
    """A selector that does not parse or convert; `str(err)` is upstream's exact message."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def invalid(path: str, value: str | Sequence[str], detail: str) -> str:
    """`field.Invalid(path, value, detail).Error()`."""
    shown = go_quote(value) if isinstance(value, str) else go_json_strings(value)
    return f"{path}: Invalid value: {shown}: {detail}"


def aggregate(messages: Iterable[str]) -> str:
    """`field.ErrorList.ToAggregate().Error()`: de-duplicated, bracketed when several."""
    unique = list(dict.fromkeys(messages))
    if len(unique) == 1:
        return unique[0]
    return "[" + ", ".join(unique) + "]"


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
    if go_len(value) > _DNS1123_SUBDOMAIN_MAX:
        errs.append(_max_len_error(_DNS1123_SUBDOMAIN_MAX))
    if _DNS1123_SUBDOMAIN_RE.fullmatch(value) is None:
        errs.append(_regex_error(_DNS1123_SUBDOMAIN_ERR, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def qualified_name_errors(value: str) -> list[str]:
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
    elif go_len(name) > _QNAME_MAX:
        errs.append("name part " + _max_len_error(_QNAME_MAX))
    if _QNAME_RE.fullmatch(name) is None:
        errs.append(
            "name part " + _regex_error(_QNAME_ERR, _QNAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def label_value_errors(value: str) -> list[str]:
    """`validation.IsValidLabelValue`."""
    errs = []
    if go_len(value) > _LABEL_VALUE_MAX:
        errs.append(_max_len_error(_LABEL_VALUE_MAX))
    if _LABEL_VALUE_RE.fullmatch(value) is None:
        errs.append(
            _regex_error(_LABEL_VALUE_ERR, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345")
        )
    return errs
