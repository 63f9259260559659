"""The Go Prometheus client's text-format primitives: float formatting and label escaping.

PURE: standard library only, no I/O. Shared by the two writers of the text format, the
``/metrics/resources`` renderer (:mod:`resources.exposition`) and the kubelet ``/metrics/resource``
writer (:mod:`kubelet_format.writer`), so both write numbers and label values byte for byte as
``expfmt`` does. It must not know any metric.

Cost: O(digits) per float, O(len(value)) per label value.
"""

from __future__ import annotations

import math

__all__ = ["escape_label_value", "format_go_float"]


def format_go_float(value: float) -> str:
    """``value`` as the Go Prometheus text format writes it. O(digits).

    That is ``strconv.FormatFloat(v, 'g', -1, 64)``: the shortest digits that read back
    as ``v`` (Python's ``repr`` finds the same ones), in exponent form (``1e+06``,
    ``1.34217728e+08``, ``1e-05``) when the decimal exponent is below -4 or at least 6;
    ``+Inf``, ``-Inf``, ``NaN``; and 0 (also -0) as ``0``, as expfmt's ``writeFloat``.
    """
    if value == 0:
        return "0"
    if math.isnan(value):
        return "NaN"
    if value in (math.inf, -math.inf):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(value)
    sign = ""
    if text[0] == "-":
        sign, text = "-", text[1:]
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    point = len(whole) + (int(exponent) if exponent else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    # value = 0.<digits> x 10^point
    scientific = point - 1
    if scientific < -4 or scientific >= 6:
        head = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        exp_sign = "-" if scientific < 0 else "+"
        return f"{sign}{head}e{exp_sign}{abs(scientific):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def escape_label_value(value: str) -> str:
    """A label value as the Go client writes it: backslash, double quote and newline escaped.
    O(len(value))."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
