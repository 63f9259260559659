"""Kubernetes ``resource.Quantity``: parsing and canonical formatting.

This module owns the Python port of ``k8s.io/apimachinery/pkg/api/resource``
``Quantity``: the grammar accepted by ``ParseQuantity``, the exact value a string
denotes (rounded up to nano, BinarySI capped at 2^63-1), the canonical string
``Quantity.String()`` emits, ``MilliValue``, ``Cmp`` and ``Add``. Metric values
served by the Custom and External Metrics APIs are quantities, so every string
this server puts on the wire for a value comes from here.

It is a pure module: standard library only, no I/O, no logging, no clocks and no
mutable global state other than a bounded formatting cache. Values are held as
exact :class:`decimal.Decimal` numbers and never pass through a float.

Upstream behaviour is reproduced on purpose, quirks included (each is marked
with a comment saying so). The few places where this port deliberately differs
are listed in the docstrings of the functions concerned.

It is one piece on purpose: it ports one Go type, whose parser, normalisation and
``String()`` share the suffix tables and the scale arithmetic; split, each half
would import the other's private helpers.

Cost: parsing and formatting are O(digits); the serving path's ``format_quantity``
of an int is a few string operations, and other values are memoised.
"""

from __future__ import annotations

import enum
import functools
import re
from dataclasses import dataclass, field
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, ROUND_UP, Context, Decimal

__all__ = [
    "ERR_FORMAT_WRONG",
    "ERR_NUMERIC",
    "ERR_SUFFIX",
    "Format",
    "Quantity",
    "format_quantity",
]


class Format(enum.Enum):
    """The three suffix families a quantity can be written in."""

    DECIMAL_EXPONENT = "DecimalExponent"  # e.g. 12e6
    BINARY_SI = "BinarySI"  # e.g. 12Mi (12 * 2^20)
    DECIMAL_SI = "DecimalSI"  # e.g. 12M  (12 * 10^6)


# splitREString upstream: only quoted in the error message, never used to match.
_SPLIT_RE_STRING = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"

#: Error texts, identical to upstream's ErrFormatWrong, ErrNumeric and ErrSuffix.
ERR_FORMAT_WRONG = "quantities must match the regular expression '" + _SPLIT_RE_STRING + "'"
ERR_NUMERIC = "unable to parse numeric part of quantity"
ERR_SUFFIX = "unable to parse quantity's suffix"

_DIGITS = frozenset("0123456789")
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_EXPONENT_BODY = re.compile(r"[+-]?[0-9]+")  # what strconv.ParseInt(s, 10, 64) accepts

_DECIMAL_SUFFIXES: dict[str, int] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_DECIMAL_SUFFIX_BY_EXPONENT: dict[int, str] = {e: s for s, e in _DECIMAL_SUFFIXES.items()}
_BINARY_SUFFIXES: dict[str, int] = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
# Indexed by the power of 1024; power 0 needs no suffix.
_BINARY_SUFFIX_BY_POWER: tuple[str, ...] = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")

_MAX_INT64 = (1 << 63) - 1
_MAX_INT64_FACTORS = 18  # decimal digits the int64 fast path of ParseQuantity accepts
_NANO = -9  # the finest scale a parsed quantity keeps
_NANO_UNIT = Decimal("1e-9")
_MAX_ALLOWED = Decimal(_MAX_INT64)  # the BinarySI parse cap
_ONE = Decimal(1)
_ZERO = Decimal(0)
_BINARY_DECIMAL_BELOW = Decimal(1024)  # |x| < 1024 in BinarySI is shown as DecimalSI
_INT_FAST_LIMIT = 10**4000  # below sys.int_info.default_max_str_digits

# Exact arithmetic: with MAX_PREC no addition, multiplication or scaling ever rounds,
# and ROUND_UP (away from zero) is upstream's inf.RoundUp for the explicit roundings.
_EXACT = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN, rounding=ROUND_UP)


def _wrap_int32(value: int) -> int:
    """Return value truncated to a two's complement int32, as Go's int32(x) does."""
    return ((value + (1 << 31)) % (1 << 32)) - (1 << 31)


def _scan(text: str) -> tuple[bool, str, str, str, str]:
    """Split text like upstream's parseQuantityString: (positive, value, num, denom, suffix)."""
    positive = True
    pos = 0
    end = len(text)
    if text[0] == "-":
        positive = False
        pos = 1
    elif text[0] == "+":
        pos = 1

    # Strip leading zeros. Upstream quirk: a string made only of a sign and zeros
    # (even "+" or "-" alone) is zero.
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "0", "", ""

    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos]
    if pos >= end:
        return positive, text, num, "", ""
    if not num:
        num = "0"

    denom = ""
    if text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
        if pos >= end:
            # Upstream quirk: "5." and "." are accepted (the TODO about "1.G" upstream).
            return positive, text, num, denom, ""
    value = text[:pos]

    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise ValueError(ERR_FORMAT_WRONG)
    return positive, value, num, denom, text[suffix_start:]


def _interpret(suffix: str) -> tuple[int, int, Format] | None:
    """Return (base, exponent, format) for a suffix, or None, like quantitySuffixer.interpret."""
    exponent = _DECIMAL_SUFFIXES.get(suffix)
    if exponent is not None:
        return 10, exponent, Format.DECIMAL_SI
    exponent = _BINARY_SUFFIXES.get(suffix)
    if exponent is not None:
        return 2, exponent, Format.BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        body = suffix[1:]
        if _EXPONENT_BODY.fullmatch(body) is None:
            return None
        parsed = int(body)
        if not -(1 << 63) <= parsed <= _MAX_INT64:
            return None  # strconv.ParseInt range error
        # Upstream quirk: the int64 exponent is truncated with int32(parsed), so
        # "1e4294967296" means 1 and "1e9223372036854775807" means 0.1.
        return 10, _wrap_int32(parsed), Format.DECIMAL_EXPONENT
    return None


def _normalise(amount: Decimal, fmt: Format) -> tuple[Decimal, Format]:
    """Apply ParseQuantity's inf.Dec path: round up to nano, cap BinarySI, demote tiny BinarySI."""
    if not amount:
        return _ZERO, fmt
    negative = amount.is_signed()
    magnitude = amount.copy_abs()
    exponent = magnitude.as_tuple().exponent
    if isinstance(exponent, int) and exponent < _NANO:
        # Non-zero values finer than nano round away from zero, so "0.9n" is "1n".
        magnitude = magnitude.quantize(_NANO_UNIT, context=_EXACT)
    if fmt is Format.BINARY_SI:
        # Upstream's silent cap (a TODO there): "8Ei" parses as 2^63-1.
        magnitude = min(magnitude, _MAX_ALLOWED)
        if magnitude < _ONE:
            fmt = Format.DECIMAL_SI
    return (magnitude.copy_negate() if negative else magnitude), fmt


def _decimal_digits(value: Decimal) -> tuple[str, str, int]:
    """Return (sign, digits, exponent) of a non-zero value with trailing zeros moved out."""
    sign_bit, digit_tuple, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError(f"a quantity must be finite, not {value!r}")
    digits = "".join(map(str, digit_tuple))
    stripped = digits.rstrip("0")
    return ("-" if sign_bit else ""), stripped, exponent + len(digits) - len(stripped)


def _decimal_string(value: Decimal, fmt: Format) -> str:
    """Render a non-zero value in DecimalSI or DecimalExponent (AsCanonicalBytes + suffix)."""
    sign, digits, exponent = _decimal_digits(value)
    # Lower the exponent to a multiple of 3, growing the mantissa instead.
    shift = exponent % 3
    mantissa = digits + "0" * shift
    exponent -= shift
    if fmt is Format.DECIMAL_SI:
        suffix = _DECIMAL_SUFFIX_BY_EXPONENT.get(exponent)
        if suffix is not None:
            return sign + mantissa + suffix
    # DecimalExponent, or a DecimalSI exponent without a suffix (above "E" or below
    # "n"): upstream falls back to "e" notation rather than drop the magnitude
    # (kubernetes#140459; older releases printed 10^21 as "1").
    if exponent == 0:
        return sign + mantissa
    return f"{sign}{mantissa}e{exponent}"


def _canonical(value: Decimal, fmt: Format) -> str:
    """Return what upstream CanonicalizeBytes produces for value in format fmt."""
    if not value:
        return "0"
    if fmt is Format.BINARY_SI:
        magnitude = value.copy_abs()
        if magnitude < _BINARY_DECIMAL_BELOW:
            return _decimal_string(value, Format.DECIMAL_SI)
        sign, _, exponent = _decimal_digits(value)
        if exponent < 0:
            # Not an integer: don't lose precision, show as DecimalSI.
            return _decimal_string(value, Format.DECIMAL_SI)
        if exponent < 70:  # 10^70 is a multiple of 1024^7, past the last suffix "Ei"
            whole = int(magnitude)
            power = 0
            while whole % 1024 == 0 and power < len(_BINARY_SUFFIX_BY_POWER):
                whole //= 1024
                power += 1
            if power < len(_BINARY_SUFFIX_BY_POWER):
                return f"{sign}{Decimal(whole)}{_BINARY_SUFFIX_BY_POWER[power]}"
        # Past "Ei" (only reachable through arithmetic, parsing caps at 2^63-1):
        # upstream now emits the exact base-10 form in DecimalExponent notation
        # (kubernetes#140459, keeping power 0 suffix-free per kubernetes#141817).
        return _decimal_string(value, Format.DECIMAL_EXPONENT)
    return _decimal_string(value, fmt)


def _to_decimal(value: int | float | Decimal) -> Decimal:
    """Convert a sample value to an exact Decimal (floats via their shortest repr)."""
    if isinstance(value, bool):
        raise TypeError("a quantity cannot be built from a bool")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        converted = Decimal(repr(value))
    elif isinstance(value, Decimal):
        converted = value
    else:
        raise TypeError(f"a quantity needs an int, float or Decimal, not {type(value).__name__}")
    if not converted.is_finite():
        raise ValueError(f"a quantity must be finite, not {value!r}")
    return converted


@dataclass(frozen=True, slots=True, eq=False)
class Quantity:
    """An exact Kubernetes quantity: a Decimal value and the format it is written in.

    Equality, ordering and hashing look at the numeric value only, like Go's
    ``Cmp``: ``Quantity.parse("1k") == Quantity.parse("1000")``.
    Constructing one directly keeps ``value`` as given (like upstream's
    ``NewDecimalQuantity``); ``parse`` and ``from_number`` round it as upstream does.
    """

    value: Decimal
    format: Format = Format.DECIMAL_SI
    # Upstream's cached string ``q.s``: the parsed text when ParseQuantity kept it,
    # otherwise the canonical form once it has been computed.
    _text: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        """Reject values that are not finite Decimals and unknown formats."""
        if not isinstance(self.value, Decimal):
            raise TypeError(f"Quantity.value must be a Decimal, not {type(self.value).__name__}")
        if not self.value.is_finite():
            raise ValueError(f"a quantity must be finite, not {self.value!r}")
        if not isinstance(self.format, Format):
            raise TypeError(f"Quantity.format must be a Format, not {self.format!r}")

    @classmethod
    def _with_text(cls, value: Decimal, fmt: Format, text: str | None) -> Quantity:
        """Build a quantity whose String() is text (when not None), as ParseQuantity does."""
        quantity = cls(value, fmt)
        if text is not None:
            object.__setattr__(quantity, "_text", text)
        return quantity

    @classmethod
    def parse(cls, text: str) -> Quantity:
        """Parse text exactly like upstream ParseQuantity; raise ValueError if it is invalid.

        The error messages are upstream's (ERR_FORMAT_WRONG, ERR_SUFFIX, ERR_NUMERIC).
        One deliberate difference: Go overflows its int32 scale arithmetic for
        exponents within a few digits of +-2^31 (so "1.5e-2147483648" becomes huge
        there); here the scale is exact, so such a value rounds up to one nano.
        """
        if not isinstance(text, str):
            raise TypeError(f"a quantity is parsed from a str, not {type(text).__name__}")
        if not text:
            raise ValueError(ERR_FORMAT_WRONG)
        if text == "0":
            return cls._with_text(_ZERO, Format.DECIMAL_SI, text)

        positive, value, num, denom, suffix = _scan(text)
        interpreted = _interpret(suffix)
        if interpreted is None:
            raise ValueError(ERR_SUFFIX)
        base, exponent, fmt = interpreted

        # Upstream's int64 fast path, taken when the digits surely fit an int64.
        mantissa = 1
        if fmt is Format.BINARY_SI:
            scale = 0
            if denom:
                precision = -1
            else:
                mantissa = 1 << exponent
                # Upstream: 15 - len(num) - int32(float32(exponent)*3/10) - 1.
                precision = 15 - len(num) - (exponent * 3) // 10 - 1
        else:
            scale = exponent
            precision = _MAX_INT64_FACTORS - len(num) - len(denom)
        if precision >= 0:
            scale -= len(denom)
            if scale >= _NANO:
                shifted = num + denom
                digits = int(shifted)
                result = digits * mantissa
                if result <= _MAX_INT64:
                    if not positive:
                        result = -result
                    amount = Decimal(result).scaleb(scale, _EXACT) if result else _ZERO
                    # Upstream quirk: the input text is kept as the String() form when it
                    # merely looks canonical, so "+1", "01", "5.", "1.001k" and "1E3"
                    # come back verbatim.
                    if fmt is Format.BINARY_SI:
                        keep = digits & 0x07 != 0
                    else:
                        keep = scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"
                    return cls._with_text(amount, fmt, text if keep else None)

        if not any(char in _DIGITS for char in value):
            # inf.Dec.SetString("."): reachable as ".e-20", whose scale misses the fast path.
            raise ValueError(ERR_NUMERIC)
        amount = Decimal(value)
        if base == 10:
            amount = amount.scaleb(exponent, _EXACT)
        else:
            amount = _EXACT.multiply(amount, Decimal(1 << exponent))
        amount, fmt = _normalise(amount, fmt)
        return cls(amount, fmt)

    @classmethod
    def from_number(cls, value: int | float | Decimal, fmt: Format = Format.DECIMAL_SI) -> Quantity:
        """Build a quantity from a sample value, normalised exactly as ``parse`` would.

        Conversion: an ``int`` or a finite ``Decimal`` is taken exactly; a ``float``
        is converted through ``Decimal(repr(value))``, its shortest round-tripping
        decimal, so ``0.1`` becomes ``100m`` rather than the binary expansion.
        NaN and infinities raise ValueError, a bool or any other type TypeError.
        The exact value then goes through ParseQuantity's normalisation: a non-zero
        value finer than nano rounds away from zero to a whole nano (``1e-10`` is
        ``1n``), a BinarySI magnitude above 2^63-1 is capped at 2^63-1, and a
        BinarySI magnitude below 1 switches to DecimalSI. So
        ``from_number(x, fmt) == Quantity.parse(str(from_number(x, fmt)))``.
        """
        amount, normalised_format = _normalise(_to_decimal(value), fmt)
        return cls(amount, normalised_format)

    def __str__(self) -> str:
        """Return exactly what Go's Quantity.String() returns for this quantity."""
        text = self._text
        if text is None:
            text = _canonical(self.value, self.format)
            object.__setattr__(self, "_text", text)
        return text

    def milli_value(self) -> int:
        """Return value * 1000 rounded to an integer away from zero, like Go's MilliValue.

        Upstream documents this as ceil(q * 1000); its int64 representation (used by
        almost every parsed quantity) and its current inf.Dec path both round away
        from zero, which differs from ceil for negative values: ``-1.5u`` gives -1.
        Unlike Go the result is an exact Python int and never overflows int64.
        """
        scaled = self.value.scaleb(3, _EXACT)
        return int(scaled.to_integral_value(rounding=ROUND_UP, context=_EXACT))

    def is_zero(self) -> bool:
        """Return True if the quantity is zero."""
        return not self.value

    def __eq__(self, other: object) -> bool:
        """Compare numeric values, like Go's Cmp(...) == 0."""
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.value == other.value

    def __hash__(self) -> int:
        """Hash the numeric value, consistently with ``==``."""
        return hash(self.value)

    def __lt__(self, other: Quantity) -> bool:
        """Order by numeric value."""
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.value < other.value

    def __le__(self, other: Quantity) -> bool:
        """Order by numeric value."""
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.value <= other.value

    def __gt__(self, other: Quantity) -> bool:
        """Order by numeric value."""
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.value > other.value

    def __ge__(self, other: Quantity) -> bool:
        """Order by numeric value."""
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.value >= other.value

    def __add__(self, other: Quantity) -> Quantity:
        """Return the exact sum, like Go's Add: the receiver's format, or other's if self is 0."""
        if not isinstance(other, Quantity):
            return NotImplemented
        fmt = other.format if self.is_zero() else self.format
        return Quantity(_EXACT.add(self.value, other.value), fmt)

    def __sub__(self, other: Quantity) -> Quantity:
        """Return the exact difference, like Go's Sub (formats as in ``__add__``)."""
        if not isinstance(other, Quantity):
            return NotImplemented
        fmt = other.format if self.is_zero() else self.format
        return Quantity(_EXACT.subtract(self.value, other.value), fmt)

    def __neg__(self) -> Quantity:
        """Return the negated quantity in the same format, like Go's Neg."""
        return Quantity(self.value.copy_negate() if self.value else _ZERO, self.format)


def _format_int(value: int, fmt: Format) -> str:
    """Return str(Quantity.from_number(value, fmt)) for an int, without building a Quantity."""
    if not value:
        return "0"
    sign = "-" if value < 0 else ""
    magnitude = -value if value < 0 else value
    if fmt is Format.BINARY_SI and magnitude >= 1024:
        magnitude = min(magnitude, _MAX_INT64)  # the parse cap, see _normalise
        power = 0
        while magnitude & 1023 == 0:
            magnitude >>= 10
            power += 1
        return f"{sign}{magnitude}{_BINARY_SUFFIX_BY_POWER[power]}"
    digits = str(magnitude)
    stripped = digits.rstrip("0")
    exponent = len(digits) - len(stripped)
    shift = exponent % 3
    mantissa = stripped + "0" * shift
    exponent -= shift
    if fmt is not Format.DECIMAL_EXPONENT:  # DecimalSI, or BinarySI below 1024
        suffix = _DECIMAL_SUFFIX_BY_EXPONENT.get(exponent)
        if suffix is not None:
            return sign + mantissa + suffix
    if exponent == 0:
        return sign + mantissa
    return f"{sign}{mantissa}e{exponent}"


@functools.lru_cache(maxsize=4096, typed=True)
def _format_cached(value: float | Decimal, fmt: Format) -> str:
    """Format a float or Decimal sample value; memoised because samples repeat."""
    amount, normalised_format = _normalise(_to_decimal(value), fmt)
    return _canonical(amount, normalised_format)


def format_quantity(value: Decimal | int | float, fmt: Format = Format.DECIMAL_SI) -> str:
    """Return str(Quantity.from_number(value, fmt)) cheaply, for the serving hot path."""
    if type(value) is int and -_INT_FAST_LIMIT < value < _INT_FAST_LIMIT:
        # Exact ints are the common case; huge ones go through Decimal, clear of the
        # int-to-str digit limit.
        return _format_int(value, fmt)
    if isinstance(value, Decimal) and not value.is_finite():
        raise ValueError(f"a quantity must be finite, not {value!r}")  # sNaN is unhashable
    return _format_cached(value, fmt)
