"""The Prometheus text format's grammar for one series line, as the kubelet reader's slow path.

PURE: standard library only, no I/O. This module owns :func:`parse_line`: one line
(``name{label="value",...} value [timestamp]``) to a :class:`SeriesLine`, with Prometheus's label
unescaping (unknown escapes kept as written, as ``lvalReplacer`` does), Go's number rules
(no digit-group underscores, no Unicode blanks) and the errors upstream gives
(:func:`line_error` names the line). :mod:`.any_layout` uses it for every line of a series it
reads; it must not decide which series count.

Cost: O(len(line)) per call, in Python: kubelet output reaches it only when not in the
canonical layout.
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

__all__ = ["SeriesLine", "line_error", "parse_line"]

_MAX_INT64: Final = 2**63 - 1
_NAME_END: Final = re.compile(r"[ \t{]")
_BLANKS: Final = re.compile(r"[ \t]+")
_LABEL_NAME: Final = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_UNESCAPES: Final = {"\\": "\\", '"': '"', "n": "\n"}


class SeriesLine(NamedTuple):
    """One parsed series line; ``timestamp_ms`` is None when the line has none."""

    name: str
    labels: dict[str, str]
    value: float
    timestamp_ms: int | None


def line_error(lineno: int, line: str, problem: str) -> ValueError:
    """The error for line ``lineno`` (shown up to 200 characters)."""
    shown = line if len(line) <= 200 else line[:200] + "..."
    return ValueError(f"line {lineno}: {problem}: {shown!r}")


def _timestamp_ms(text: str, lineno: int, line: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise line_error(lineno, line, f"expected timestamp or new record, got {text!r}")
    value = int(text)
    if value > _MAX_INT64:
        raise line_error(lineno, line, "timestamp out of range")
    return value


def _float(text: str, lineno: int, line: str) -> float:
    # Python's float() also strips Unicode blanks and takes digit-group underscores; Go's
    # ParseFloat takes neither.
    if "_" in text or not text.isprintable():
        raise line_error(lineno, line, f"invalid value {text!r}")
    try:
        return float(text)
    except ValueError:
        raise line_error(lineno, line, f"invalid value {text!r}") from None


def _parse_labels(line: str, start: int, lineno: int) -> tuple[dict[str, str], int]:
    """Parse ``name="value",...}`` from ``line[start:]``; returns the labels and the index
    after ``}``. O(len(line)); used only off the fast path."""
    labels: dict[str, str] = {}
    i, n = start, len(line)
    while True:
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] == "}":
            return labels, i + 1
        match = _LABEL_NAME.match(line, i)
        if match is None:
            raise line_error(lineno, line, "invalid label name")
        name = match.group()
        i = match.end()
        while i < n and line[i] in " \t":
            i += 1
        if i >= n or line[i] != "=":
            raise line_error(lineno, line, "expected '=' after label name")
        i += 1
        while i < n and line[i] in " \t":
            i += 1
        if i >= n or line[i] != '"':
            raise line_error(lineno, line, "expected quoted label value")
        i += 1
        chars: list[str] = []
        while True:
            if i >= n:
                raise line_error(lineno, line, "unterminated label value")
            char = line[i]
            if char == '"':
                i += 1
                break
            if char == "\\":
                if i + 1 >= n:
                    raise line_error(lineno, line, "unterminated label value")
                following = line[i + 1]
                # Prometheus keeps unknown escapes as written (lvalReplacer).
                chars.append(_UNESCAPES.get(following, "\\" + following))
                i += 2
                continue
            chars.append(char)
            i += 1
        if name in labels:
            raise line_error(lineno, line, f"duplicate label {name!r}")
        labels[name] = "".join(chars)
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] == ",":
            i += 1
        elif i < n and line[i] == "}":
            return labels, i + 1
        else:
            raise line_error(lineno, line, "expected ',' or '}' in label set")


def parse_line(line: str, lineno: int) -> SeriesLine | None:
    """Parse one series line with the full grammar; None when upstream would not match it
    to any metric (whitespace before the name or between the name and ``{``). O(len)."""
    match = _NAME_END.search(line)
    end = match.start() if match else len(line)
    name = line[:end]
    labels: dict[str, str] = {}
    i = end
    if i < len(line) and line[i] == "{":
        labels, i = _parse_labels(line, i + 1, lineno)
    elif line[i:].lstrip(" \t").startswith("{"):
        return None
    fields = _BLANKS.split(line[i:].strip(" \t"))
    if fields == [""]:
        raise line_error(lineno, line, "expected value after metric")
    if len(fields) > 2:
        raise line_error(lineno, line, "expected next entry after timestamp")
    value = _float(fields[0], lineno, line)
    timestamp = _timestamp_ms(fields[1], lineno, line) if len(fields) == 2 else None
    return SeriesLine(name, labels, value, timestamp)
