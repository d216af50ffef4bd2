"""Static checks: the team's Python (``--acceptance-source``) against the multi-controller
pitfalls."""

from __future__ import annotations

import pytest

from pathways_chaos.harness.acceptance.static_checks import STATIC_CHECKS


@pytest.mark.parametrize("check", list(STATIC_CHECKS))
def test_static_check(check, acceptance_sources, check_row):
    check_row(check, STATIC_CHECKS[check], acceptance_sources)
