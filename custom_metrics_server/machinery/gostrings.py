"""Go's string conversions that Kubernetes messages and selectors depend on.

PURE: standard library only, no I/O. This module owns three small ports and nothing else:
`strconv.Quote` (what `%q` prints in a Go error message, also a PromQL string literal),
`encoding/json`'s HTML-safe escaping of a `[]string` (what `field.Invalid` prints for a list
value), `strconv.ParseInt(s, 10, 64)`, and Go's `len(string)` (UTF-8 bytes). It must not know
about selectors, validation or any API: callers give the message its meaning.

Cost: every function is O(len(text)); `go_quote` of a printable ASCII string is one scan.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Final

__all__ = ["go_json_strings", "go_len", "go_quote", "parse_int64"]

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


def go_json_strings(values: Sequence[str]) -> str:
    """Go `json.Marshal` of a []string (HTML-safe escaping as encoding/json does)."""
    text = json.dumps(list(values), ensure_ascii=False, separators=(",", ":"))
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def go_len(text: str) -> int:
    """Go `len(string)`: UTF-8 bytes."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


_INT_RE: Final = re.compile(r"([+-]?)0*([0-9]+)")
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1


def parse_int64(text: str) -> int | None:
    """Go `strconv.ParseInt(text, 10, 64)`, or None where Go returns an error."""
    match = _INT_RE.fullmatch(text)
    if match is None or len(match.group(2)) > 19:
        return None
    number = int(match.group(1) + match.group(2))
    return number if _INT64_MIN <= number <= _INT64_MAX else None
