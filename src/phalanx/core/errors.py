"""The core's own error types: what adapters catch, so no library's exceptions leak out.

Expected outcomes (a pod that does not fit, a gang still waiting for members) are values,
not exceptions; these are for input that cannot be turned into the model at all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

# Long values are cut in messages: they end up in Events, logs and HTTP answers.
_QUOTE_LIMIT = 80


def quoted(value: object) -> str:
    """`value` as it should appear in an error message: a string in JSON quotes, cut short."""
    if isinstance(value, str):
        text = value if len(value) <= _QUOTE_LIMIT else value[:_QUOTE_LIMIT] + "…"
        return json.dumps(text, ensure_ascii=False)
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)  # as the request spelled it: null, true, 1e+30
    # Named by type: quoting an array or object whole could make a message of any size,
    # and a deeply nested one recurses past the interpreter's limit.
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "an array"
    text = repr(value)
    return text if len(text) <= _QUOTE_LIMIT else text[:_QUOTE_LIMIT] + "…"


class QuantityError(ValueError):
    """A string that is not a Kubernetes `resource.Quantity`."""

    def __init__(self, value: object) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return f"{quoted(self.value)} is not a Kubernetes quantity"


class InvalidObjectError(ValueError):
    """A Kubernetes object (as a plain dict) that the API server would not have accepted.

    `name` is `namespace/name` for namespaced kinds; `field` is a JSON path such as
    `status.allocatable["cpu"]` ("" when the problem is the object as a whole).
    """

    def __init__(self, kind: str, name: str, field: str, reason: str) -> None:
        # The same positional arguments as __init__, so the error pickles and copies.
        super().__init__(kind, name, field, reason)
        self.kind = kind
        self.name = name
        self.field = field
        self.reason = reason

    def __str__(self) -> str:
        where = f"{self.kind} {self.name}" if self.name else self.kind
        if self.field:
            return f"{where}: {self.field}: {self.reason}"
        return f"{where}: {self.reason}"


class TopologyConfigError(ValueError):
    """The topology configuration text (flag, environment variable, Helm value) is malformed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def __str__(self) -> str:
        return f"topology configuration: {self.reason}"
