"""One run of canonical kubelet series lines read into label text, values and timestamps:
the inner loop of :mod:`.rows`, with an optional C implementation.

PURE: standard library only (and this package's optional C extension), no I/O. A kubelet
writes each family as one run of lines ``<head>... value[ timestamp]`` (single spaces, every
line alike). :func:`read_run` returns the run's label text (the lines' first tokens joined by
newlines), its values as floats, its timestamps in seconds (None when no line has one) and its
smallest value, or raises :class:`NotCanonical` for any other text, in which case the caller
reads the body with the full reader.

Two implementations, the same answer (tests/kubelet_format/test_runs.py runs both on the same
runs):

* ``_scan.scan_run`` (C, built by ``setup.py`` when a compiler is there; optional):
  one pass over the bytes, SSE2 for the label text, Clinger's exact fast path or
  ``PyOS_string_to_double`` (``float()``'s own conversion) for the values; it accepts only
  plain decimal values and 1-18 digit timestamps and answers None for anything else, which
  the pure-Python reader then decides. Several times faster than the twin below
  (docs/performance.md, "Reading kubelet text").
  Given another run's label text (``same_as``) it proves this run names the same series in
  C instead of building a second label text.
* :func:`read_run_python`: one ``bytes.split``, a rebuild of the region from its tokens to
  prove its exact shape, ``map(float)``.

Both are O(len(run)).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import repeat
from operator import truediv
from typing import Final

__all__ = [
    "SCANNER",
    "NotCanonical",
    "Run",
    "check_stamps",
    "floats",
    "read_run",
    "read_run_python",
    "same_series",
]

Run = tuple[bytes, list[float], list[float] | None, float]
"""Label text (lines' first tokens joined by newlines), values, timestamps in seconds, and the
smallest value (NaN when a value is NaN)."""

#: Longest timestamp the grammar takes as an int64 without more checks (the rest go to it).
_MAX_STAMP_DIGITS: Final = 18

SCANNER: Callable[..., Run | None] | None
try:  # the optional C reader; the pure-Python one when it was not built
    from custom_metrics_server.kubelet_format._scan import scan_run as SCANNER  # noqa: N812
except ImportError:  # pragma: no cover - a build without a compiler
    SCANNER = None


class NotCanonical(Exception):
    """The body needs the full reader."""


def floats(texts: list[bytes]) -> list[float]:
    """Values as Go's ParseFloat reads them (no digit-group underscores); O(n) in C."""
    if b"_" in b"".join(texts):
        raise NotCanonical
    try:
        return list(map(float, texts))
    except ValueError:
        raise NotCanonical from None


def check_stamps(stamps: list[bytes]) -> None:
    """Check each timestamp is a plain int64 of milliseconds (ASCII digits, at most 18)."""
    if not b"".join(stamps).isdigit() or max(map(len, stamps)) > _MAX_STAMP_DIGITS:
        raise NotCanonical


def _line(region: bytes, tokens: list[bytes], head: bytes) -> Run:
    """:func:`read_run_python` of a region without a newline: the same checks, fewer steps."""
    if len(tokens) < 2 or (len(tokens) == 3 and tokens[2].startswith(head)):
        raise NotCanonical  # as the general case: a second line's label, or no value
    if b" ".join(tokens) != region:
        raise NotCanonical
    value = floats(tokens[1:2])[0]
    if len(tokens) == 2:
        return tokens[0], [value], None, value
    check_stamps(tokens[2:])
    return tokens[0], [value], [float(tokens[2]) / 1000.0], value


def read_run_python(body: bytes, start: int, end: int, head: bytes) -> Run:
    """:func:`read_run` in pure Python: one split, one rebuild of the region from its tokens
    to prove its exact shape, C maps for the floats. O(len(run)) in C."""
    region = body[start:end]
    tokens = region.split()
    if len(tokens) < 4 and b"\n" not in region:  # one line (the node's, an error flag's)
        return _line(region, tokens, head)
    return _lines(region, tokens, head)


def _lines(region: bytes, tokens: list[bytes], head: bytes) -> Run:
    """:func:`read_run_python` of any region, given its whitespace-split tokens."""
    step = 3 if len(tokens) > 2 and not tokens[2].startswith(head) else 2
    if len(tokens) % step or not tokens:
        raise NotCanonical
    rows = list(zip(*[iter(tokens)] * step, strict=True))
    if b"\n".join(map(b" ".join, rows)) != region:
        raise NotCanonical
    values = floats(tokens[1::step])
    least = min(values)
    if math.isnan(sum(values)) and any(map(math.isnan, values)):
        least = math.nan  # min() would depend on where the NaN is
    if step == 2:
        return b"\n".join(tokens[0::2]), values, None, least
    stamps = tokens[2::3]
    first = stamps[0]
    if stamps.count(first) == len(stamps):  # a kubelet stamps a family alike
        check_stamps([first])
        times = [float(first) / 1000.0] * len(stamps)
    else:
        check_stamps(stamps)
        times = list(map(truediv, map(float, stamps), repeat(1000.0)))
    return b"\n".join(tokens[0::3]), values, times, least


def read_run(
    body: bytes, start: int, end: int, head: bytes, same_as: tuple[bytes, bytes] | None = None
) -> Run:
    """The run of canonical series lines ``body[start:end]``, each starting with ``head``;
    :class:`NotCanonical` when it is not exactly that. O(len(run)): in C when built.

    ``same_as`` is another run's label text and the head of its lines: when the C reader
    proves this run names the same series in the same order (the same text after the heads,
    as :func:`same_series`), the labels returned are that text itself (``is``); otherwise
    they are this run's, not compared."""
    if SCANNER is not None:
        run = (
            SCANNER(body, start, end, head)
            if same_as is None
            else SCANNER(body, start, end, head, *same_as)
        )
        if run is not None:
            return run
    return read_run_python(body, start, end, head)


def same_series(labels: bytes, reference: bytes, head: bytes, reference_head: bytes) -> bool:
    """Whether ``labels`` (a run's label text, lines starting with ``head``) name the same
    series in the same order as ``reference`` (lines starting with ``reference_head``): the
    same text after the heads. O(len) in C."""
    if not labels.startswith(head) or not reference.startswith(reference_head):
        return False
    rest = reference[len(reference_head) :].replace(b"\n" + reference_head, b"\n" + head)
    return labels[len(head) :] == rest
