"""Durations as Go and Prometheus write them: one parser, two unit tables, and Go's printer.

PURE: standard library only, no I/O. This module owns every duration text the server reads or
writes:

* :func:`parse_go_duration_ns`: Go ``time.ParseDuration`` (``1m30s``, ``250ms``, ``20.038s``,
  ``-2s``, ``0``) in whole nanoseconds, exact; :func:`go_duration_seconds` is the same in
  seconds, or None (``?timeout=``, flag values, ``metav1.Duration``);
* :func:`parse_prometheus_duration`: the units of Prometheus ``model.ParseDuration``
  (``ms s m h d w y``, whole numbers only: ``90s``, ``1h30m``) in seconds (rule windows,
  prometheus-adapter's flags);
* :func:`format_go_duration`: Go ``time.Duration.String()`` (``15s``, ``20.038s``, ``1m0s``),
  the ``window`` of ``metrics.k8s.io``.

Both grammars are a sequence of ``<number><unit>`` parts read by one scanner
(:func:`_sum_parts`); they differ in their unit table, in fractions and in the sign. Nothing
here knows where a duration comes from: flag types and 400 messages belong to their callers.

Cost: O(len(text)) per parse or format.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final, TypeVar

__all__ = [
    "format_go_duration",
    "go_duration_seconds",
    "parse_go_duration_ns",
    "parse_prometheus_duration",
]

_N = TypeVar("_N", int, float)

#: Go's units, in nanoseconds.
_GO_UNITS: Final = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,
    "\u03bcs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
#: One Go part: digits, an optional fraction, a unit (groups: whole, fraction, unit).
_GO_PART: Final = re.compile(r"(\d*)(?:\.(\d*))?(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
#: Prometheus's units, in seconds.
_PROMETHEUS_UNITS: Final = {
    "ms": 0.001,
    "s": 1,
    "m": 60,
    "h": 3600,
    "d": 86400,
    "w": 604800,
    "y": 31536000,
}
#: One Prometheus part: whole digits and a unit (the fraction group never matches).
_PROMETHEUS_PART: Final = re.compile(r"(\d+)()(ms|[smhdwy])")


def _sum_parts(body: str, part: re.Pattern[str], units: Mapping[str, _N]) -> _N | None:
    """The sum of the ``<number><unit>`` parts that make up all of ``body``, or None when
    ``body`` is not such a sequence (an empty body sums to 0). A fraction counts exactly,
    truncated to the unit's integer step (Go's nanoseconds). O(len(body))."""
    total: _N = 0
    position = 0
    while position < len(body):
        match = part.match(body, position)
        if match is None or not (match.group(1) or match.group(2)):
            return None
        unit = units[match.group(3)]
        total += int(match.group(1) or "0") * unit
        if match.group(2):
            total += int(match.group(2)) * unit // 10 ** len(match.group(2))
        position = match.end()
    return total


def parse_go_duration_ns(text: str) -> int:
    """Go ``time.ParseDuration`` in whole nanoseconds, exact (no float rounding); ValueError
    (``not a Go duration``) when ``text`` is not one."""
    if text in ("0", "+0", "-0"):
        return 0
    sign = -1 if text[:1] == "-" else 1
    body = text[1:] if text[:1] in ("+", "-") else text
    total = _sum_parts(body, _GO_PART, _GO_UNITS) if body else None
    if total is None:
        raise ValueError(f"not a Go duration: {text!r}")
    return sign * total


def go_duration_seconds(text: str) -> float | None:
    """A Go duration in seconds; None when ``text`` is empty or not one."""
    try:
        return parse_go_duration_ns(text) / 1e9 if text else None
    except ValueError:
        return None


def parse_prometheus_duration(text: str) -> float:
    """A Prometheus duration (``90s``, ``1h30m``, ``500ms``; surrounding blanks ignored) in
    seconds; ValueError (``not a Prometheus duration``) otherwise."""
    body = text.strip()
    total = _sum_parts(body, _PROMETHEUS_PART, _PROMETHEUS_UNITS) if body else None
    if total is None:
        raise ValueError(f"not a Prometheus duration: {body!r}")
    return float(total)


def format_go_duration(nanoseconds: int) -> str:
    """Go's ``time.Duration.String()``: ``0s``, ``1.5ms``, ``15s``, ``20.038s``, ``1m0s``,
    ``1h2m3s``."""
    if nanoseconds == 0:
        return "0s"
    sign = "-" if nanoseconds < 0 else ""
    value = abs(nanoseconds)
    if value < 1_000:
        return f"{sign}{value}ns"
    if value < 1_000_000:
        return f"{sign}{_fraction(value, 3)}\u00b5s"
    if value < 1_000_000_000:
        return f"{sign}{_fraction(value, 6)}ms"
    hours, rest = divmod(value, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    seconds = _fraction(rest, 9) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}"
    if minutes:
        return f"{sign}{minutes}m{seconds}"
    return sign + seconds


def _fraction(value: int, precision: int) -> str:
    whole, part = divmod(value, 10**precision)
    if not part:
        return str(whole)
    return f"{whole}.{str(part).rjust(precision, '0').rstrip('0')}"
