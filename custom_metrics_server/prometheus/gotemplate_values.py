"""The values of prometheus-adapter's Go templates: how they print, what is true, the builtin
functions, and the error every stage raises.

PURE. This module owns :class:`TemplateError`, :func:`go_format` (Go's ``fmt`` ``%v`` for the
values the adapter passes: strings, string lists, string maps with sorted keys, integers;
``<no value>`` for a missing key), :func:`truth` (text/template's notion of empty) and
:data:`FUNCTIONS`, the builtins ``index``, ``len``, ``print``, ``printf``, ``println``, ``eq``,
``ne``, ``lt``, ``le``, ``gt``, ``ge``, ``and``, ``or``, ``not`` (``printf`` with Go's
``%!v(MISSING)``/``%!(EXTRA ...)`` markers). It must not parse templates
(:mod:`.gotemplate_parse`) or run them (:mod:`.gotemplate`).

Cost: O(size of the value) per print, O(len(format)) per printf.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from custom_metrics_server.machinery.gostrings import go_quote

__all__ = ["FUNCTIONS", "NO_VALUE", "TemplateError", "go_format", "truth"]

NO_VALUE: Final = "<no value>"


class TemplateError(ValueError):
    """A template that does not parse, or that fails while rendering."""


def go_format(value: object) -> str:
    """`fmt.Sprint(value)` for the value kinds a template sees."""
    if value is None:
        return NO_VALUE
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, Mapping):
        inner = " ".join(f"{go_format(k)}:{go_format(value[k])}" for k in sorted(value))
        return f"map[{inner}]"
    if isinstance(value, Sequence):
        return "[" + " ".join(go_format(item) for item in value) + "]"
    return str(value)


def _sprintf(fmt: str, args: Sequence[object]) -> str:
    out: list[str] = []
    index = 0
    i = 0
    while i < len(fmt):
        char = fmt[i]
        if char != "%" or i + 1 >= len(fmt):
            out.append(char)
            i += 1
            continue
        verb = fmt[i + 1]
        i += 2
        if verb == "%":
            out.append("%")
            continue
        if index >= len(args):
            out.append(f"%!{verb}(MISSING)")
            continue
        arg = args[index]
        index += 1
        if verb == "q" and isinstance(arg, str):
            out.append(go_quote(arg))
        elif verb == "d" and isinstance(arg, int) and not isinstance(arg, bool):
            out.append(str(arg))
        elif verb in "sv":
            out.append(go_format(arg))
        else:
            out.append(f"%!{verb}({type(arg).__name__}={go_format(arg)})")
    if index < len(args):
        extra = ", ".join(f"{type(a).__name__}={go_format(a)}" for a in args[index:])
        out.append(f"%!(EXTRA {extra})")
    return "".join(out)


def truth(value: object) -> bool:
    """text/template's truth: false, 0, nil, and empty strings, lists and maps are false."""
    if value is None:
        return False
    if isinstance(value, bool | int | float | str | Sequence | Mapping):
        return bool(value)
    return True


def _index(item: object, *keys: object) -> object:
    for key in keys:
        if isinstance(item, Mapping):
            item = item.get(key)
        elif isinstance(item, Sequence) and not isinstance(item, str) and isinstance(key, int):
            if not 0 <= key < len(item):
                raise TemplateError(f"error calling index: index out of range: {key}")
            item = item[key]
        else:
            raise TemplateError(f"error calling index: cannot index {go_format(item)}")
    return item


def _len(item: object) -> int:
    if isinstance(item, str | Sequence | Mapping):
        return len(item)
    raise TemplateError(f"error calling len: len of {type(item).__name__}")


def _compare(op: Callable[[Any, Any], bool]) -> Callable[..., bool]:
    def compare(left: object, *rights: object) -> bool:
        if not rights:
            raise TemplateError("missing argument for comparison")
        return any(op(left, right) for right in rights) if op is _eq else op(left, rights[0])

    return compare


def _eq(left: object, right: object) -> bool:
    return left == right


def _and(*args: object) -> object:
    result: object = None
    for arg in args:
        result = arg
        if not truth(arg):
            return arg
    return result


def _or(*args: object) -> object:
    result: object = None
    for arg in args:
        result = arg
        if truth(arg):
            return arg
    return result


FUNCTIONS: Final[Mapping[str, Callable[..., object]]] = {
    "index": _index,
    "len": _len,
    "print": lambda *a: "".join(go_format(x) for x in a),
    "println": lambda *a: " ".join(go_format(x) for x in a) + "\n",
    "printf": lambda fmt, *a: _sprintf(str(fmt), a),
    "eq": _compare(_eq),
    "ne": _compare(lambda a, b: a != b),
    "lt": _compare(lambda a, b: a < b),
    "le": _compare(lambda a, b: a <= b),
    "gt": _compare(lambda a, b: a > b),
    "ge": _compare(lambda a, b: a >= b),
    "and": _and,
    "or": _or,
    "not": lambda a: not truth(a),
}
