"""JSON responses encoded with orjson, and the error body every non-200 answer carries."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response


def _fallback(value: Any) -> Any:
    """Encodes what orjson does not know natively (sets, enums' values, ...) in /debug views."""
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    return str(value)


class OrjsonResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, default=_fallback)


def error_response(
    status: int, message: str, headers: Mapping[str, str] | None = None
) -> OrjsonResponse:
    """`{"error": "..."}`: a request kube-scheduler would never send, or an ops-route failure."""
    return OrjsonResponse({"error": message}, status_code=status, headers=headers)
