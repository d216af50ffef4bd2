"""Issue 30, items 1 and 4: every verdict lists its judges (terminal line under -rA, the session
count, the HTML report, JUnit properties), and a judge that raises is a pytest ERROR saying
"the judge failed: a bug in pathways-chaos" with its traceback, on both tracks: never a pass,
never a skip, never a failure of the code under test.

One real pytest session (a subprocess) over a tiny suite using the ``chaos`` fixture, read by
every test below."""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from pathways_chaos.harness.pytest_plugin import judges_summary

SUITE = """
import dataclasses

import pytest

from pathways_chaos.harness.judging import loop_oracle, oracle

LOOP = "pathways_chaos.harness.reference.user_loop:main"
SCHEDULE = "data_loss@batch=10:slice=1:repair_after_polls=3"


def test_trainer_judged(chaos):
    chaos.run(final_step=4)


def test_loop_judged(chaos):
    chaos.run_loop(LOOP, SCHEDULE)


def test_loop_broken(chaos):
    from pathways_chaos.harness.reference import user_loop_bugs

    out = chaos.run_loop(user_loop_bugs.step_not_restored, SCHEDULE)
    out.verdict.raise_if_failed()


def test_loop_exactly_once_not_judged(chaos, monkeypatch):
    judge = loop_oracle.judge_loop

    def blind(*args, **kwargs):
        verdict = judge(*args, **kwargs)
        verdict.judged.remove("exactly-once")
        verdict.not_judged["exactly-once"] = "the batches carry no sample ids (made up here)"
        return verdict

    monkeypatch.setattr(loop_oracle, "judge_loop", blind)
    chaos.run_loop(LOOP, SCHEDULE)


def test_loop_judge_raises(chaos, monkeypatch):
    def broken(events):
        raise KeyError("meshes judge bug")

    monkeypatch.setattr(loop_oracle.loop_meshes, "judge", broken)
    chaos.run_loop(LOOP, SCHEDULE)


def test_trainer_replay_raises(chaos, monkeypatch):
    def broken(*args):
        raise RuntimeError("the replay cannot run")

    monkeypatch.setattr(oracle, "check_replay", broken)
    chaos.run(final_step=4)
"""


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """The suite run once, in a subprocess: ``-rA``, JUnit and the HTML report."""
    import os
    import subprocess
    import sys

    where = tmp_path_factory.mktemp("judges")
    (where / "test_suite.py").write_text(SUITE)
    args = [
        sys.executable,
        "-m",
        "pytest",
        "test_suite.py",
        "-rA",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "-n",
        "0",
        "--junitxml=junit.xml",
        "--chaos-report=report.html",
    ]
    env = {**os.environ, "COLUMNS": "400"}  # the short summary's lines uncut
    done = subprocess.run(args, cwd=where, capture_output=True, text=True, timeout=600, env=env)
    return done, where


def _out(session: tuple[Any, Path]) -> str:
    return str(session[0].stdout)


def _line(session: tuple[Any, Path], status: str, test: str) -> str:
    """The plugin's one line for ``test`` (after the section header)."""
    text = _out(session).split("pathways-chaos: what each verdict judged", 1)[-1]
    found = [
        line for line in text.splitlines() if line.startswith(f"{status} test_suite.py::{test}:")
    ]
    assert len(found) == 1, text
    return found[0]


def test_the_session_ends_red_with_each_outcome_in_its_place(session: tuple[Any, Path]) -> None:
    done, _ = session
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    # A library's deprecation under the installed jax may add "1 warning, " (this session runs
    # outside the repository's pyproject, whose filterwarnings hide it).
    assert re.search(r"1 failed, 2 passed, 1 skipped, (\d+ warnings?, )?2 errors", last), last


def test_a_passing_loop_names_every_judge_it_ran(session: tuple[Any, Path]) -> None:
    line = _line(session, "PASSED", "test_loop_judged")
    names = re.match(r"PASSED \S+: judges passed ([^;]*)", line)
    assert names is not None, line
    ran = names.group(1).split(", ")
    assert {"exactly-once", "final-state", "restore-used", "snapshot-pairs"} <= set(ran), line
    assert "failed" not in line.partition(";")[0]


def test_the_trainer_track_lists_its_judges_too(session: tuple[Any, Path]) -> None:
    line = _line(session, "PASSED", "test_trainer_judged")
    assert line.startswith("PASSED test_suite.py::test_trainer_judged: judges passed exactly-once")
    assert "replay" in line and "mesh-rebuild" in line


def test_a_failing_loop_names_the_judges_that_failed(session: tuple[Any, Path]) -> None:
    line = _line(session, "FAILED", "test_loop_broken")
    failed = re.search(r"; failed ([a-z-]+(?:, [a-z-]+)*)", line)
    assert failed is not None, line
    assert "resume-step" in failed.group(1).split(", "), line
    assert "resume-step" not in line.partition("; failed")[0]  # not also among the passed


def test_an_unjudged_central_judge_is_a_skip_with_its_reason(session: tuple[Any, Path]) -> None:
    line = _line(session, "SKIPPED", "test_loop_exactly_once_not_judged")
    assert "exactly-once (the batches carry no sample ids (made up here))" in line
    assert "exactly-once," not in line.partition("; not judged")[0]
    assert "NOT JUDGED: exactly-once not judged, because the batches carry no sample ids" in (
        _out(session)
    )


def test_the_count_says_what_passed_unjudged_and_what_erred(session: tuple[Any, Path]) -> None:
    text = _out(session).split("pathways-chaos: what each verdict judged", 1)[-1]
    count = next(line for line in text.splitlines() if line.startswith("2 passed"))
    # The sample loop takes no slice back under this schedule: scale-up cannot judge it.
    assert count == (
        "2 passed, of which 1 with scale-up not judged; 1 failed by a judge; "
        "1 not judged (skipped); "
        "2 with a judge that failed (a bug in pathways-chaos)"
    ), count


@pytest.mark.parametrize(
    ("test", "raised", "frame"),
    [
        ("test_loop_judge_raises", "KeyError: 'meshes judge bug'", 'raise KeyError("meshes'),
        (
            "test_trainer_replay_raises",
            "RuntimeError: the replay cannot run",
            'raise RuntimeError("the replay',
        ),
    ],
)
def test_a_judge_that_raises_is_an_error_with_its_traceback(
    session: tuple[Any, Path], test: str, raised: str, frame: str
) -> None:
    out = _out(session)
    assert f"ERROR test_suite.py::{test} - Failed: the judge failed: a bug in" in out
    after = out.split(f"ERROR at call of {test}", 1)[1].split("\n", 1)[1]
    section = re.split(r"^(?:_{5}|={5})", after, maxsplit=1, flags=re.M)[0]
    assert "the judge failed: a bug in pathways-chaos, not in the code under test:" in section
    assert raised in section and "Traceback (most recent call last)" in section
    assert frame in section, section  # the judge's own frame, not the fixture's
    assert f"PASSED test_suite.py::{test}" not in out
    assert f"SKIPPED test_suite.py::{test}" not in out
    assert f"FAILED test_suite.py::{test}" not in out


def test_junit_carries_the_judges_and_the_judge_error(session: tuple[Any, Path]) -> None:
    _, where = session
    cases = {
        case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
        for case in ET.parse(where / "junit.xml").iter("testcase")
    }
    passed = cases["test_loop_judged"]
    assert "exactly-once" in str(passed["chaos_judged"]).split(", ")
    assert passed["chaos_judges_failed"] == ""
    skipped = cases["test_loop_exactly_once_not_judged"]
    assert "exactly-once" in str(skipped["chaos_not_judged_names"]).split(", ")
    assert str(skipped["chaos_not_judged"]).endswith(
        "; exactly-once: the batches carry no sample ids (made up here)"
    )
    assert "resume-step" in str(cases["test_loop_broken"]["chaos_judges_failed"])
    assert cases["test_trainer_replay_raises"]["chaos_judge_error"] == (
        "replay raised RuntimeError: the replay cannot run"
    )
    assert "chaos_judge_error" not in passed


def test_the_html_report_shows_judges_reasons_and_the_traceback(
    session: tuple[Any, Path],
) -> None:
    _, where = session
    page = html.unescape((where / "report.html").read_text())
    sections = {
        m.group(2): m.group(0)
        for m in re.finditer(
            r'<section class="episode (\w+)" id="test_suite.py::(\w+)">.*?</section>', page, re.S
        )
    }
    assert "judges passed: exactly-once" in sections["test_trainer_judged"]
    skipped = sections["test_loop_exactly_once_not_judged"]
    assert skipped.startswith('<section class="episode skipped"')
    assert "<b>exactly-once</b>: the batches carry no sample ids (made up here)" in skipped
    broken = sections["test_loop_broken"]
    assert re.search(r"judges failed: [^<]*resume-step", broken), broken[:2000]
    erred = sections["test_trainer_replay_raises"]
    assert erred.startswith('<section class="episode error"')
    assert "the judge failed: a bug in pathways-chaos: replay raised RuntimeError" in erred
    assert 'raise RuntimeError("the replay cannot run")' in erred  # the traceback


def test_the_line_and_count_from_properties_alone() -> None:
    """The plugin's wording, on properties as xdist carries them: reasons split at the names."""
    props = {
        "chaos_judged": "completed, exactly-once, step-count",
        "chaos_judges_failed": "step-count",
        "chaos_not_judged_names": "scale-up, final-state",
        "chaos_not_judged": "scale-up: no slice rejoined; then none; final-state: the run: died",
    }
    line = judges_summary.verdict_line("failed", "t.py::x", props)
    assert line == (
        "FAILED t.py::x: judges passed completed, exactly-once; failed step-count; not judged "
        "scale-up (no slice rejoined; then none), final-state (the run: died)"
    )
    rows = [("passed", props), ("passed", {**props, "chaos_not_judged_names": "scale-up"})]
    assert judges_summary.summary_count(rows) == (
        "2 passed, of which 2 with scale-up not judged, 1 with final-state not judged"
    )


def test_a_test_failed_by_its_own_assertion_is_not_counted_as_failed_by_a_judge() -> None:
    """A blind tester's suite run said "9 failed by a judge" where every judge had passed and
    the suite's own check (does the loop meet the fault?) had failed."""
    judged = {"chaos_judged": "completed, exactly-once", "chaos_judges_failed": ""}
    rows = [
        ("failed", judged),
        ("failed", {**judged, "chaos_judges_failed": "exactly-once"}),
        ("failed", {**judged, "chaos_violations": 1}),  # a trainer's crash: no judge named
        ("failed", judged),
    ]
    assert judges_summary.summary_count(rows) == (
        "0 passed; 2 failed by a judge; 2 failed by the test's own assertions"
    )
