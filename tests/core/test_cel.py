"""DRA device selectors: what Phalanx evaluates is evaluated as CEL would; the rest is said.

Device attributes below are those NVIDIA's DRA driver publishes for an H100 (see
tests/builders.py `gpu_device`); expressions are the shapes found in its DeviceClasses and
demo claims.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phalanx.core.cel import (
    AttributeValue,
    CelSyntaxError,
    Selector,
    Unsupported,
    Verdict,
    Version,
    parse_selector,
)

GI = 2**30
GPU = "gpu.nvidia.com"


@dataclass
class FakeDevice:
    """A device view a test fills in (the real one, phalanx.core.dra.Device, is interned)."""

    driver: str = GPU
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    capacities: dict[str, Fraction] = field(default_factory=dict)

    def attribute(self, name: str) -> AttributeValue | None:
        return self.attributes.get(name)

    def capacity(self, name: str) -> Fraction | None:
        return self.capacities.get(name)


H100 = FakeDevice(
    attributes={
        f"{GPU}/type": "gpu",
        f"{GPU}/productName": "NVIDIA H100 80GB HBM3",
        f"{GPU}/architecture": "Hopper",
        f"{GPU}/index": 3,
        f"{GPU}/cudaComputeCapability": Version.parse("9.0.0"),
        f"{GPU}/driverVersion": Version.parse("550.54.15"),
        "resource.kubernetes.io/pcieRoot": "pci0000:01",
    },
    capacities={f"{GPU}/memory": Fraction(81559 * 2**20)},
)
CHANNEL = FakeDevice(
    driver="compute-domain.nvidia.com",
    attributes={"compute-domain.nvidia.com/type": "channel", "compute-domain.nvidia.com/id": 0},
)


def selector(expression: str) -> Selector:
    parsed = parse_selector(expression)
    assert isinstance(parsed, Selector), parsed
    return parsed


A = f"device.attributes['{GPU}']"
C = f"device.capacity['{GPU}']"

EVALUATED = [
    # NVIDIA's own DeviceClasses.
    (f"device.driver == '{GPU}' && {A}.type == 'gpu'", H100, Verdict.TRUE),
    (f"device.driver == '{GPU}' && {A}.type == 'mig'", H100, Verdict.FALSE),
    (
        "device.driver == 'compute-domain.nvidia.com' && "
        "device.attributes['compute-domain.nvidia.com'].type == 'channel' && "
        "device.attributes['compute-domain.nvidia.com'].id == 0",
        CHANNEL,
        Verdict.TRUE,
    ),
    # A class for another driver never errors on our device: `false && error` is false.
    (f"device.driver == 'compute-domain.nvidia.com' && {A}.id == 0", H100, Verdict.FALSE),
    (f"{A}.id == 0 && device.driver == 'x'", H100, Verdict.FALSE),
    (f"{A}.id == 0 || true", H100, Verdict.TRUE),
    (f"{A}.id == 0", H100, Verdict.ERROR),  # no such attribute
    (f"{A}.id == 0 || false", H100, Verdict.ERROR),
    ("device.attributes['nobody.example.com'].x == 1", H100, Verdict.ERROR),
    # Quantities on capacities.
    (f"{C}.memory.compareTo(quantity('40Gi')) >= 0", H100, Verdict.TRUE),
    (f"{C}.memory.compareTo(quantity('81559Mi')) == 0", H100, Verdict.TRUE),
    (f"{C}.memory.isGreaterThan(quantity('80Gi'))", H100, Verdict.FALSE),
    (f"{C}.memory.isLessThan(quantity('80Gi'))", H100, Verdict.TRUE),
    (f"{C}.memory == quantity('81559Mi')", H100, Verdict.TRUE),
    (f"{C}.memory.asInteger() > 80000000000", H100, Verdict.TRUE),
    (f"{C}.memory.isInteger() && {C}.memory.sign() == 1", H100, Verdict.TRUE),
    # Strings, ints, bools, lists, presence.
    (f"{A}.productName == 'NVIDIA H100 80GB HBM3'", H100, Verdict.TRUE),
    (f"{A}.productName != 'NVIDIA H100 80GB HBM3'", H100, Verdict.FALSE),
    (f"{A}.productName in ['NVIDIA A100-SXM4-40GB', 'NVIDIA H100 80GB HBM3']", H100, Verdict.TRUE),
    (f"{A}.productName.startsWith('NVIDIA H1')", H100, Verdict.TRUE),
    (f"{A}.architecture.contains('opp') && {A}.architecture.endsWith('er')", H100, Verdict.TRUE),
    (f"{A}.index < 4 && {A}.index >= 3", H100, Verdict.TRUE),
    (f"{A}.index in [0, 1, 2]", H100, Verdict.FALSE),
    (f"{A}.index == '3'", H100, Verdict.FALSE),  # different kinds are simply unequal
    (f"{A}.index < '4'", H100, Verdict.ERROR),
    (f"'productName' in {A} && !('profile' in {A})", H100, Verdict.TRUE),
    (f"has({A}.productName) && !has({A}.profile)", H100, Verdict.TRUE),
    (f"has(device.capacity['{GPU}'].memory)", H100, Verdict.TRUE),
    ("device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:01'", H100, Verdict.TRUE),
    (f"({A}.index == 3) ? {A}.type == 'gpu' : false", H100, Verdict.TRUE),
    (f"{A}.index == -3", H100, Verdict.FALSE),
    # Versions.
    (f"{A}.cudaComputeCapability.isGreaterThan(semver('8.9.0'))", H100, Verdict.TRUE),
    (f"{A}.driverVersion.compareTo(semver('550.54.15')) == 0", H100, Verdict.TRUE),
    (f"{A}.driverVersion == semver('550.54.15')", H100, Verdict.TRUE),
    (f"{A}.cudaComputeCapability.major() == 9", H100, Verdict.TRUE),
    (f"{A}.productName.isGreaterThan(semver('1.0.0'))", H100, Verdict.ERROR),
    # A result that is not a boolean is an error, as in kube-scheduler.
    (f"({A}.index == 3) ? {A}.productName : true", H100, Verdict.ERROR),
]


@pytest.mark.parametrize(
    ("expression", "device", "verdict"),
    EVALUATED,
    ids=[f"{i}-{v.value}" for i, (_, _, v) in enumerate(EVALUATED)],
)
def test_a_supported_selector_evaluates_as_cel_does(
    expression: str, device: FakeDevice, verdict: Verdict
) -> None:
    assert selector(expression).evaluate(device) is verdict


UNSUPPORTED = [
    (f"{A}.index + 1 == 4", "arithmetic"),
    (f"cel.bind(a, {A}, a.type == 'gpu')", "cel.bind"),
    (f"{A}.productName.matches('H1.*')", "matches"),
    (f"[{A}.index].all(i, i > 0)", "all"),
    (f"{A}.memory > 1.5", "float"),
    (f"{A}.index == 3u", "uint"),
    (f"{A}.uuid == b'x'", "bytes"),
    ("{'a': 1}.a == 1", "map literal"),
    (f"{A}.productName.size() > 3", "size"),
    ("request.name == 'gpu'", "request"),
    (f"device.allowMultipleAllocations && {A}.type == 'gpu'", "allowMultipleAllocations"),
    (f"{A}.index in [{A}.index]", "all literals"),
    ("device.attributes[device.driver].type == 'gpu'", "computed domain"),
    (f"{C}.memory.compareTo(quantity({A}.productName)) > 0", "computed value"),
    ("3 == 3 ? 1 : 2", "integer"),
    # Quantities compare through compareTo: CEL has no `>=` between two of them.
    (f"{C}.memory >= quantity('40Gi')", "use compareTo"),
]


@pytest.mark.parametrize(("expression", "mentions"), UNSUPPORTED, ids=[m for _, m in UNSUPPORTED])
def test_a_valid_selector_phalanx_cannot_evaluate_is_unsupported_with_the_reason(
    expression: str, mentions: str
) -> None:
    parsed = parse_selector(expression)
    assert isinstance(parsed, Unsupported)
    assert mentions in parsed.reason
    assert parsed.expression == expression


MALFORMED = [
    ("", "empty"),
    ("device.driver == ", "expected a name"),
    ("device.driver = 'gpu'", "unexpected character"),
    ("(device.driver == 'x'", "expected"),
    ("device.driver == 'unterminated", "unterminated string"),
    ("device.attributes['a'].if == 1", "reserved word"),
    ("1 2", "unexpected"),
    ("quantity('forty gigs') == quantity('1')", "not a Kubernetes quantity"),
    ("semver('9.0') == semver('9.0.0')", "not a semantic version"),
    ("'\\q' == 'x'", "unknown escape"),
    ("9223372036854775808 == 1", "out of range"),
    ("device.driver == 'x' &&", "expected a name"),
    ("has(device)", "has() takes"),
]


@pytest.mark.parametrize(("expression", "mentions"), MALFORMED, ids=[m for _, m in MALFORMED])
def test_text_that_is_not_a_cel_expression_is_bad_input(expression: str, mentions: str) -> None:
    with pytest.raises(CelSyntaxError) as raised:
        parse_selector(expression)
    assert mentions in str(raised.value)
    assert "CEL expression" in str(raised.value)


@pytest.mark.parametrize(
    "expression",
    ["١٢٣ == 123", "device.attributes['a'].b == ²", ".٥ == 0.5"],
    ids=["Arabic-Indic digits", "a superscript two", "after a dot"],
)
def test_a_digit_outside_ascii_is_not_a_cel_number_but_bad_input(expression: str) -> None:
    # Python's str.isdigit takes them; CEL's grammar has only 0-9.
    with pytest.raises(CelSyntaxError, match="unexpected character"):
        parse_selector(expression)


def test_valid_cel_beyond_phalanx_parses_rather_than_failing() -> None:
    # The whole grammar is read, so none of these is ever reported as malformed.
    for expression in (
        "r'raw\\d' == '''triple''' || b'\\x00' == b\"\" || 0x1F == 31 || -9223372036854775808 < 0",
        "google.protobuf.Int64Value{value: 1} == 1",
        "[1, 2,].exists(x, x == 1) ? {'k': [1]}.k[0] == 1 : .device.driver == 'x'",
        "1 + 2 * 3 % 4 - -5 / 6 == 7 // comments are allowed",
    ):
        assert isinstance(parse_selector(expression), Unsupported)


@pytest.mark.parametrize(
    ("expression", "verdict"),
    [
        (f"{A}.index == 003", Verdict.TRUE),
        (f"{A}.index in [00, 01, 02]", Verdict.FALSE),
        (f"{A}.index < 0x0A && {A}.index > -0003", Verdict.TRUE),
    ],
    ids=["equal", "in", "hex and negative"],
)
def test_an_integer_with_leading_zeros_is_decimal_as_in_cel(
    expression: str, verdict: Verdict
) -> None:
    # CEL reads digits in base 10 whatever they start with; 0x alone makes hexadecimal.
    assert selector(expression).evaluate(H100) is verdict


def test_an_unsigned_literal_with_leading_zeros_is_unsupported_not_malformed() -> None:
    parsed = parse_selector(f"{A}.index == 003u")
    assert isinstance(parsed, Unsupported)
    assert "uint" in parsed.reason


# The API server takes selectors of up to 10 KiB; these fit, and CEL's parser accepts them.
LONG_AND = " && ".join(["true"] * 1500 + [f"{A}.type == 'gpu'"])
LONG_OR = " || ".join(["false"] * 1000 + [f"{A}.index == 3"])


@pytest.mark.parametrize(
    ("expression", "verdict"),
    [
        (LONG_AND, Verdict.TRUE),
        (LONG_OR, Verdict.TRUE),
        ("!" * 3000 + f"({A}.index == 3)", Verdict.TRUE),  # an even number of `!` cancels
        ("!" * 3001 + f"({A}.index == 3)", Verdict.FALSE),
        (f"{A}.index == " + "-" * 3001 + "3", Verdict.FALSE),
    ],
    ids=["1500 conjuncts", "1000 disjuncts", "3000 nots", "3001 nots", "3001 minuses"],
)
def test_a_long_selector_within_the_api_limits_is_evaluated(
    expression: str, verdict: Verdict
) -> None:
    assert selector(expression).evaluate(H100) is verdict


@pytest.mark.parametrize(
    "expression",
    [
        "(" * 150 + f"{A}.index == 3" + ")" * 150,
        " == ".join(["true"] * 150),
        f"{A}.index" + ".x" * 150 + " == 1",
        "[" * 150 + "true" + "]" * 150 + " == [true]",
    ],
    ids=["150 parentheses", "150 equalities", "150 selections", "150 lists"],
)
def test_a_selector_nested_too_deeply_for_phalanx_is_unsupported_with_the_reason(
    expression: str,
) -> None:
    parsed = parse_selector(expression)
    assert isinstance(parsed, Unsupported)
    assert "nested" in parsed.reason
    assert parsed.expression == expression


FLAGS = FakeDevice(attributes={f"{GPU}/on": True, f"{GPU}/off": False, **H100.attributes})


@pytest.mark.parametrize(
    ("expression", "verdict"),
    [
        # CEL orders bools (false < true) ...
        (f"{A}.on > {A}.off", Verdict.TRUE),
        (f"{A}.off >= {A}.on", Verdict.FALSE),
        # ... but has no `<` for versions or quantities: those compare through compareTo.
        (f"{A}.driverVersion > {A}.cudaComputeCapability", Verdict.ERROR),
        (f"({A}.on ? {C}.memory : {A}.index) > ({A}.on ? {C}.memory : 0)", Verdict.ERROR),
        (f"{A}.on > false", Verdict.TRUE),
        (f"{A}.driverVersion.compareTo({A}.cudaComputeCapability) > 0", Verdict.TRUE),
    ],
    ids=[
        "bools",
        "bools, false",
        "versions",
        "quantities",
        "a bool literal",
        "versions through compareTo",
    ],
)
def test_ordering_two_attribute_values_follows_cel_s_overloads(
    expression: str, verdict: Verdict
) -> None:
    assert selector(expression).evaluate(FLAGS) is verdict


def test_the_parts_of_an_unsupported_conjunction_phalanx_evaluates_must_still_hold() -> None:
    # `a && b` is true only where `a` is: the evaluated conjuncts are a necessary condition.
    parsed = parse_selector(
        f"device.driver == '{GPU}' && {A}.productName.matches('H1.*') && {A}.index < 4"
    )
    assert isinstance(parsed, Unsupported)
    assert len(parsed.necessary) == 2
    assert all(s.matches(H100) for s in parsed.necessary)
    assert not all(s.matches(CHANNEL) for s in parsed.necessary)
    whole = parse_selector(f"{A}.productName.matches('H1.*') || device.driver == '{GPU}'")
    assert isinstance(whole, Unsupported)
    assert whole.necessary == ()  # a disjunction says nothing about each side


def test_a_selector_names_the_values_it_reads() -> None:
    parsed = selector(
        f"device.driver == '{GPU}' && {A}.productName == 'x' && "
        f"{C}.memory.isGreaterThan(quantity('1Gi')) && 'profile' in {A}"
    )
    assert parsed.reads == {
        ("driver", ""),
        ("attribute", f"{GPU}/productName"),
        ("attribute", f"{GPU}/profile"),
        ("capacity", f"{GPU}/memory"),
    }


VERSIONS_IN_ORDER = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
    "1.0.1",
    "1.2.0",
    "2.0.0",
]


def test_versions_order_by_semver_precedence() -> None:
    # semver.org §11, including its example list; build metadata does not count.
    parsed = [Version.parse(v) for v in VERSIONS_IN_ORDER]
    for earlier, later in itertools.pairwise(parsed):
        assert earlier.compare(later) < 0 < later.compare(earlier)
    assert Version.parse("1.0.0+build.5").compare(Version.parse("1.0.0")) == 0


@pytest.mark.parametrize("text", ["1.0", "01.0.0", "1.0.0-01", "v1.0.0", "1.0.0-"])
def test_a_version_that_is_not_semver_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"semantic version|leading zero"):
        Version.parse(text)


# ---- properties ---------------------------------------------------------------------------

ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@given(value=ints, bound=ints, op=st.sampled_from(["<", "<=", ">", ">=", "==", "!="]))
def test_int_comparisons_agree_with_integer_arithmetic(value: int, bound: int, op: str) -> None:
    device = FakeDevice(attributes={f"{GPU}/n": value})
    expected = {
        "<": value < bound,
        "<=": value <= bound,
        ">": value > bound,
        ">=": value >= bound,
        "==": value == bound,
        "!=": value != bound,
    }[op]
    verdict = selector(f"{A}.n {op} {bound}").evaluate(device)
    assert verdict is (Verdict.TRUE if expected else Verdict.FALSE)


@given(
    have=st.integers(min_value=0, max_value=2**40),
    want=st.integers(min_value=0, max_value=2**20),
)
def test_quantity_comparison_agrees_with_the_exact_value(have: int, want: int) -> None:
    device = FakeDevice(capacities={f"{GPU}/memory": Fraction(have)})
    order = selector(f"{C}.memory.compareTo(quantity('{want}Ki')) > 0").evaluate(device)
    assert order is (Verdict.TRUE if have > want * 1024 else Verdict.FALSE)


verdict_expressions = st.sampled_from(
    [f"{A}.index == 3", f"{A}.index == 4", f"{A}.missing == 1", "true", "false"]
)


@given(left=verdict_expressions, right=verdict_expressions)
def test_and_and_or_commute_even_around_errors(left: str, right: str) -> None:
    for op in ("&&", "||"):
        forward = selector(f"{left} {op} {right}").evaluate(H100)
        backward = selector(f"{right} {op} {left}").evaluate(H100)
        assert forward is backward


@given(expression=verdict_expressions)
def test_negation_flips_a_decided_verdict_and_keeps_an_error(expression: str) -> None:
    verdict = selector(expression).evaluate(H100)
    negated = selector(f"!({expression})").evaluate(H100)
    flipped = {Verdict.TRUE: Verdict.FALSE, Verdict.FALSE: Verdict.TRUE}
    assert negated is flipped.get(verdict, Verdict.ERROR)
