"""How error messages quote the value they refuse: short, whatever the value."""

from __future__ import annotations

from phalanx.core.errors import QuantityError, quoted


def test_a_string_is_quoted_as_json_and_cut_short() -> None:
    assert quoted('say "hi"') == '"say \\"hi\\""'
    assert quoted("x" * 500) == '"' + "x" * 80 + '…"'


def test_a_number_null_or_boolean_is_spelled_as_json_spells_it() -> None:
    assert [quoted(v) for v in (None, True, 3, 1e30)] == ["null", "true", "3", "1e+30"]


def test_an_array_or_object_is_named_by_its_type_however_large_or_deep() -> None:
    deep: list[object] = []
    for _ in range(100_000):  # far past the interpreter's recursion limit
        deep = [deep]
    assert quoted(deep) == "an array"
    assert quoted(["1"] * 100_000) == "an array"
    assert quoted({"a": 1}) == "an object"
    assert str(QuantityError(deep)) == "an array is not a Kubernetes quantity"


def test_any_other_value_is_its_repr_cut_short() -> None:
    class Odd:
        def __repr__(self) -> str:
            return "odd" * 100

    assert quoted(Odd()) == ("odd" * 100)[:80] + "…"
