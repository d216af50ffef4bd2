"""Runtime checks: the team's adapter (``--acceptance-adapter``) on a small run on the fake
cluster."""

from __future__ import annotations

import pytest

from pathways_chaos.harness.acceptance.runtime_checks import RUNTIME_CHECKS


@pytest.mark.parametrize("check", list(RUNTIME_CHECKS))
def test_runtime_check(check, runtime_runs, check_row):
    check_row(check, RUNTIME_CHECKS[check], runtime_runs)
