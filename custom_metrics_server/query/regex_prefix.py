"""The literal prefix of a regular expression: the characters every match of it starts with.

The route index (`query.routes.RouteIndex`) files each `metricRegex` under its literal prefix,
so that a lookup tests only the patterns whose prefix the metric starts with. A prefix that is
too long would hide a route from names it matches; one that is too short (down to "") only
costs one more pattern test per first decision. So this reads a small subset of the syntax and
stops at the first thing outside it, which is always correct:

* literal characters, escaped punctuation, `\\a \\f \\n \\r \\t \\v`, `\\xhh \\uhhhh \\Uhhhhhhhh`;
* a class of one plain character (`[.]`), a non-capturing group `(?:...)`;
* top-level alternation (`abc|abd`: the branches' common prefix, `ab`);
* leading global flags (`(?s)`); with `(?x)` whitespace and `#` comments are skipped as the
  regex engine skips them. Case-insensitive patterns have no prefix.

A literal followed by a quantifier (`*`, `+`, `?`, `{m,n}`) is not part of the prefix (`ab*c`
gives `a`). Anything else (classes, other groups, anchors, backreferences, `\\d`, octal and
named escapes) ends the prefix. Only the public `re.compile` is used, to refuse invalid patterns
and to read the global flags.

PURE: no I/O. Cost: O(len(pattern)) per branch nesting level; run once per route when the
index is built, never on the request path.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["literal_prefix"]

#: What makes the preceding item repeated. A `{` that is not a valid repeat is a literal `{`
#: for the regex engine, and so here.
_QUANTIFIER: Final = re.compile(r"[*+?]|\{\d*(?:,\d*)?\}")
_GLOBAL_FLAGS: Final = re.compile(r"(?:\(\?[aiLmsux]+\))*")
_SIMPLE_ESCAPES: Final = {"a": "\a", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_HEX_ESCAPES: Final = {"x": 2, "u": 4, "U": 8}
#: Characters with a meaning of their own outside a class (`{`, `}` and `]` are handled apart).
_SPECIAL: Final = frozenset(".^$*+?()[|\\")
#: What verbose mode skips between items (the engine's own set).
_WHITESPACE: Final = frozenset(" \t\n\r\v\f")


def literal_prefix(pattern: str) -> str:
    """The characters every match of `pattern` starts with ("" when unknown: a leading
    alternation, class or group, case-insensitive matching, or an invalid pattern)."""
    try:
        flags = re.compile(pattern).flags
    except re.error:  # never indexed: the route refuses it first
        return ""
    if flags & re.IGNORECASE:
        return ""
    reader = _Reader(pattern, verbose=bool(flags & re.VERBOSE))
    start = _GLOBAL_FLAGS.match(pattern)
    return reader.alternation(start.end() if start else 0, len(pattern))[0]


class _Reader:
    """Reads `pattern[start:end]` slices; each method returns (prefix, whole) where `whole`
    means the slice is nothing but that literal text."""

    __slots__ = ("pattern", "verbose")

    def __init__(self, pattern: str, *, verbose: bool) -> None:
        self.pattern = pattern
        self.verbose = verbose

    def alternation(self, start: int, end: int) -> tuple[str, bool]:
        """The common prefix of the top-level branches of the slice."""
        branches = self._split(start, end)
        found = [self.sequence(begin, stop) for begin, stop in branches]
        if len(found) == 1:
            return found[0]
        common = found[0][0]
        for prefix, _ in found[1:]:
            while not prefix.startswith(common):
                common = common[:-1]
        return common, False

    def sequence(self, start: int, end: int) -> tuple[str, bool]:
        """The literal text a branch starts with."""
        pattern, i = self.pattern, start
        prefix: list[str] = []
        while (i := self._skip(i, end)) < end:
            char, after = self._literal(i, end)
            if char is None:
                if not pattern.startswith("(?:", i):
                    return "".join(prefix), False
                close = self._close(i + 3, end)
                if self._repeated(close + 1, end):
                    return "".join(prefix), False
                inner, whole = self.alternation(i + 3, close)
                prefix.append(inner)
                if not whole:
                    return "".join(prefix), False
                i = close + 1
                continue
            if self._repeated(after, end):
                return "".join(prefix), False
            prefix.append(char)
            i = after
        return "".join(prefix), True

    def _literal(self, i: int, end: int) -> tuple[str | None, int]:
        """The literal character at `i` and where the next item starts (None: not a literal)."""
        pattern, char = self.pattern, self.pattern[i]
        if char == "\\" and i + 1 < end:
            escaped = pattern[i + 1]
            if escaped in _SIMPLE_ESCAPES:
                return _SIMPLE_ESCAPES[escaped], i + 2
            if escaped in _HEX_ESCAPES:
                digits = pattern[i + 2 : i + 2 + _HEX_ESCAPES[escaped]]
                return chr(int(digits, 16)), i + 2 + len(digits)
            if escaped.isascii() and escaped.isalnum():  # \d, \b, \1, \0, \N{...}: not read
                return None, i
            return escaped, i + 2
        if char == "[":
            # `[x]`: one plain character, which the engine reads as that literal.
            if i + 2 < end and pattern[i + 2] == "]" and pattern[i + 1] not in "^]\\[":
                return pattern[i + 1], i + 3
            return None, i
        if char == "{" and _QUANTIFIER.match(pattern, i):
            return None, i
        if char in _SPECIAL:
            return None, i
        return char, i + 1

    def _repeated(self, i: int, end: int) -> bool:
        """Whether a quantifier starts at `i` (after verbose-mode whitespace)."""
        i = self._skip(i, end)
        found = _QUANTIFIER.match(self.pattern, i, end)
        return found is not None

    def _skip(self, i: int, end: int) -> int:
        """`i`, past whitespace and comments in verbose mode."""
        pattern = self.pattern
        while self.verbose and i < end:
            if pattern[i] in _WHITESPACE:
                i += 1
            elif pattern[i] == "#":
                newline = pattern.find("\n", i, end)
                i = end if newline < 0 else newline + 1
            else:
                break
        return i

    def _split(self, start: int, end: int) -> list[tuple[int, int]]:
        """The top-level branches of the slice, as (start, end) pairs."""
        branches: list[tuple[int, int]] = []
        begin = i = start
        while i < end:
            i = self._skip(i, end)
            if i >= end:
                break
            char = self.pattern[i]
            if char == "|":
                branches.append((begin, i))
                begin = i + 1
                i += 1
            elif char == "(":
                i = self._close(i + 1, end) + 1
            else:
                i = self._step(i, end)
        branches.append((begin, end))
        return branches

    def _close(self, i: int, end: int) -> int:
        """The index of the `)` closing the group whose contents start at `i`."""
        depth = 1
        while i < end:
            i = self._skip(i, end)
            if i >= end:
                break
            char = self.pattern[i]
            if char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
                if depth == 0:
                    return i
            i = self._step(i, end)
        return end  # unbalanced: the pattern compiled, so this is not reached

    def _step(self, i: int, end: int) -> int:
        """Past the item at `i`: an escape, a whole class, or one character."""
        pattern = self.pattern
        if pattern[i] == "\\":
            return i + 2
        if pattern[i] != "[":
            return i + 1
        i += 1
        if i < end and pattern[i] == "^":
            i += 1
        if i < end and pattern[i] == "]":  # a leading `]` is a member
            i += 1
        while i < end and pattern[i] != "]":
            i += 2 if pattern[i] == "\\" else 1
        return i + 1
