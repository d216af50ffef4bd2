"""Manifest checks: the team's JobSet (``--acceptance-manifest``) against the deployment
pitfalls, and its Multi-Tier Checkpointing ramdisk size."""

from __future__ import annotations

import pytest

from pathways_chaos.harness.acceptance.manifest_checks import (
    MANIFEST_CHECKS,
    check_manifest_ramdisk,
)


@pytest.mark.parametrize("check", list(MANIFEST_CHECKS))
def test_manifest_check(check, acceptance_manifest, check_row):
    check_row(check, MANIFEST_CHECKS[check], acceptance_manifest)


@pytest.mark.parametrize("check", ["ramdisk-size"])
def test_ramdisk_size(check, acceptance_manifest, acceptance_params, ramdisk_buffer, check_row):
    params, params_from = acceptance_params

    def run(manifest):
        return check_manifest_ramdisk(manifest, params, ramdisk_buffer, params_from)

    check_row(check, run, acceptance_manifest)
