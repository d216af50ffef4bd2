"""The sample user loop, unchanged, survives every slice-down code in both recovery modes;
each broken variant is judged failed with its cause named. Nothing here calls the toolkit from
inside the loop: the observer watches grain, Orbax and pathwaysutils from outside.
"""

from __future__ import annotations

import ast
import functools
import inspect
from pathlib import Path

import pytest

from pathways_chaos.harness.reference import user_loop, user_loop_bugs

CODES = ["data_loss", "deadline_exceeded", "not_found", "internal"]


def test_the_sample_loop_imports_nothing_from_the_toolkit():
    tree = ast.parse(inspect.getsource(user_loop))
    imported = [
        alias.name if isinstance(node, ast.Import) else (node.module or "")
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in getattr(node, "names", [])
    ]
    assert imported and not [m for m in imported if "pathways_chaos" in m]


@pytest.mark.parametrize("code", CODES)
def test_resize_survives_every_slice_down_code(chaos, code):
    out = chaos.run_loop(user_loop.main, f"{code}@batch=12:slice=2")

    out.verdict.raise_if_failed()
    assert [e["shape"] for e in out.of_kind("mesh")] == [[4, 2], [3, 2]]
    assert out.of_kind("error")[0]["message"].startswith(code.upper())
    assert {"exactly-once", "resume-step", "meshes", "no-leaks"} <= set(out.verdict.judged)
    # The batch scales with the slices, so the fault-free run's batches differ: the final state
    # is judged against a clean rerun that lost the slice right after the restored snapshot.
    assert "final-state" in out.verdict.judged


@pytest.mark.parametrize("code", CODES)
def test_pause_resume_survives_every_slice_down_code(chaos, code):
    out = chaos.run_loop(user_loop.pause_resume, f"{code}@batch=12:slice=2:repair_after_polls=3")

    out.verdict.raise_if_failed()
    assert [e["shape"] for e in out.of_kind("mesh")] == [[4, 2], [4, 2]]  # every slice back
    assert "final-state" in out.verdict.judged  # same batches as the fault-free run
    assert out.of_kind("restore_end")[0]["step"] == 8


def test_a_late_snapshotter_thread_skips_none_of_the_loops_saves_on_the_fake(
    chaos, late_snapshotter_thread
):
    out = chaos.run_loop(
        user_loop.pause_resume, "data_loss@batch=12:slice=2:repair_after_polls=3", baseline=False
    )

    out.verdict.raise_if_failed()
    saves = out.of_kind("snapshot_save")
    assert saves and not [s["step"] for s in saves if s["skipped"]]
    assert out.of_kind("restore_end")[0]["step"] == 8


def test_latest_right_after_a_save_names_it_however_late_the_snapshotter_thread_runs(tmp_path):
    """The observer leaves a save copying while the loop goes on, as an unwatched run does; what
    ``latest`` says after it must still not depend on the worker thread (a late one here)."""
    from pathways_chaos.harness.play import play_loop

    loop = Path(__file__).parents[2] / "loops" / "reads_latest_after_save.py"
    out = play_loop(f"{loop}:main", log_path=tmp_path / "e.jsonl", checkpoint_dir=tmp_path / "c")

    assert out.result.completed, out.verdict.summary()
    assert [s["step"] for s in out.of_kind("snapshot_save") if not s["skipped"]] == list(range(8))


def test_a_fixed_batch_survives_a_resize_and_is_compared_with_the_fault_free_run(chaos):
    out = chaos.run_loop(user_loop.main, "data_loss@batch=12:slice=0", batch="fixed")

    out.verdict.raise_if_failed()
    assert "final-state" in out.verdict.judged
    assert {e["size"] for e in out.of_kind("batch")} == {16}


def test_step_equals_batch_for_a_loop(chaos):
    by_step = chaos.run_loop(user_loop.main, "data_loss@step=7:slice=1", baseline=False)
    by_batch = chaos.run_loop(user_loop.main, "data_loss@batch=7:slice=1", baseline=False)

    def where(out):
        (fault,) = out.of_kind("fault")
        return max(
            e["batch"] for e in out.events if e["kind"] == "batch" and e["seq"] < fault["seq"]
        )

    assert where(by_step) == where(by_batch) == 7


@pytest.mark.parametrize(
    ("variant", "cause"),
    [
        (user_loop_bugs.step_not_restored, "the step counter was not restored from the snapshot"),
        (
            user_loop_bugs.iterator_from_current_position,
            "the data iterator was not restored from the snapshot",
        ),
        (user_loop_bugs.mesh_from_jax_devices, "not jax.devices()"),
    ],
)
def test_each_broken_variant_is_judged_failed_with_its_cause(chaos, variant, cause):
    out = chaos.run_loop(variant, "data_loss@batch=12:slice=2")

    assert not out.verdict.ok
    assert any(cause in v for v in out.verdict.violations), out.verdict.summary()


def test_the_step_counter_bug_trains_extra_steps(chaos):
    out = chaos.run_loop(user_loop_bugs.step_not_restored, "data_loss@batch=12:slice=2")

    assert any("9 steps too many" in v for v in out.verdict.violations)


def test_the_iterator_bug_names_the_duplicated_positions(chaos):
    out = chaos.run_loop(
        user_loop_bugs.iterator_from_current_position, "data_loss@batch=12:slice=2"
    )

    (message,) = [v for v in out.verdict.violations if "trained twice" in v]
    assert "sample ids 0..143" in message and "again by batch #13 (run 1 attempt 2)" in message


def test_a_loop_that_crashes_on_the_fake_names_the_line(chaos):
    out = chaos.run_loop(user_loop_bugs.mesh_from_jax_devices, "data_loss@batch=12:slice=2")

    (crash,) = [v for v in out.verdict.violations if v.startswith("the loop crashed")]
    assert "DATA_LOSS" in crash and "user_loop.py" in crash and "snapshotter.load" in crash


def test_the_observer_is_undone_after_the_episode(chaos):
    from grain.experimental import ElasticIterator
    from orbax.checkpoint.experimental.v1.training.pathways import Snapshotter
    from pathwaysutils.elastic import manager

    before = (
        ElasticIterator.__dict__["__next__"],
        Snapshotter.__dict__["save"],
        manager.Manager.__dict__["elastic_retry"],
        manager.Manager.__dict__["active_slice_indices"],
    )
    chaos.run_loop(user_loop.main, "data_loss@batch=3:slice=1", baseline=False, final_step=6)
    after = (
        ElasticIterator.__dict__["__next__"],
        Snapshotter.__dict__["save"],
        manager.Manager.__dict__["elastic_retry"],
        manager.Manager.__dict__["active_slice_indices"],
    )
    assert after == before


def test_the_cli_demo_judges_a_loop_and_check_reads_its_log(tmp_path, capsys, fake_cluster_factory):
    from pathways_chaos.harness.cli.main import main

    del fake_cluster_factory  # the plugin made the CPU devices; the CLI makes its own cluster
    log = tmp_path / "loop.jsonl"
    code = main(
        [
            "demo",
            "--loop",
            "pathways_chaos.harness.reference.user_loop_bugs:step_not_restored",
            "--schedule",
            "data_loss@batch=12:slice=2",
            "--log",
            str(log),
        ]
    )
    out = capsys.readouterr().out
    assert code == 1 and "FAILED" in out
    assert "the step counter was not restored from the snapshot" in out
    assert main(["check", str(log)]) == 1
    assert "not judged: final-state" in capsys.readouterr().out


# -- each judge fails on a loop with its bug (beyond the three shipped variants) --------------
KEPT: list[object] = []


def _restarts_from_scratch(snapshotter, abstract, iterator):
    import jax

    shardings = jax.tree.map(lambda a: a.sharding, abstract)
    return jax.device_put(user_loop.init_params(), shardings), 0


def _keeps_every_restore(snapshotter, abstract, iterator):
    import jax

    state, step = user_loop.restore_from_snapshot(snapshotter, abstract, iterator)
    # A history of restored states in a global, on slice 0 (never lost here): stays alive.
    KEPT.append(jax.device_put(state, jax.devices()[0]))
    return state, step


def _drops_the_momentum(snapshotter, abstract, iterator):
    import jax

    state, step = user_loop.restore_from_snapshot(snapshotter, abstract, iterator)
    zeros = jax.tree.map(lambda m: m * 0, state["momentum"])
    return {"params": state["params"], "momentum": zeros}, step


def test_a_loop_that_starts_over_fails_restore_latest(chaos):
    out = chaos.run_loop(
        functools.partial(user_loop.train, restore=_restarts_from_scratch),
        "data_loss@batch=12:slice=2",
    )
    (message,) = [v for v in out.verdict.violations if "without restoring" in v]
    assert "snapshot of step 8" in message


def test_a_loop_that_keeps_old_states_fails_no_leaks(chaos):
    # The second loss makes the first restore's attempt a failed one whose arrays stay kept.
    schedule = "data_loss@batch=12:slice=2,data_loss@batch=20:slice=1"
    try:
        out = chaos.run_loop(
            functools.partial(user_loop.train, restore=_keeps_every_restore), schedule
        )
    finally:
        KEPT.clear()
    (message,) = [v for v in out.verdict.violations if "made by failed attempts" in v]
    assert "from run 1 attempt 2" in message


def test_a_loop_that_drops_optimizer_state_fails_final_state(chaos):
    out = chaos.run_loop(
        functools.partial(user_loop.pause_resume, restore=_drops_the_momentum),
        "data_loss@batch=12:slice=2:repair_after_polls=3",
    )
    (message,) = out.verdict.violations
    assert message.startswith("final state differs from the fault-free run at leaf")


def test_a_resize_recovery_is_judged_on_its_numbers_against_a_clean_rerun(chaos):
    from pathlib import Path

    from pathways_chaos.harness.episodes.loop_episode import load_loop

    loop = load_loop(f"{Path(__file__).parents[2] / 'loops' / 'lr_schedule_counter.py'}:main")
    out = chaos.run_loop(loop, "data_loss@batch=12:slice=2")

    (message,) = out.verdict.violations
    assert message.startswith("final state differs from a clean run that lost the same slices")
    # every batch once, in order, from the restored snapshot: only the numbers tell
    assert {"exactly-once", "restore-used", "snapshot-pairs"} <= set(out.verdict.judged)


def test_a_failure_of_the_lineage_recording_is_said_and_never_reaches_the_loop(chaos, monkeypatch):
    from pathways_chaos.harness.blackbox.lineage import LineageSeam

    def broken(self, *args):
        raise KeyError("a bug in the recorder")

    from pathways_chaos.harness.play import play_loop

    monkeypatch.setattr(LineageSeam, "_executed", broken)  # in this process: not isolated
    baseline = play_loop(user_loop.main, cluster=chaos.cluster, isolate=False)
    out = play_loop(
        user_loop.main,
        "data_loss@batch=12:slice=2",
        baseline=baseline.events,
        cluster=chaos.cluster,
        isolate=False,
    )

    assert out.result.completed
    said = out.verdict.not_judged["snapshot-pairs"]
    assert "the lineage seam failed (bug in pathways-chaos): KeyError" in said
    assert "exactly-once" in out.verdict.judged  # the draw-based check stood in


def test_check_of_a_loop_log_is_not_judged_without_its_baseline_and_judged_with_it(
    tmp_path, capsys
):
    """Without the fault-free run's log the final state cannot be compared: NOT JUDGED (exit 5),
    never a pass; ``--baseline`` gives it, and the same log survives (exit 0)."""
    from pathways_chaos.harness.cli.main import main
    from pathways_chaos.harness.play import play_loop

    loop = "pathways_chaos.harness.reference.user_loop:pause_resume"
    base_log = tmp_path / "base.jsonl"
    base = play_loop(loop, log_path=base_log, checkpoint_dir=tmp_path / "c0")
    play_loop(
        loop,
        "data_loss@batch=6:slice=1:repair_after_polls=2",
        baseline=base.events,
        log_path=tmp_path / "faulted.jsonl",
        checkpoint_dir=tmp_path / "c1",
    )
    capsys.readouterr()
    assert main(["check", str(tmp_path / "faulted.jsonl")]) == 5
    alone = capsys.readouterr().out
    assert "NOT JUDGED" in alone and "not judged: final-state" in alone
    with_base = [
        "check",
        str(tmp_path / "faulted.jsonl"),
        "--baseline",
        str(tmp_path / "base.jsonl"),
    ]
    assert main(with_base) == 0, capsys.readouterr().out
    assert main(["check", str(tmp_path / "faulted.jsonl"), "--baseline", str(tmp_path)]) == 2
    # A yardstick that is not one: the episode itself (faults in it), or an empty log.
    capsys.readouterr()
    faulted = str(tmp_path / "faulted.jsonl")
    assert main(["check", faulted, "--baseline", faulted]) == 2
    said = capsys.readouterr().err.strip()
    assert "ran under faults" in said and "is not a fault-free run" in said, said
    (tmp_path / "empty.jsonl").write_text("")
    assert main(["check", str(tmp_path / "empty.jsonl")]) == 2
    # A copy of the log under another name names value files beside the first: not its own.
    whole = (tmp_path / "faulted.jsonl").read_text()
    (tmp_path / "copy.jsonl").write_text(whole)
    assert main(["check", str(tmp_path / "copy.jsonl"), "--baseline", str(base_log)]) == 5
    assert "not a regular file in the log's values folder" in capsys.readouterr().out
    # A torn last line (its writer killed mid-line) is judged without it, and said.
    with (tmp_path / "faulted.jsonl").open("a") as log:
        log.write('{"seq": 99999, "kind": "ba')
    capsys.readouterr()
    assert main(["check", faulted, "--baseline", str(base_log)]) == 0
    assert "its last line is torn" in capsys.readouterr().err
