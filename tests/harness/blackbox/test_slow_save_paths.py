"""``slow_save`` holds a user's save on whichever orbax path the loop saves through, and a slice
lost meanwhile acts on a save really in flight.

An asynchronous save returns to the loop at once and completes on the episode clock; a loss
before then drops it, so the loop restores the save before it. A synchronous save blocks the
loop while the clock passes its seconds; a loss meanwhile makes the save raise the slice-down
error, as a blocking save on Pathways does. Each run is a real child process of the loop in
``tests/loops/save_paths.py``, on real orbax.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from pathways_chaos.harness.play import play_loop

LOOP = Path(__file__).parents[2] / "loops" / "save_paths.py"
_spec = importlib.util.spec_from_file_location("save_paths_loop", LOOP)
assert _spec is not None and _spec.loader is not None
save_paths = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(save_paths)

ASYNC = [p for p, how in save_paths.PATHS.items() if how == "async"]
SYNC = [p for p, how in save_paths.PATHS.items() if how == "sync"]
BACK = "repair_after_polls=3"


def _play(path: str, schedule: str, tmp_path: Path) -> Any:
    return play_loop(
        f"{LOOP}:main",
        schedule,
        options={"path": path},
        topology="2x1",
        checkpoint_dir=tmp_path / "ckpt",
    )


def _one(out: Any, kind: str, **match: Any) -> dict[str, Any]:
    found = [e for e in out.of_kind(kind) if all(e.get(k) == v for k, v in match.items())]
    assert len(found) == 1, (kind, match, found)
    return found[0]


def _seq(event: dict[str, Any]) -> int:
    return int(event["seq"])


@pytest.mark.parametrize("path", ASYNC)
def test_an_async_save_held_in_flight_is_dropped_by_a_loss_and_the_one_before_restored(
    tmp_path, path
):
    out = _play(path, f"slow_save@batch=5:seconds=4,data_loss@batch=7:slice=1:{BACK}", tmp_path)

    held = _one(out, "save_held", step=5)
    assert (held["since"], held["until"]) == (6.0, 10.0)
    # The call returned at once: the loop drew its next batch while the save was in flight.
    drawn = _one(out, "batch", batch=7)
    loss = _one(out, "fault", text=f"data_loss@batch=7:slice=1:{BACK}")
    dropped = _one(out, "save_dropped", step=5)
    assert _seq(held) < _seq(drawn) < _seq(dropped) < _seq(loss)
    assert dropped["reason"] == "a slice it was on was lost"
    assert not [e for e in out.of_kind("save_released") if e["step"] == 5 and e["attempt"] == 1]
    assert [e["step"] for e in out.of_kind("restore_end")] == [2]  # not the dropped 5
    assert out.verdict.ok, out.verdict.summary()


@pytest.mark.parametrize("path", SYNC)
def test_a_sync_save_blocks_while_the_clock_passes_and_a_loss_meanwhile_fails_it(tmp_path, path):
    out = _play(path, f"slow_save@batch=5:seconds=4,data_loss@time=8:slice=1:{BACK}", tmp_path)

    held = _one(out, "save_held", step=5)
    loss = _one(out, "fault", text=f"data_loss@time=8:slice=1:{BACK}")
    error = out.of_kind("error")[0]
    assert held["since"] == 6.0 and held["since"] <= loss["t"] <= held["until"]
    # Blocked: no batch between the save's start and the error it raised.
    assert not [e for e in out.of_kind("batch") if _seq(held) < _seq(e) < _seq(error)]
    assert _one(out, "save_dropped", step=5)["reason"] == "a slice it was on was lost"
    assert error["message"].startswith("DATA_LOSS") and "save was in flight" in error["message"]
    assert "save_paths.py" in error["where"]  # the loop's own save line, not the toolkit's
    assert [e["step"] for e in out.of_kind("restore_end")] == [2]
    assert out.verdict.ok, out.verdict.summary()


def test_a_held_save_completes_when_its_seconds_pass_and_is_the_one_restored(tmp_path):
    out = _play(
        "manager_async", f"slow_save@batch=5:seconds=2,data_loss@batch=9:slice=1:{BACK}", tmp_path
    )

    released = _one(out, "save_released", step=5)
    loss = _one(out, "fault", text=f"data_loss@batch=9:slice=1:{BACK}")
    assert released["how"] == "expired" and released["t"] >= 8.0
    assert _seq(released) < _seq(loss)
    assert [e["step"] for e in out.of_kind("restore_end")] == [5]


def test_waiting_for_a_held_save_costs_its_seconds_on_the_clock(tmp_path):
    # The last save (step 11) is held for 50 s; the loop's wait_until_finished waits for it.
    out = _play("manager_async", "slow_save@batch=11:seconds=50", tmp_path)

    held = _one(out, "save_held", step=11)
    released = _one(out, "save_released", step=11)
    assert released["how"] == "waited" and released["t"] >= held["until"]
    assert (tmp_path / "ckpt" / "11").is_dir()


@pytest.mark.parametrize(("path", "restored"), [("manager_async", 2), ("v1_save_pytree", 5)])
def test_a_loss_at_a_checkpoint_save_acts_on_it_as_its_path_has_left_it(tmp_path, path, restored):
    # save=N counts every orbax path's saves, not only the Snapshotter's. The loss comes as the
    # second save (step 5) returns: an async one is still in flight and is dropped; a sync one
    # has completed, so it is the one restored.
    out = _play(path, f"slow_save@batch=4:seconds=4,data_loss@save=2:slice=1:{BACK}", tmp_path)

    assert not out.of_kind("fault_unfired")
    second = out.of_kind("checkpoint_save")[1]
    loss = _one(out, "fault", text=f"data_loss@save=2:slice=1:{BACK}")
    assert second["step"] == 5 and _seq(second) < _seq(loss)
    assert _one(out, "save_held", step=5)["path"] != "Snapshotter.save"
    assert [e["step"] for e in out.of_kind("restore_end")] == [restored]
    assert out.verdict.ok, out.verdict.summary()
