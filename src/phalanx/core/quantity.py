"""Kubernetes resource quantities (`resource.Quantity`), parsed exactly as the API server does.

Grammar (k8s.io/apimachinery/pkg/api/resource)::

    <quantity>        ::= <sign>? <number> <suffix>
    <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
    <decimalExponent> ::= ("e" | "E") <sign>? <digits>      (a bare "E" is exa, 10^18)

As in Kubernetes, a parsed value is rounded up (away from zero) to a whole nano-unit, and
the integer accessors round up again: `milli_value` is `MilliValue`, `int_value` is `Value`.

Deliberate differences, all stricter, none reachable from the API server (it always serves
the canonical form, e.g. "1536Mi" for "1.5Gi"), so they only concern hand-written files:

* The number needs a digit: the API server's scanner reads "Gi", "m", ".", "+" and "-" as
  zero, which in a hand-written cluster file is a typo.
* An exponent beyond ±(2^31 - 1) is an error (newer apimachinery agrees; up to 1.35 it is
  silently truncated to 32 bits, so "1e4294967297" meant 10).
* Every magnitude is capped at 2^63 - 1, not only binary-suffixed ones: Kubernetes keeps a
  larger decimal value exactly, but its Value()/MilliValue() overflow on it, and building
  10^2147483647 exactly would let one annotation exhaust memory.
* Whitespace is an error (the JSON decoder trims it; plain ParseQuantity rejects it too).
"""

from __future__ import annotations

import decimal
import functools
import re
from fractions import Fraction

from phalanx.core.errors import QuantityError
from phalanx.core.model import CPU, MEMORY

# A number, then the suffix characters the Kubernetes scanner accepts, then an optional
# signed integer (the exponent). Greedy matching splits the text where Kubernetes does.
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<whole>[0-9]*)(?:\.(?P<fraction>[0-9]*))?"
    r"(?P<suffix>[eEinumkKMGTP]*[+-]?[0-9]*)"
)
_EXPONENT = re.compile(r"[eE](?P<exponent>[+-]?[0-9]+)")

_DECIMAL_SUFFIXES = {
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
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}

MAX_MAGNITUDE = 2**63 - 1
_MAX_EXPONENT = 2**31 - 1
_NANO = decimal.Decimal("1e-9")
# Exact arithmetic on arbitrarily long digit strings: only multiplication and quantize run
# in it, and the cap is applied before quantize, so results stay small.
_EXACT = decimal.Context(
    prec=decimal.MAX_PREC,
    Emax=decimal.MAX_EMAX,
    Emin=decimal.MIN_EMIN,
    rounding=decimal.ROUND_UP,  # away from zero, like inf.RoundUp
    traps=[decimal.InvalidOperation, decimal.Overflow],
)


def parse_quantity(value: str | int | float) -> Fraction:
    """The exact value of a Kubernetes quantity (`"100m"` -> 1/10, `"1.5Gi"` -> 1610612736).

    JSON numbers are accepted as the API server accepts them (`cpu: 2`); a float is read
    through its shortest decimal form, the text it most likely had in the file.
    """
    if isinstance(value, bool):  # bool is an int, and True is no quantity
        raise QuantityError(value)
    if isinstance(value, int):
        return Fraction(max(-MAX_MAGNITUDE, min(MAX_MAGNITUDE, value)))
    text = repr(value) if isinstance(value, float) else value
    if not isinstance(text, str):
        raise QuantityError(value)
    return _parse_text(text)


# A cluster repeats a handful of quantity strings ("1", "4Gi", "500m") across thousands of
# pods; parsing each once saves about 40% of listing pods. Fractions are immutable.
@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Fraction:
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(text)
    whole, fraction = match["whole"], match["fraction"] or ""
    if not whole and not fraction:
        raise QuantityError(text)
    exponent10, exponent2 = _suffix_exponents(match["suffix"], text)
    number = decimal.Decimal(f"{match['sign']}{whole or '0'}.{fraction or '0'}")
    amount = _EXACT.multiply(number.scaleb(exponent10, _EXACT), 2**exponent2)
    if amount.copy_abs() > MAX_MAGNITUDE:
        return Fraction(MAX_MAGNITUDE if amount > 0 else -MAX_MAGNITUDE)
    return Fraction(amount.quantize(_NANO, context=_EXACT))


def _suffix_exponents(suffix: str, value: object) -> tuple[int, int]:
    """(power of ten, power of two) a suffix multiplies by."""
    if suffix in _DECIMAL_SUFFIXES:
        return _DECIMAL_SUFFIXES[suffix], 0
    if suffix in _BINARY_SUFFIXES:
        return 0, _BINARY_SUFFIXES[suffix]
    match = _EXPONENT.fullmatch(suffix)
    if match is None:
        raise QuantityError(value)
    digits = match["exponent"].lstrip("+-").lstrip("0")
    # Checked on the digit count first: int() of a huge digit string is itself an error.
    if len(digits) > len(str(_MAX_EXPONENT)) or int(digits or "0") > _MAX_EXPONENT:
        raise QuantityError(value)
    return int(match["exponent"]), 0


def milli_value(quantity: Fraction) -> int:
    """`quantity` in thousandths, rounded up in magnitude (Kubernetes `MilliValue`)."""
    return _round_away_from_zero(quantity.numerator * 1000, quantity.denominator)


def int_value(quantity: Fraction) -> int:
    """`quantity` in whole units, rounded up in magnitude (Kubernetes `Value`)."""
    return _round_away_from_zero(quantity.numerator, quantity.denominator)


def _round_away_from_zero(numerator: int, denominator: int) -> int:
    # Kubernetes rounds negative int64-held quantities away from zero too (RoundUp: "-9
    # scale 1 rounds to -10"); negative requests and capacities never pass validation.
    # Integer arithmetic only (a Fraction's denominator is positive): every pod's requests
    # pass through here on each watch event, and Fraction operators cost microseconds each.
    magnitude = -(-abs(numerator) // denominator)
    return magnitude if numerator >= 0 else -magnitude


def format_amount(resource: str, amount: int) -> str:
    """An amount in the model's units as people write it: `500m` or `2` CPUs, `4Gi` memory."""
    if resource == CPU:
        return f"{amount}m" if amount % 1000 else str(amount // 1000)
    if resource == MEMORY or resource.startswith(("ephemeral-storage", "hugepages-")):
        if amount % (1 << 30) == 0:
            return f"{amount >> 30}Gi"
        if amount % (1 << 20) == 0:
            return f"{amount >> 20}Mi"
    return str(amount)
