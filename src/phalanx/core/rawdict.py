"""Typed reads of untrusted plain dicts (Kubernetes objects as the API or a file gives them).

Each accessor checks the JSON type at a path and raises InvalidObjectError naming that
path; `None` (a field the API omitted or set to null) reads as the empty value. TypedDicts
would only promise what must be checked here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Final, cast

from phalanx.core.errors import InvalidObjectError, QuantityError, quoted
from phalanx.core.model import CPU, PODS, Resources
from phalanx.core.names import (
    DNS_LABEL_FORM,
    MAX_NAME_LENGTH,
    OBJECT_NAME_FORM,
    is_dns_label,
    is_object_name,
)
from phalanx.core.quantity import int_value, milli_value, parse_quantity

DEFAULT_NAMESPACE: Final = "default"
# The bounds of the APIs' int32 fields (sizes, minima, priorities): a CRD's `format: int32`
# is not enforced by the API server, so a reader checks them itself.
INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1

JsonObject = Mapping[str, object]
EMPTY_OBJECT: JsonObject = {}


@dataclass(frozen=True, slots=True)
class Source:
    """The object being read, for error messages."""

    kind: str
    name: str

    def invalid(self, path: str, reason: str) -> InvalidObjectError:
        return InvalidObjectError(self.kind, self.name, path, reason)


# The longest key a path names whole: a label or annotation key's 253-character prefix,
# "/" and 63-character name. A longer one is invalid anyway; whole, it would make an error
# message as long as itself.
KEY_LIMIT: Final = 317


def key_path(path: str, key: str) -> str:
    # The same text json.dumps gives, without calling it for the usual key (no quote,
    # backslash or control character to escape): paths are made for every key read.
    if len(key) > KEY_LIMIT:
        key = key[:KEY_LIMIT] + "…"
    elif key.isprintable() and '"' not in key and "\\" not in key:
        return f'{path}["{key}"]'
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def json_type(value: object) -> str:
    """The JSON type of `value`, as error texts name it ("not an array")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string" if value else "an empty string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "an array"
    return type(value).__name__


def read_object(src: Source, value: object, path: str) -> JsonObject:
    if type(value) is dict:  # what the JSON decoder makes: skip the Mapping ABC's slow check
        return cast("JsonObject", value)
    if value is None:
        return EMPTY_OBJECT
    if not isinstance(value, Mapping):
        raise src.invalid(path, f"must be an object, not {json_type(value)}")
    return cast("JsonObject", value)


def read_objects(src: Source, value: object, path: str) -> Iterable[tuple[str, JsonObject]]:
    """The entries of a list of objects, each with its own path."""
    if value is None:
        return
    if not isinstance(value, list | tuple):
        raise src.invalid(path, f"must be a list, not {json_type(value)}")
    for index, item in enumerate(value):
        item_path = f"{path}[{index}]"
        yield item_path, read_object(src, item, item_path)


def read_string(src: Source, value: object, path: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise src.invalid(path, f"must be a string, not {json_type(value)}")
    return value


def read_strings(src: Source, value: object, path: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise src.invalid(path, f"must be a list, not {json_type(value)}")
    return tuple(read_string(src, item, f"{path}[{i}]") for i, item in enumerate(value))


def read_integer(src: Source, value: object, path: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise src.invalid(path, f"must be an integer, not {json_type(value)}")
    return value


def read_boolean(src: Source, value: object, path: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise src.invalid(path, f"must be a boolean, not {json_type(value)}")
    return value


def read_string_map(src: Source, value: object, path: str) -> dict[str, str]:
    entries = read_object(src, value, path)
    result: dict[str, str] = {}
    for key, item in entries.items():
        if not isinstance(key, str):
            raise src.invalid(path, f"key {quoted(key)} must be a string")
        result[key] = read_string(src, item, key_path(path, key))
    return result


def read_metadata(kind: str, obj: JsonObject, *, namespaced: bool) -> tuple[Source, JsonObject]:
    """The object's identity (for messages) and its `metadata`. A name or namespace no
    object could have is refused: with a "/" in a namespace, `ns/name` would name another
    object (the API server refuses them; a file or a request may still carry one). Every
    kind read here is named by a DNS subdomain."""
    unnamed = Source(kind, "")
    metadata = read_object(unnamed, obj.get("metadata"), "metadata")
    name = read_string(unnamed, metadata.get("name"), "metadata.name")
    if not name:
        raise unnamed.invalid("metadata.name", "is required")
    valid = is_object_name(name)
    shown = name if valid else _cut_name(name)
    if namespaced:
        namespace = read_string(unnamed, metadata.get("namespace"), "metadata.namespace")
        if namespace and not is_dns_label(namespace):
            raise Source(kind, f"{_cut_name(namespace)}/{shown}").invalid(
                "metadata.namespace",
                f"{quoted(namespace)} is not a valid namespace {DNS_LABEL_FORM}",
            )
        src = Source(kind, f"{namespace or DEFAULT_NAMESPACE}/{shown}")
    else:
        src = Source(kind, shown)
    if not valid:
        raise src.invalid(
            "metadata.name", f"{quoted(name)} is not a valid {kind} name {OBJECT_NAME_FORM}"
        )
    return src, metadata


def _cut_name(text: str) -> str:
    """An invalid name may be of any length: messages name it cut, as `quoted` does."""
    return text if len(text) <= MAX_NAME_LENGTH else text[:MAX_NAME_LENGTH] + "…"


def namespace_and_name(src: Source) -> tuple[str, str]:
    namespace, _, name = src.name.partition("/")
    return namespace, name


# --- Resources --------------------------------------------------------------------------


def is_extended_resource(name: str) -> bool:
    """Kubernetes `IsExtendedResourceName`: a vendor-qualified name outside kubernetes.io."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def read_quantities(src: Source, value: object, path: str) -> dict[str, Fraction]:
    """A `ResourceList` with exact values; negative or fractional-where-integer is an error."""
    result: dict[str, Fraction] = {}
    for name, raw in read_object(src, value, path).items():
        where = key_path(path, name)
        if not isinstance(raw, str | int | float):
            raise src.invalid(where, str(QuantityError(raw)))
        try:
            amount = parse_quantity(raw)
        except QuantityError as error:
            raise src.invalid(where, str(error)) from error
        if amount < 0:
            raise src.invalid(where, f"{quoted(raw)} is negative")
        if (is_extended_resource(name) or name == PODS) and amount.denominator != 1:
            raise src.invalid(
                where, f"{quoted(raw)} is not a whole number ({name} is counted in units)"
            )
        result[name] = amount
    return result


def as_stored(amounts: Mapping[str, Fraction]) -> dict[str, Fraction]:
    """Values as the API server stores them: rounded up to a milli-unit.

    (`SetDefaults_ResourceList`: two containers asking "0.5m" CPU hold 1m each.)
    """
    return {name: Fraction(milli_value(amount), 1000) for name, amount in amounts.items()}


def to_resources(amounts: Mapping[str, Fraction]) -> Resources:
    """Model units: CPU in millicores, everything else in whole units (bytes for memory)."""
    return Resources(
        {
            name: milli_value(amount) if name == CPU else int_value(amount)
            for name, amount in amounts.items()
        }
    )


def add_into(total: dict[str, Fraction], amounts: Mapping[str, Fraction]) -> None:
    for name, amount in amounts.items():
        total[name] = total.get(name, Fraction(0)) + amount


def max_into(total: dict[str, Fraction], amounts: Mapping[str, Fraction]) -> None:
    for name, amount in amounts.items():
        if name not in total or amount > total[name]:
            total[name] = amount
