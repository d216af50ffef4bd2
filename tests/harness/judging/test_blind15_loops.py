"""A fifteenth blind tester's loops (``tests/loops/real_jobs/blind15/``, kept as written, and
one broken twin made here). A correct mixed-precision loop (a ``shard_map`` step in bf16 with
an fp32 master copy) FAILED final-state after every lost slice: three replicas sum the same
batch in another order than four, and bf16 carries that rounding into every later step, so the
state differed from the fault-free run by 2e-3 where the tolerance is 2e-5. Such a difference
is now the new mesh's rounding alone when a clean run that lost the same slices at the snapshot
(every step on the same mesh) ends in the very same state, and a retry there that kept every
slice (the restore probe) ends in the fault-free run's."""

from __future__ import annotations

from pathlib import Path

import pytest

from pathways_chaos.harness.judging.yardsticks import meshes_changed
from pathways_chaos.harness.play import Outcome, play_loop

JOBS = Path(__file__).parents[2] / "loops" / "real_jobs" / "blind15"
LOSS = "data_loss@batch=10:slice=1"


def _judged(name: str, schedule: str) -> Outcome:
    loop = f"{JOBS / name}:main"
    return play_loop(loop, schedule, baseline=play_loop(loop).events)


@pytest.mark.parametrize("name", ["l04_shardmap_bf16_ok.py", "l04v_master_only.py"])
def test_a_mixed_precision_loop_survives_a_lost_slice(name: str) -> None:
    """The master-only return holds no bf16 leaf: what decides is the mesh, not the dtypes."""
    out = _judged(name, LOSS)
    assert out.verdict.word == "SURVIVED", out.verdict.summary()
    assert "final-state" in out.verdict.judged


def test_its_twin_that_rebuilds_the_master_from_bf16_fails() -> None:
    """The clean rerun restores the same way and shares the bug; the probe, on the fault-free
    meshes, does not, so the difference is not the mesh's rounding."""
    out = _judged("b04_master_rebuilt_from_bf16.py", LOSS)
    assert out.verdict.word == "FAILED", out.verdict.summary()
    assert "final-state" in out.verdict.failed, out.verdict.summary()


def test_a_state_not_in_the_snapshot_still_fails_final_state() -> None:
    """A PRNG key carried in Python: after work thrown away it is ahead of the restored
    step, which the clean run (nothing thrown away) is not."""
    out = _judged("b06_prng_key_not_snapshotted.py", "data_loss@batch=12:slice=1")
    assert "final-state" in out.verdict.failed, out.verdict.summary()


def test_an_optimizer_state_left_out_still_fails_final_state() -> None:
    out = _judged("b07_optax_state_not_snapshotted.py", "data_loss@batch=12:slice=1")
    assert out.verdict.word == "FAILED", out.verdict.summary()
    assert "final-state" in out.verdict.failed, out.verdict.summary()
    assert any("['opt'][0].count" in v for v in out.verdict.violations), out.verdict.violations


def test_the_reruns_are_made_only_for_a_mesh_the_fault_free_run_never_built() -> None:
    def mesh(*shape: int) -> dict[str, object]:
        return {"kind": "mesh", "shape": list(shape)}

    base = [mesh(4, 2)]
    assert meshes_changed([mesh(4, 2), mesh(3, 2)], base)
    assert not meshes_changed([mesh(4, 2), mesh(4, 2)], base)  # a retry that lost no slice
    assert not meshes_changed([], base)


def test_an_option_the_loop_does_not_take_is_bad_input_not_its_crash() -> None:
    """``--option stepz=10`` read as "the loop crashed: TypeError ... unexpected keyword"."""
    from pathways_chaos.harness.errors import ChaosConfigError

    loop = f"{JOBS / 'l04_shardmap_bf16_ok.py'}:main"
    with pytest.raises(ChaosConfigError, match=r"takes no option stepz \(it takes .*steps"):
        play_loop(loop, options={"stepz": 10})


def test_a_schedule_that_is_not_text_is_refused_in_one_line() -> None:
    """``chaos.run(123, loop=...)`` ended in a traceback: 'int' object is not iterable."""
    from pathways_chaos.faults.model import FaultSpecError, Schedule, as_schedule

    with pytest.raises(FaultSpecError, match=r"a schedule is text .* not int"):
        as_schedule(123)  # type: ignore[arg-type]
    assert as_schedule(Schedule()) == Schedule()
    assert len(as_schedule("data_loss@batch=3:slice=1")) == 1
