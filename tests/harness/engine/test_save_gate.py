"""slow_save holds a save in flight on the episode clock; a join waits for it, a loss drops it."""

from __future__ import annotations

from pathways_chaos.harness.properties.episode_spec import EpisodeSpec, run_spec


def _events(schedule: str) -> list[dict]:
    spec = EpisodeSpec(schedule=schedule, devices_per_slice=1, poll_interval=1)
    return run_spec(spec).events


def _kinds(events, *kinds):
    return [(e["kind"], e["step"]) for e in events if e["kind"] in kinds]


def test_a_retried_error_waits_for_the_held_save_and_restores_it():
    events = _events("slow_save@step=3:seconds=4,raise_error@step=5:code=INTERNAL")
    held = next(e for e in events if e["kind"] == "save_held")
    assert (held["step"], held["until"]) == (4, held["since"] + 4)
    released = next(e for e in events if e["kind"] == "save_released")
    assert released["how"] == "joined" and released["t"] >= held["until"]  # the join cost it
    restore = next(e for e in events if e["kind"] == "restore_end")
    assert restore["step"] == 4


def test_a_loss_drops_the_held_save_and_the_previous_snapshot_is_restored():
    events = _events("slow_save@step=3:seconds=4,data_loss@step=5:slice=1")
    assert _kinds(events, "save_held", "save_dropped") == [("save_held", 4), ("save_dropped", 4)]
    assert next(e for e in events if e["kind"] == "restore_end")["step"] == 2


def test_a_save_held_for_polls_completes_by_itself_and_the_next_is_skipped_meanwhile():
    # Slice 3 is down for 8 polls: the monitor polls it every second while the save is held.
    events = _events("data_loss@step=1:slice=3:repair_after_polls=8,slow_save@step=4:polls=2")
    held = next(e for e in events if e["kind"] == "save_held")
    released = next(e for e in events if e["kind"] == "save_released")
    assert (held["step"], released["step"], released["how"]) == (4, 4, "expired")
    completes = [e["step"] for e in events if e["kind"] == "snapshot_complete"]
    skipped = [e["step"] for e in events if e["kind"] == "save_skipped"]
    assert 4 in completes and not set(skipped) & set(completes)


def test_a_late_snapshotter_thread_skips_none_of_the_trainers_saves(chaos, late_snapshotter_thread):
    # The cause of a CI failure: "Snapshotter busy. Skipping snapshot for step 5" (and 10) on a
    # loaded machine, so the trainer restored step 0, not 10.
    out = chaos.run("data_loss@step=12:slice=2:repair_after_polls=3", mode="pause_resume")

    out.verdict.raise_if_failed()
    completes = [e["step"] for e in out.of_kind("snapshot_complete")]
    assert completes[:3] == [0, 5, 10]
    assert [r["step"] for r in out.of_kind("restore_end")] == [10]
