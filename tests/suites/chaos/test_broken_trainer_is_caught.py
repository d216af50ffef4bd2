"""Done-when of the foundation: a broken trainer makes a chaos test fail, naming the ids."""

from __future__ import annotations

pytest_plugins = ["pytester"]

MUTANT = "pathways_chaos.harness.reference.mutants:IteratorRestoredFromCurrentPosition"


def test_iterator_restored_from_current_position_fails_the_chaos_suite(pytester):
    from pathlib import Path

    suite = Path(__file__).parents[3] / "suites" / "chaos" / "test_elastic_recovery.py"
    pytester.makepyfile(test_suite=suite.read_text())
    result = pytester.runpytest_subprocess(
        "-m", "chaos", "-k", "replica_resize", f"--chaos-trainer={MUTANT}", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*exactly-once violated from step 11: duplicated sample ids [[]0, 1, 2*"]
    )


def test_a_bad_trainer_option_is_one_line(pytester):
    pytester.makepyfile("import pytest\n@pytest.mark.chaos\ndef test_x(chaos):\n    pass\n")
    result = pytester.runpytest_subprocess("--chaos-trainer=nowhere", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*--chaos-trainer='nowhere' cannot be loaded*MODULE:NAME*"])
