"""The loop catalogue, judged: every correct loop passes every chaos scenario the toolkit runs on
a user's loop, and every broken loop fails under its scenario with a verdict naming its cause.

The loops were written by a tester who had not read the judge (this folder's RESULTS.md says
how); each broken loop declares its bug (``CAUSE``) and the schedule that shows
it (``SCENARIO``). The scenarios are the chaos suite's own test functions
(suites/chaos/test_user_loop.py), called here with each loop in place of ``--chaos-loop``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]


def _module(name: str, path: Path) -> Any:
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


CATALOGUE = _module("loop_catalogue_index", HERE / "catalogue.py")
SUITE = _module("loop_catalogue_suite", ROOT / "suites" / "chaos" / "test_user_loop.py")

#: The chaos suite's loop scenarios: (id, test function, its own parameters).
SCENARIOS = [
    *[
        (f"slice-down-{kind}", SUITE.test_every_slice_down_code, {"kind": kind})
        for kind in ("data_loss", "deadline_exceeded", "not_found", "internal")
    ],
    ("repaired-slice-rejoins", SUITE.test_repaired_slice_rejoins, {}),
    ("lost-during-a-save", SUITE.test_slice_lost_during_a_save, {}),
    ("error-while-a-save-is-in-flight", SUITE.test_error_while_a_save_is_in_flight, {}),
    ("lost-during-a-restore", SUITE.test_slice_lost_during_a_restore, {}),
    ("flapping", SUITE.test_flapping_slice, {}),
    ("all-replicas-but-one", SUITE.test_all_replicas_but_one, {}),
    ("preemption", SUITE.test_preemption_suspends_and_resumes, {}),
]
CORRECT = [loop for loop in CATALOGUE.LOOPS if loop.kind == "correct"]


def _matrix() -> list[tuple[Any, tuple[str, Any, dict[str, Any]]]]:
    """Every correct loop under every scenario (121 episodes: each run a child forked from the
    warm fork server, about 3 s apiece on one core)."""
    return [(loop, s) for loop in CORRECT for s in SCENARIOS]


MATRIX = _matrix()
BROKEN = [loop for loop in CATALOGUE.LOOPS if loop.kind != "correct"]
TWO_FAULTS = [loop for loop in CATALOGUE.LOOPS if loop.kind == "two_faults"]


def _load(loop: Any) -> str:
    """The loop's spec: its child imports it, this process never does."""
    return f"{loop.path}:main"


@pytest.mark.parametrize(
    ("loop", "scenario"), MATRIX, ids=[f"{loop.name}-{s[0]}" for loop, s in MATRIX]
)
def test_a_correct_loop_passes_every_chaos_scenario(chaos, loop, scenario):
    _, run_scenario, params = scenario
    run_scenario(chaos, _load(loop), **params)


@pytest.mark.parametrize("loop", BROKEN, ids=[loop.name for loop in BROKEN])
def test_a_broken_loop_fails_naming_its_cause(chaos, loop):
    out = chaos.run_loop(_load(loop), loop.scenario)

    assert not out.verdict.ok, f"{loop.name} ({loop.bug}) passed: {out.verdict.summary()}"
    # The first line is what a user reads: it must name the bug, not a symptom further down.
    assert out.verdict.causes[0] == loop.headline, (
        f"{loop.name}: the bug is {loop.cause} ({loop.bug}), the first line must name "
        f"{loop.headline}; the verdict's first line named "
        f"{out.verdict.causes[0]}:\n{out.verdict.summary()}"
    )
    assert all("\n" not in v and len(v) < 1200 for v in out.verdict.violations)


@pytest.mark.parametrize(
    ("loop", "schedule"),
    [(loop, s) for loop in TWO_FAULTS for s in loop.single_faults_pass],
    ids=[f"{loop.name}-{i}" for loop in TWO_FAULTS for i, _ in enumerate(loop.single_faults_pass)],
)
def test_a_two_fault_bug_survives_each_single_fault(chaos, loop, schedule):
    """What makes these loops the search's to find: no single fault shows their bug."""
    out = chaos.run_loop(_load(loop), schedule)

    out.verdict.raise_if_failed()


@pytest.mark.parametrize("loop", CORRECT, ids=lambda loop: loop.name)
def test_a_correct_loop_passes_every_acceptance_runtime_row(tmp_path, loop):
    from pathways_chaos.harness.acceptance.loop_runtime import LOOP_RUNTIME_CHECKS, LoopRuns
    from pathways_chaos.harness.acceptance.table import PASS

    runs = LoopRuns(_load(loop), workdir=tmp_path)
    try:
        rows = {name: check(runs) for name, check in LOOP_RUNTIME_CHECKS.items()}
    finally:
        runs.close()

    wrong = {name: f"{r.status}: {r.reason}" for name, r in rows.items() if r.status != PASS}
    assert not wrong, wrong
