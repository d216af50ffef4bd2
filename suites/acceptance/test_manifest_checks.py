"""Manifest checks: the team's JobSet (``--acceptance-manifest``) against the deployment
pitfalls, and its Multi-Tier Checkpointing ramdisk size."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from pathways_chaos.harness.acceptance.manifest_checks import (
    MANIFEST_CHECKS,
    check_manifest_ramdisk,
)

if TYPE_CHECKING:
    from pathways_chaos.harness.acceptance.manifest_checks import Manifest
    from pathways_chaos.harness.acceptance.table import CheckResult
    from pathways_chaos.suites.acceptance.conftest import Given


@pytest.mark.parametrize("check", list(MANIFEST_CHECKS))
def test_manifest_check(
    check: str, acceptance_manifest: Given[Manifest], check_row: Callable[..., None]
) -> None:
    check_row(check, MANIFEST_CHECKS[check], acceptance_manifest)


@pytest.mark.parametrize("check", ["ramdisk-size"])
def test_ramdisk_size(
    check: str,
    acceptance_manifest: Given[Manifest],
    acceptance_params: tuple[float | None, str],
    ramdisk_buffer: float,
    check_row: Callable[..., None],
) -> None:
    params, params_from = acceptance_params

    def run(manifest: Manifest) -> CheckResult:
        return check_manifest_ramdisk(manifest, params, ramdisk_buffer, params_from)

    check_row(check, run, acceptance_manifest)
