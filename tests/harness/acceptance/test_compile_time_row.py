"""The acceptance ``compile-time`` row's steady state (issue 30): a warm-up trace and the first
call of each jitted function are not "the step recompiles"; a step that recompiles every step
still fails the row, naming the function."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pathways_chaos.harness.acceptance.loop_runtime import (
    LoopRuns,
    check_compile_time,
    steady_recompiles,
)
from pathways_chaos.harness.acceptance.table import FAIL, PASS
from pathways_chaos.harness.episodes.loop_episode import load_loop

LOOPS = Path(__file__).parent / "loops" / "compile_loops.py"


def _row(name: str, tmp_path: Path):
    runs = LoopRuns(load_loop(f"{LOOPS}:{name}"), workdir=tmp_path)
    try:
        assert runs.fault_free.completed, runs.fault_free.error
        return check_compile_time(runs), runs.fault_free.events
    finally:
        runs.close()


@pytest.mark.parametrize("name", ["late_eval", "prefetch_warmup"])
def test_a_correct_loops_first_calls_and_warm_up_pass_the_row(name: str, tmp_path: Path) -> None:
    row, events = _row(name, tmp_path)
    assert row.status == PASS, row.failure_message()
    # Not vacuous: the run did compile after its second batch, which the old rule counted.
    assert any(e["kind"] == "compile" and e["batches_in_attempt"] >= 2 for e in events)


def test_a_step_with_a_static_step_number_fails_the_row_naming_it(tmp_path: Path) -> None:
    row, _ = _row("static_step", tmp_path)
    assert row.status == FAIL
    message = row.failure_message()
    steady = r"\b1\d XLA recompiles in steady state: jit\(_step_with_lr\) compiled"
    assert re.search(steady, message)
    assert "after batch 3, 4, 5, ...: the step recompiles" in message


def _compile(batches: int) -> dict[str, object]:
    return {"kind": "compile", "attempt": 1, "batches_in_attempt": batches}


def test_without_executions_in_the_log_a_compile_from_the_third_batch_on_counts() -> None:
    events = [{"kind": "attempt_start", "attempt": 1}, *(_compile(b) for b in (1, 2, 3, 4))]
    assert steady_recompiles(events) == {"the step": [_compile(3), _compile(4)]}


def test_a_new_mesh_compiles_the_step_again_without_counting() -> None:
    def run(name: str) -> dict[str, object]:
        return {"kind": "exec", "name": name, "attempt": 1}

    batch = {"kind": "batch", "attempt": 1}
    events = [
        {"kind": "attempt_start", "attempt": 1},
        {"kind": "mesh", "attempt": 1},
        batch,
        _compile(1),
        run("jit(step)"),
        batch,
        run("jit(step)"),
        {"kind": "mesh", "attempt": 1},  # scaled up in place: a new mesh, compiled once
        batch,
        _compile(3),
        run("jit(step)"),
        batch,
        _compile(4),
        run("jit(step)"),  # the second call may settle its inputs' shardings: not counted
        batch,
        _compile(5),
        run("jit(step)"),  # and again on it: a recompile
    ]
    assert steady_recompiles(events) == {"jit(step)": [_compile(5)]}
