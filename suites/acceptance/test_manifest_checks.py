"""Manifest checks: the team's JobSet (``--manifest``) against the deployment pitfalls."""

from __future__ import annotations

import pytest

from pathways_chaos.harness.acceptance.manifest_checks import (
    MANIFEST_CHECKS,
    check_manifest_ramdisk,
)


@pytest.mark.parametrize("check", list(MANIFEST_CHECKS))
def test_manifest_check(check, acceptance_manifest, check_row):
    check_row(MANIFEST_CHECKS[check](acceptance_manifest))


def test_ramdisk_size(acceptance_manifest, acceptance_params, ramdisk_buffer, check_row):
    params, params_from = acceptance_params
    check_row(check_manifest_ramdisk(acceptance_manifest, params, ramdisk_buffer, params_from))
