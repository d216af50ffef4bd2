"""The chaos fixture's side of issue 20: the deadline options reach every episode, a config the
cluster cannot honour is one line before a step, and a judge's crash is an ERROR (issue 30):
never a pass, never a skip and never the trainer's failure."""

from __future__ import annotations

pytest_plugins = ["pytester"]

SUITE = """
import pytest

from pathways_chaos.harness.judging import oracle


@pytest.mark.chaos
def test_waits_forever(chaos):
    outcome = chaos.run(
        "data_loss@step=3:slice=1", mode="pause_resume", timeout=None, final_step=8,
        expect_completed=True,
    )
    assert not outcome.ok
    assert "deadline of 120 s on the fake clock" in outcome.verdict.violations[0]
    assert "the loop waits for 4 slices; this cluster has 4, 3 alive" in (
        outcome.verdict.violations[0]
    )


@pytest.mark.chaos
def test_five_slices(chaos):
    chaos.run(minimum_slice_count=5)


@pytest.mark.chaos
def test_judge_crash(chaos, monkeypatch):
    def broken(events):
        raise KeyError("toolkit bug")

    monkeypatch.setattr(oracle, "check_meshes", broken)
    chaos.run(final_step=4)
"""


def test_deadline_precondition_and_judge_crash_through_the_fixture(pytester):
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess(
        "--chaos-deadline=120", "-rs", "-p", "no:cacheprovider", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=1, failed=1, errors=1)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*ERROR at call of test_judge_crash*",
            "the judge failed: a bug in pathways-chaos, not in the code under test: "
            "mesh-rebuild raised KeyError: 'toolkit bug'",
            "Traceback (most recent call last):",
            "*minimum_slice_count=5 does not fit 4 slices: use 1..4*",
        ]
    )


def test_a_bad_deadline_option_is_one_line(pytester):
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("--chaos-wall-deadline=soon", "-p", "no:cacheprovider")
    assert result.ret == 4
    result.stderr.fnmatch_lines(
        ["*pathways-chaos: --chaos-wall-deadline='soon': use a number of seconds > 0, or 'off'*"]
    )
