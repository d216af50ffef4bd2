"""Static checks: the team's Python (``--acceptance-source``) against the multi-controller
pitfalls."""

from __future__ import annotations

import pytest

from pathways_chaos.harness.acceptance.static_checks import STATIC_CHECKS


@pytest.mark.parametrize("check", list(STATIC_CHECKS))
def test_static_check(check, acceptance_sources, check_row):
    check_row(check, STATIC_CHECKS[check], acceptance_sources)


def test_minimum_slice_count(acceptance_sources, acceptance_manifest, check_row):
    """The source's elastic_retry(minimum_slice_count=N) against the manifest's slice count."""
    from pathways_chaos.harness.acceptance.static_checks import check_minimum_slice_count

    check_row(
        "minimum-slice-count", check_minimum_slice_count, acceptance_sources, acceptance_manifest
    )
