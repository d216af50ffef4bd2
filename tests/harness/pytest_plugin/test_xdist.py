"""``pytest -n auto``: every worker is its own JAX process with its own fake devices, and the
``--chaos-report`` holds every worker's episodes, written once by the controller."""

from __future__ import annotations

import re

pytest_plugins = ["pytester"]

SUITE = """
import os

import pytest


@pytest.mark.chaos
@pytest.mark.parametrize("lost", [1, 2, 3])
def test_loss(chaos, lost):
    out = chaos.run(f"data_loss@step=3:slice={lost}", final_step=6, scale_up="off")
    out.verdict.raise_if_failed()


@pytest.mark.parametrize("n", [0, 1])
def test_own_devices(n):
    import jax

    assert len(jax.devices()) == 8  # the plugin's 4 x 2 fake devices, in this worker
    print("devices in", os.environ["PYTEST_XDIST_WORKER"])
"""


def test_two_workers_share_one_report(pytester):
    pytester.makepyfile(test_suite=SUITE)
    report = pytester.path / "report.html"
    result = pytester.runpytest_subprocess(
        "-n", "2", "-v", "-p", "no:cacheprovider", f"--chaos-report={report}"
    )
    result.assert_outcomes(passed=5)
    out = result.stdout.str()
    assert {"gw0", "gw1"} <= set(re.findall(r"\[(gw\d)\]", out)), out
    result.stdout.fnmatch_lines([f"*pathways-chaos report: {report} (3 episodes)*"])
    html = report.read_text()
    for lost in (1, 2, 3):
        assert f"test_loss[{lost}]" in html
