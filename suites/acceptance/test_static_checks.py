"""Static checks: the team's Python (``--acceptance-source``) against the multi-controller
pitfalls."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from pathways_chaos.harness.acceptance.static_checks import STATIC_CHECKS

if TYPE_CHECKING:
    from pathways_chaos.harness.acceptance.manifest_checks import Manifest
    from pathways_chaos.harness.acceptance.static_checks import SourceFile
    from pathways_chaos.suites.acceptance.conftest import Given


@pytest.mark.parametrize("check", list(STATIC_CHECKS))
def test_static_check(
    check: str, acceptance_sources: Given[list[SourceFile]], check_row: Callable[..., None]
) -> None:
    check_row(check, STATIC_CHECKS[check], acceptance_sources)


@pytest.mark.parametrize("check", ["minimum-slice-count"])  # selectable by its row's name
def test_minimum_slice_count(
    check: str,
    acceptance_sources: Given[list[SourceFile]],
    acceptance_manifest: Given[Manifest],
    check_row: Callable[..., None],
) -> None:
    """The source's elastic_retry(minimum_slice_count=N) against the manifest's slice count."""
    from pathways_chaos.harness.acceptance.static_checks import check_minimum_slice_count

    check_row(check, check_minimum_slice_count, acceptance_sources, acceptance_manifest)
