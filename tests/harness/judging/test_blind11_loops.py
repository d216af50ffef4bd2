"""An eleventh blind tester's loops (tests/loops/real_jobs/blind11/, kept as written but for the
line that finds their helper module): two correct loops the toolkit failed, and the broken
variant of one that must still fail, for its true cause."""

from __future__ import annotations

import collections
from pathlib import Path

from pathways_chaos.harness.play import Outcome, play_loop

HERE = Path(__file__).parents[2] / "loops" / "real_jobs" / "blind11"
LOSS_AT_FIRST_BATCH = "data_loss@batch=1:slice=1:repair_after_polls=1"
LOSS_AT_SECOND_SAVE = "data_loss@save=1:slice=1:repair_after_polls=1"


def _judged(name: str, schedule: str, tmp_path: Path) -> tuple[Outcome, Outcome]:
    loop = f"{HERE / name}:main"
    baseline = play_loop(loop, checkpoint_dir=tmp_path / "c0")
    out = play_loop(loop, schedule, baseline=baseline.events, checkpoint_dir=tmp_path / "c1")
    return baseline, out


def test_init_params_placed_again_after_a_loss_survive(tmp_path: Path) -> None:
    """flax nnx: ``nnx.split`` leaves the params on device 0 and each attempt puts them on its
    mesh. The fake freed the whole replicated array of the lost slice, and with it device 0's
    buffer the init params shared: "the loop crashed: RuntimeError: Array has been deleted"."""
    _, out = _judged("c01_nnx_split_merge.py", LOSS_AT_FIRST_BATCH, tmp_path)
    assert out.verdict.ok, out.verdict.summary()
    assert "final-state" in out.verdict.judged, out.verdict.summary()


def test_a_batch_a_prefetch_thread_drew_is_counted_once(tmp_path: Path) -> None:
    """The observer counted the ElasticIterator's draw in the prefetch thread and again when the
    loop's generator handed the batch on, so the step unit came out as two batches, and how
    far the thread ran ahead decided whether resume-step failed a correct loop ("it resumed at
    step 3, not step 1")."""
    baseline, out = _judged("c05_prefetch_thread.py", LOSS_AT_SECOND_SAVE, tmp_path)
    drawn = collections.Counter(
        i for e in baseline.events if e["kind"] == "batch" for i in e.get("ids", ())
    )
    assert drawn and max(drawn.values()) == 1, drawn.most_common(3)
    assert out.verdict.ok, out.verdict.summary()
    assert {"resume-step", "exactly-once", "snapshot-pairs"} <= set(out.verdict.judged)


def test_a_snapshot_of_the_prefetching_iterators_position_fails_for_that_cause(
    tmp_path: Path,
) -> None:
    """The same loop saving the iterator's own position, which runs ahead of the batch trained:
    the first line was "the step counter was not restored", which it was."""
    _, out = _judged("b08_prefetch_position_ahead.py", LOSS_AT_SECOND_SAVE, tmp_path)
    assert not out.verdict.ok
    first = out.verdict.violations[0]
    assert "pairs the model" in first and "ahead of" in first, out.verdict.summary()
    assert not any("step counter" in v for v in out.verdict.violations), out.verdict.summary()
