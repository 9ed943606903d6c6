"""Every tier runs in CI (PHALANX_REQUIRE_E2E=1): there a test whose tool is missing fails
and says why; elsewhere it is skipped. One home for that rule, whatever the tier."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def required() -> bool:
    """CI (PHALANX_REQUIRE_E2E=1): a missing tool is a failure, not a skip."""
    return os.environ.get("PHALANX_REQUIRE_E2E", "") not in ("", "0")


def unavailable(why: str) -> NoReturn:
    """Skip for `why`; under CI, fail saying it."""
    if required():
        pytest.fail(f"PHALANX_REQUIRE_E2E is set, but {why}", pytrace=False)
    pytest.skip(why)
