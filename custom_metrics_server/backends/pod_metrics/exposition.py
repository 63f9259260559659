"""Reading a pod's Prometheus text exposition, keeping only the series a scrape config selects.

`read_exposition(text, selection)` returns the kept samples: the metric's name, its labels
(sorted name/value pairs), the value, the sample's own timestamp (seconds, or None) and whether
the value is a counter's. It reads the classic text format (`text/plain; version=0.0.4`) and
what OpenMetrics text adds to it (`# EOF`, `_total` samples of a `counter` family, `_created`
series, exemplars after ` # `, quoted UTF-8 names), as Prometheus' own text parser does.

How: the selection is one regular expression matching a line that holds a selected metric
(`selection.pattern`: the exact names and the globs as alternatives, anchored at a newline,
then the rest of the line: labels, value, timestamp), so the lines of other metrics are
skipped by the regex engine in C and never reach Python, and one match reads a selected line;
its label block is split into pairs by another expression the first time it is seen (see
`Selection.blocks`). `# TYPE` lines are collected the same way, and the kind of each name is
worked out once per set of TYPE lines (`Selection.kinds`). That is a fraction of the cost
of `prometheus_client.parser`, which scans every label block character by character in
Python before a caller can drop it (docs/performance.md, "Pod `/metrics` bodies");
tests/backends/pod_metrics/test_exposition.py checks that both read the same values.

The kind of a sample comes from its family's `# TYPE` line:

* `gauge`, `untyped` / `unknown` (and no TYPE line at all): the value as it is;
* `counter`: marked as a counter (the store serves its rate);
* `histogram` / `summary`: the `_sum` and `_count` series are counters (a rate of `_count` is
  events per second; of `_sum`, e.g. seconds spent per second); buckets and quantiles are
  skipped: a pod's quantile cannot be summed or averaged across pods into anything meaningful,
  and buckets need a histogram_quantile over a window, which is a query engine's job;
* `_created` series (OpenMetrics) and `gaugehistogram`, `info`, `stateset` families are skipped.

A selected line that cannot be read makes the whole body unreadable (`ExpositionError`, with
the line number), as Prometheus fails such a scrape: silently keeping the other series would
hide a broken exporter. Lines that are not selected are never parsed, so their errors cost
nothing and fail nothing. A body keeps at most `limit` series; `Reading.overflow` counts the
selected series dropped past it.

PURE: no I/O. Cost: O(length) in the regex engine, plus O(length of the line) in Python for
each selected line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, NamedTuple, Protocol

__all__ = [
    "BLOCKS_LIMIT",
    "KINDS_LIMIT",
    "KIND_NAMES_LIMIT",
    "ExpositionError",
    "Kept",
    "LabelFilter",
    "Reading",
    "Selection",
    "patterns",
    "read_exposition",
]

Labels = tuple[tuple[str, str], ...]
#: What a selection answers for a selected metric: True keeps every series, a filter (called
#: with the series' labels) the series it accepts.
LabelFilter = Callable[[Mapping[str, str]], bool]


class ExpositionError(ValueError):
    """A selected line that is not a valid sample."""


class Kept(NamedTuple):
    """One selected sample."""

    name: str
    labels: Labels
    value: float
    #: the sample's own timestamp in seconds (it carried one), else None
    timestamp: float | None
    counter: bool


#: `Kept` made without the Python-level `__new__` a NamedTuple has (a third of a
#: microsecond a sample).
_new_kept: Final = tuple.__new__


@dataclass(slots=True)
class Reading:
    """What a body held, of what was asked."""

    samples: list[Kept] = field(default_factory=list)
    #: selected series beyond `limit`, dropped
    overflow: int = 0


class Selection(Protocol):
    """Which metrics to keep (`config.MetricSelection`); `patterns` makes its expressions."""

    #: matches at a newline followed by a selected metric's name (group 1) or by `{` (a line
    #: whose name is quoted inside the braces)
    pattern: re.Pattern[str]
    #: matches the `# TYPE` lines of the families selected metrics may belong to
    type_pattern: re.Pattern[str]
    #: (name, label block) -> the sorted pairs, or None when the filter drops the series; the
    #: same series' block is the same text at every scrape (and across the pods of one
    #: workload), so a selected line's labels are parsed once. Cleared past `BLOCKS_LIMIT`.
    blocks: dict[tuple[str, str], Labels | None]
    #: a body's `# TYPE` lines (as `type_pattern` finds them) -> (those lines as a mapping,
    #: the kind of each metric name read so far under them): the pods of one exporter version
    #: send the same TYPE lines at every scrape, so a name's kind is worked out once for all
    #: of them, and a body whose TYPE lines differ has its own entry. Cleared past
    #: `KINDS_LIMIT` entries; at most `KIND_NAMES_LIMIT` names an entry.
    kinds: dict[tuple[tuple[str, str], ...], tuple[dict[str, str], dict[str, str]]]

    def choice(self, name: str) -> LabelFilter | bool:
        """False: not kept; True: every series; a filter: the series whose labels it accepts."""
        ...


#: Label blocks remembered per selection (see `Selection.blocks`).
BLOCKS_LIMIT: Final = 200_000
#: Sets of `# TYPE` lines remembered per selection, and names per set (see `Selection.kinds`).
KINDS_LIMIT: Final = 64
KIND_NAMES_LIMIT: Final = 10_000
_NAME_CHARS: Final = "[a-zA-Z0-9_:]"


def _alternatives(names: list[str], globs: list[str]) -> str:
    alternatives = [re.escape(name) for name in sorted(names, key=len, reverse=True)]
    alternatives.extend(
        "".join(
            f"{_NAME_CHARS}*" if c == "*" else _NAME_CHARS if c == "?" else re.escape(c)
            for c in glob
        )
        for glob in globs
    )
    return "|".join(alternatives) if alternatives else "(?!)"


def patterns(names: list[str], globs: list[str]) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """`Selection.pattern` and `Selection.type_pattern` of exact metric names and globs (`*`
    any run of name characters, `?` one)."""
    line = re.compile(
        rf"\n[ \t]*(?:(?=[a-zA-Z_:])({_alternatives(names, globs)})(?=[ \t{{\r\n]|\Z)|(?=\{{))"
        rf"(?:{_REST})?"
    )
    if globs:
        families = r"[^ \t\n]+"
    else:
        candidates = set(names)
        for name in names:
            candidates.update(name[: -len(suffix)] for suffix in _SUFFIXES if name.endswith(suffix))
        families = f'(?:{_alternatives(sorted(candidates), [])})|"[^"\n]*"'
    types = re.compile(rf"\n# TYPE[ \t]+({families})[ \t]+([^ \t\r\n]+)")
    return line, types


_SKIPPED: Final = "skip"
_COUNTER: Final = "counter"
_GAUGE: Final = "gauge"

#: `# TYPE` values and what their families' plain samples are.
_PLAIN: Final = {
    "counter": _COUNTER,
    "gauge": _GAUGE,
    "untyped": _GAUGE,
    "unknown": _GAUGE,
    "histogram": _SKIPPED,  # a histogram has no plain sample
    "summary": _SKIPPED,  # quantiles
    "gaugehistogram": _SKIPPED,
    "info": _SKIPPED,
    "stateset": _SKIPPED,
}
#: Suffixed samples of typed families: (suffix, family type) -> kind.
_SUFFIXED: Final = {
    ("_total", "counter"): _COUNTER,  # OpenMetrics: family `x`, sample `x_total`
    ("_created", "counter"): _SKIPPED,
    ("_sum", "histogram"): _COUNTER,
    ("_count", "histogram"): _COUNTER,
    ("_bucket", "histogram"): _SKIPPED,
    ("_created", "histogram"): _SKIPPED,
    ("_sum", "summary"): _COUNTER,
    ("_count", "summary"): _COUNTER,
    ("_created", "summary"): _SKIPPED,
    ("_gsum", "gaugehistogram"): _SKIPPED,
    ("_gcount", "gaugehistogram"): _SKIPPED,
    ("_bucket", "gaugehistogram"): _SKIPPED,
    ("_info", "info"): _SKIPPED,
}
_SUFFIXES: Final = ("_total", "_created", "_sum", "_count", "_bucket", "_gsum", "_gcount", "_info")

_STRING: Final = r'"(?:[^"\\\n]++|\\.)*+"'
_PAIR: Final = rf"[ \t]*(?:[a-zA-Z_][a-zA-Z0-9_]*|{_STRING})[ \t]*=[ \t]*{_STRING}[ \t]*"
#: The rest of a selected line after its name: the label block, the value, the timestamp,
#: an exemplar or comment, the end of the line. `Selection.pattern` ends with it, optional, so
#: one match reads a whole line (groups 2, 3, 4); a selected line without it (no value group)
#: is not a sample.
_REST: Final = (
    rf'[ \t]*+(?:\{{((?:[^"}}\n]++|{_STRING})*+)\}})?[ \t]*+([^ \t\r\n#]++)'
    r"(?:[ \t]++([^ \t\r\n#]++))?+[ \t]*+(?:#[^\n]*+)?\r?(?=\n|\Z)"
)
#: A label block: pairs separated by commas, an optional trailing comma.
_BLOCK: Final = re.compile(rf"(?:{_PAIR}(?:,{_PAIR})*,?)?[ \t]*")
_PAIRS: Final = re.compile(
    r'[ \t]*(?:([a-zA-Z_][a-zA-Z0-9_]*)|"((?:[^"\\\n]|\\.)*)")[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"'
)
#: A quoted metric name first in the block (`{"my.metric", a="b"}`).
_QUOTED_NAME: Final = re.compile(rf"[ \t]*({_STRING})[ \t]*(?:,|$)")
_ESCAPES: Final = re.compile(r"\\(.)")
_ESCAPED: Final = {"\\": "\\", '"': '"', "n": "\n"}


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    return _ESCAPES.sub(lambda match: _ESCAPED.get(match.group(1), "\\" + match.group(1)), text)


def _kind(name: str, types: Mapping[str, str]) -> str:
    """Counter, gauge or skipped, from the body's `# TYPE` lines."""
    family = types.get(name)
    if family is not None:
        return _PLAIN.get(family.lower(), _GAUGE)
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            family = types.get(name[: -len(suffix)])
            if family is not None:
                return _SUFFIXED.get((suffix, family.lower()), _GAUGE)
    return _GAUGE


def _new_kind(name: str, types: Mapping[str, str], kinds: dict[str, str]) -> str:
    """`_kind`, remembered in `kinds` (up to `KIND_NAMES_LIMIT`: a pod inventing names cannot
    grow memory)."""
    kind = _kind(name, types)
    if len(kinds) < KIND_NAMES_LIMIT:
        kinds[name] = kind
    return kind


def _line_number(text: str, position: int) -> int:
    return text.count("\n", 0, position)  # the text starts with the "\n" we added


def _number(text: str, what: str, body: str, position: int) -> float:
    if "_" not in text:  # float() would accept 1_000; the format does not
        try:
            return float(text)
        except ValueError:
            pass
    raise ExpositionError(f"line {_line_number(body, position)}: invalid {what} {text!r}")


def _labels(block: str, body: str, position: int) -> Labels:
    if not _BLOCK.fullmatch(block):
        raise ExpositionError(f"line {_line_number(body, position)}: invalid labels {{{block}}}")
    pairs = [
        (plain if plain else _unescape(quoted), _unescape(value))
        for plain, quoted, value in _PAIRS.findall(block)
    ]
    if len(pairs) > 1:
        pairs.sort()
        for index in range(1, len(pairs)):
            if pairs[index][0] == pairs[index - 1][0]:
                raise ExpositionError(
                    f"line {_line_number(body, position)}: label {pairs[index][0]!r} is repeated"
                )
    return tuple(pairs)


def _quoted_name(block: str | None, body: str, position: int) -> tuple[str, str | None]:
    """The name quoted first in a label block, and the rest of the block."""
    quoted = _QUOTED_NAME.match(block or "")
    if quoted is None or block is None:
        raise ExpositionError(f"line {_line_number(body, position)}: no metric name")
    return _unescape(quoted.group(1)[1:-1]), block[quoted.end() :]


def _timestamp(text: str, body: str, position: int) -> float:
    """Milliseconds since the epoch, in seconds."""
    stamp = _number(text, "timestamp", body, position)
    if not math.isfinite(stamp):
        raise ExpositionError(f"line {_line_number(body, position)}: invalid timestamp {text!r}")
    return stamp / 1000.0


def read_exposition(text: str, selection: Selection, *, limit: int = 1 << 30) -> Reading:
    """The selected samples of an exposition, at most `limit` of them (see the module)."""
    reading = Reading()
    kept = reading.samples
    body = text if text.startswith("\n") else "\n" + text
    types: dict[str, str] = {}
    kinds: dict[str, str] | None = None
    choose = selection.choice
    blocks = selection.blocks
    if len(blocks) > BLOCKS_LIMIT:
        blocks.clear()
    for found in selection.pattern.finditer(body):
        name, block, value_text, stamp_text = found.groups()
        if value_text is None:
            line = _line_number(body, found.start() + 1)
            raise ExpositionError(f"line {line}: not a sample line of {name or 'a metric'}")
        if name is None:  # `{"quoted.name", ...}`
            name, block = _quoted_name(block, body, found.start() + 1)
        if kinds is None:
            types, kinds = _kinds(body, selection)
        kind = kinds.get(name) or _new_kind(name, types, kinds)
        if kind is _SKIPPED:
            continue
        key = (name, block or "")
        if key in blocks:
            labels = blocks[key]
            if labels is None:
                continue
        else:
            choice = choose(name)
            if choice is False:
                continue
            labels = _labels(block, body, found.start() + 1) if block else ()
            if choice is not True and not choice(dict(labels)):
                labels = None
            blocks[key] = labels
            if labels is None:
                continue
        if "_" in value_text:  # float() would accept 1_000; the format does not
            value = _number(value_text, "value", body, found.start() + 1)
        else:
            try:
                value = float(value_text)
            except ValueError:
                value = _number(value_text, "value", body, found.start() + 1)
        stamp = None if stamp_text is None else _timestamp(stamp_text, body, found.start() + 1)
        if len(kept) >= limit:
            reading.overflow += 1
            continue
        kept.append(_new_kept(Kept, (name, labels, value, stamp, kind is _COUNTER)))
    return reading


def _kinds(body: str, selection: Selection) -> tuple[dict[str, str], dict[str, str]]:
    """The body's `# TYPE` lines as a mapping, and the kinds worked out under the same lines
    before (`Selection.kinds`)."""
    lines = tuple(selection.type_pattern.findall(body))
    found = selection.kinds.get(lines)
    if found is None:
        if len(selection.kinds) >= KINDS_LIMIT:
            selection.kinds.clear()
        types = {
            (_unescape(family[1:-1]) if family.startswith('"') else family): kind
            for family, kind in lines
        }
        found = selection.kinds[lines] = (types, {})
    return found
