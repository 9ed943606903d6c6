"""Kubernetes quantities parse to the exact value kube-apiserver holds.

Expected values were cross-checked against k8s.io/apimachinery's ParseQuantity, MilliValue
and Value; where Phalanx is deliberately stricter the case says so.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phalanx.core.errors import QuantityError
from phalanx.core.quantity import MAX_MAGNITUDE, int_value, milli_value, parse_quantity

GI = 2**30
NANO = Fraction(1, 10**9)

# (text, exact value, MilliValue, Value)
VALID = [
    ("0", Fraction(0), 0, 0),
    ("1", Fraction(1), 1000, 1),
    ("0.1", Fraction(1, 10), 100, 1),
    ("100m", Fraction(1, 10), 100, 1),
    ("1500m", Fraction(3, 2), 1500, 2),
    (".5", Fraction(1, 2), 500, 1),
    ("5.", Fraction(5), 5000, 5),
    ("+1", Fraction(1), 1000, 1),
    ("-1", Fraction(-1), -1000, -1),
    ("-0", Fraction(0), 0, 0),
    ("00012", Fraction(12), 12000, 12),
    ("1e3", Fraction(1000), 1_000_000, 1000),
    ("1E3", Fraction(1000), 1_000_000, 1000),
    ("1e+3", Fraction(1000), 1_000_000, 1000),
    ("1E-2", Fraction(1, 100), 10, 1),
    ("1.5e-1", Fraction(3, 20), 150, 1),
    ("1E", Fraction(10**18), 10**21, 10**18),  # a bare E is exa, not an exponent
    ("5n", 5 * NANO, 1, 1),
    ("4u", Fraction(4, 10**6), 1, 1),
    ("3m", Fraction(3, 1000), 3, 1),
    ("8k", Fraction(8000), 8_000_000, 8000),
    ("7M", Fraction(7 * 10**6), 7 * 10**9, 7 * 10**6),
    ("6G", Fraction(6 * 10**9), 6 * 10**12, 6 * 10**9),
    ("5T", Fraction(5 * 10**12), 5 * 10**15, 5 * 10**12),
    ("2P", Fraction(2 * 10**15), 2 * 10**18, 2 * 10**15),
    ("1.G", Fraction(10**9), 10**12, 10**9),
    ("1Ki", Fraction(1024), 1_024_000, 1024),
    ("7Mi", Fraction(7 * 2**20), 7 * 2**20 * 1000, 7 * 2**20),
    ("1.5Gi", Fraction(3 * GI, 2), 1_610_612_736_000, 1_610_612_736),
    ("5Ti", Fraction(5 * 2**40), 5 * 2**40 * 1000, 5 * 2**40),
    ("4Pi", Fraction(4 * 2**50), 4 * 2**50 * 1000, 4 * 2**50),
    ("3Ei", Fraction(3 * 2**60), 3 * 2**60 * 1000, 3 * 2**60),
    ("0.5Mi", Fraction(2**19), 2**19 * 1000, 2**19),
    ("100.035Ki", Fraction(10243584, 100), 102_435_840, 102_436),
    # Kubernetes rounds every value up to a whole nano-unit.
    ("3.001n", 4 * NANO, 1, 1),
    ("0.0000000001", NANO, 1, 1),
    ("0.5e-9", NANO, 1, 1),
    ("1e-20", NANO, 1, 1),
    ("0.000000000001Ki", 2 * NANO, 1, 1),
    ("1e-2147483647", NANO, 1, 1),
    # Magnitudes are capped at 2^63-1 (Kubernetes caps binary ones; see the module docs).
    ("9Ei", Fraction(MAX_MAGNITUDE), MAX_MAGNITUDE * 1000, MAX_MAGNITUDE),
    ("9223372036854775807Ki", Fraction(MAX_MAGNITUDE), MAX_MAGNITUDE * 1000, MAX_MAGNITUDE),
    ("12E", Fraction(MAX_MAGNITUDE), MAX_MAGNITUDE * 1000, MAX_MAGNITUDE),
    ("1e2147483647", Fraction(MAX_MAGNITUDE), MAX_MAGNITUDE * 1000, MAX_MAGNITUDE),
    ("-9Ei", Fraction(-MAX_MAGNITUDE), -MAX_MAGNITUDE * 1000, -MAX_MAGNITUDE),
    # Negative values round away from zero, as Kubernetes' RoundUp does.
    ("-1.5", Fraction(-3, 2), -1500, -2),
    ("-1.5m", Fraction(-3, 2000), -2, -1),
    # JSON numbers, as in `cpu: 2` or `cpu: 0.5`.
    (2, Fraction(2), 2000, 2),
    (0.5, Fraction(1, 2), 500, 1),
    (1e-05, Fraction(1, 100_000), 1, 1),
    (2**70, Fraction(MAX_MAGNITUDE), MAX_MAGNITUDE * 1000, MAX_MAGNITUDE),
]


@pytest.mark.parametrize(
    ("text", "value", "milli", "units"), VALID, ids=[repr(case[0]) for case in VALID]
)
def test_a_valid_quantity_has_the_kubernetes_value(
    text: str | int | float, value: Fraction, milli: int, units: int
) -> None:
    quantity = parse_quantity(text)
    assert quantity == value
    assert milli_value(quantity) == milli
    assert int_value(quantity) == units


INVALID = [
    "",
    " 1",
    "1 ",
    "1 Gi",
    "1\n",
    "1gi",
    "1ki",
    "1K",
    "1.5.5",
    "1.1.M",
    "1+1.0M",
    "1Ki1",
    "1Ei3",
    "1e",
    "1e+",
    "1e1.5",
    "ee3",
    "0.1mi",
    "0.1am",
    "aoeu",
    "12x",
    ".5i",
    "1i",
    "-3.01i",
    "-3.01e-",
    "１",  # a full-width digit
    "1e2147483648",  # exponent beyond int32: rejected, not truncated
    "1e4294967297",
    "1e" + "9" * 5000,
    # Kubernetes' scanner reads these as zero; in a hand-written file they are typos.
    "Gi",
    "m",
    ".",
    "+",
    "-",
    "-.",
]


@pytest.mark.parametrize("text", INVALID, ids=[repr(text)[:24] for text in INVALID])
def test_an_invalid_quantity_is_an_error_quoting_it(text: str) -> None:
    with pytest.raises(QuantityError) as raised:
        parse_quantity(text)
    assert str(raised.value).startswith('"')
    assert str(raised.value).endswith(" is not a Kubernetes quantity")


@pytest.mark.parametrize("value", [True, False, math.inf, -math.inf, math.nan, None, [1]], ids=repr)
def test_a_non_quantity_value_is_an_error(value: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(value)  # type: ignore[arg-type]  # deliberately the wrong type


def test_the_error_message_quotes_the_bad_value() -> None:
    with pytest.raises(QuantityError, match=r'^"12x" is not a Kubernetes quantity$'):
        parse_quantity("12x")


def test_a_quantity_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="1 Gi"):
        parse_quantity("1 Gi")


def test_a_very_long_number_parses_exactly() -> None:
    digits = "1" * 10_000
    assert parse_quantity(f"0.{digits}") == Fraction(111_111_112, 10**9)
    assert parse_quantity(digits) == MAX_MAGNITUDE


# --- properties ------------------------------------------------------------------------


@given(st.integers(min_value=-(10**15), max_value=10**15))
def test_millis_round_trip(n: int) -> None:
    assert milli_value(parse_quantity(f"{n}m")) == n


@given(
    st.integers(min_value=0, max_value=2**20),
    st.sampled_from([("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40)]),
)
def test_binary_suffixes_multiply_by_powers_of_two(n: int, suffix: tuple[str, int]) -> None:
    name, power = suffix
    quantity = parse_quantity(f"{n}{name}")
    assert quantity == n * 2**power
    assert int_value(quantity) == n * 2**power


@given(st.integers(min_value=0, max_value=10**12), st.integers(min_value=0, max_value=10**15))
def test_a_decimal_is_its_value_rounded_up_to_a_nano_unit(whole: int, fraction: int) -> None:
    text = f"{whole}.{fraction}"
    exact = Fraction(text)
    assert parse_quantity(text) == Fraction(math.ceil(exact * 10**9), 10**9)


@given(st.fractions(min_value=0, max_value=10**12, max_denominator=10**9))
def test_milli_and_int_values_are_the_least_integers_not_below(quantity: Fraction) -> None:
    assert milli_value(quantity) - 1 < quantity * 1000 <= milli_value(quantity)
    assert int_value(quantity) - 1 < quantity <= int_value(quantity)


@given(st.integers(min_value=-(2**62), max_value=2**62))
def test_a_json_integer_equals_its_text(n: int) -> None:
    assert parse_quantity(n) == parse_quantity(str(n)) == n


@given(st.fractions(min_value=0, max_value=10**12, max_denominator=10**9))
def test_a_negative_value_rounds_away_from_zero_as_its_magnitude_does(quantity: Fraction) -> None:
    assert milli_value(-quantity) == -milli_value(quantity)
    assert int_value(-quantity) == -int_value(quantity)
