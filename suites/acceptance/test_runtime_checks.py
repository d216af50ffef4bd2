"""Runtime checks: the team's adapter (``--acceptance-adapter``) on a small run on the fake
cluster."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from pathways_chaos.harness.acceptance.runtime_checks import RUNTIME_CHECKS

if TYPE_CHECKING:
    from pathways_chaos.suites.acceptance.conftest import Given


@pytest.mark.parametrize("check", list(RUNTIME_CHECKS))
def test_runtime_check(
    check: str, runtime_runs: Given[Any], check_row: Callable[..., None]
) -> None:
    check_row(check, RUNTIME_CHECKS[check], runtime_runs)
