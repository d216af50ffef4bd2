"""Every Snapshotter the toolkit makes is let go at the end of its episode: thread and snapshot.

orbax 0.12.8 has no public close(); harness.engine.snapshotter_release is the one workaround,
and these tests pin the private names it relies on (they fail loudly on an orbax that moved).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pathways_chaos.harness.engine.census import pinned_host_arrays
from pathways_chaos.harness.engine.snapshotter_release import (
    live_snapshotter_threads,
    release_snapshotter,
)
from pathways_chaos.harness.judging import oracle


def _saved_snapshotter():
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    from orbax.checkpoint.experimental.v1.training.pathways import Snapshotter

    devices = jax.devices("cpu")[:2]
    sharding = NamedSharding(Mesh(np.array(devices), ("replica",)), PartitionSpec())
    snapshotter = Snapshotter(replica_axis_index=0)
    snapshotter.save(3, {"w": jax.device_put(np.ones(8, np.float32), sharding)})
    snapshotter.join()
    return snapshotter


def test_release_ends_the_worker_thread_and_drops_the_snapshot(monkeypatch):
    reported: list[object] = []
    monkeypatch.setattr(threading, "excepthook", reported.append)
    threads, pinned = live_snapshotter_threads(), pinned_host_arrays()
    snapshotter = _saved_snapshotter()
    assert not hasattr(snapshotter, "close"), "orbax has a close(): use it, drop the workaround"
    assert live_snapshotter_threads() == threads + 1
    assert pinned_host_arrays() == pinned + 2  # one pinned-host copy per replica
    worker = snapshotter._worker_thread

    release_snapshotter(snapshotter)
    release_snapshotter(snapshotter)  # idempotent

    assert not worker.is_alive()
    assert snapshotter.latest is None
    assert live_snapshotter_threads() == threads
    assert pinned_host_arrays() == pinned
    assert reported == []  # the thread ended without a reported exception


def test_an_episode_leaves_no_snapshotter_behind(fake_cluster):
    from pathways_chaos.faults.model import parse_schedule
    from pathways_chaos.harness.episodes.episode import run_episode
    from pathways_chaos.harness.reference.trainer import TrainerConfig

    threads = live_snapshotter_threads()
    result = run_episode(
        fake_cluster, TrainerConfig(final_step=12), parse_schedule("data_loss@step=7:slice=2")
    )
    assert oracle.check(result.events, replay=False).violations == []
    assert live_snapshotter_threads() == threads
    end = next(e for e in result.events if e["kind"] == "run_end")
    start = next(e for e in result.events if e["kind"] == "run_start")
    assert end["pinned_host"] == start["pinned_host"]


def test_a_trainer_that_keeps_its_snapshotter_is_caught(fake_cluster, monkeypatch):
    """The broken variant: without the release, the last snapshot outlives the run."""
    from pathways_chaos.faults.model import parse_schedule
    from pathways_chaos.harness.episodes.episode import run_episode
    from pathways_chaos.harness.reference import trainer

    kept: list[object] = []
    monkeypatch.setattr(trainer, "release_snapshotter", kept.append)
    try:
        result = run_episode(
            fake_cluster,
            trainer.TrainerConfig(final_step=12),
            parse_schedule("data_loss@step=7:slice=2"),
        )
        problems = oracle.check(result.events, replay=False).violations
        assert any("pinned-host arrays grew from" in p for p in problems), problems
    finally:
        for snapshotter in kept:
            release_snapshotter(snapshotter)


@pytest.mark.parametrize("judged", [True, False])
def test_the_census_collects_only_when_a_quick_count_is_suspect(judged):
    import jax

    from pathways_chaos.harness.engine.census import Census

    before = jax.device_put(np.ones(2))  # alive before the run: not the run's
    census = Census()
    first = census()
    assert first["by_kind"].get("device", 0) == 0
    assert census() == first and census.collections == 0  # nothing new: no gc
    kept = jax.device_put(np.ones(3))
    grown = census(judged=judged)
    assert grown["by_kind"]["device"] == 1
    assert census.collections == (1 if judged else 0)
    del kept, before


def test_a_failed_snapshot_log_record_keeps_its_text_not_its_arrays():
    """The worker's logging.exception record outlives the run in pytest's log capture; its
    traceback's frames held the pinned-host copies (the flapping-slice chaos test found it)."""
    import logging
    import sys
    import weakref

    from pathways_chaos.harness.engine.snapshotter_release import worker_log_frames_cleared

    class Pinned:  # stands for a pinned-host array held by a JAX frame
        pass

    def block_until_ready(state):
        raise RuntimeError("Array has been deleted")

    held = Pinned()
    alive = weakref.ref(held)
    try:
        block_until_ready(held)
    except RuntimeError:
        exc_info = sys.exc_info()
    del held
    record = logging.LogRecord(
        "root", logging.ERROR, "/x/pathways/snapshotter.py", 1, "Failed to snapshot", (), exc_info
    )
    record.funcName = "_worker"
    del exc_info
    kept: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = kept.append  # type: ignore[method-assign]
    root = logging.getLogger()
    root.addHandler(handler)
    undo = worker_log_frames_cleared()
    try:
        root.handle(record)
    finally:
        undo()
        root.removeHandler(handler)
    assert kept == [record]
    assert "Array has been deleted" in record.exc_text
    assert alive() is None  # the frame's locals are gone with the filter


def test_a_loss_touching_an_earlier_array_adds_nothing_to_a_runs_census(fake_cluster):
    """A loss frees the lost devices' buffers through one-device views that JAX keeps on the
    array: the views of an array alive before the run are not the run's (an earlier test's
    leftover snapshot made a correct trainer fail the pinned-host check in full CI runs)."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from pathways_chaos.harness.engine.census import Census

    mesh = Mesh(np.array(fake_cluster.devices), ("replica",))
    pinned = NamedSharding(mesh, PartitionSpec("replica"), memory_kind="pinned_host")
    on_device = NamedSharding(mesh, PartitionSpec("replica"))
    rows = np.ones((len(fake_cluster.devices), 2), np.float32)
    earlier = [jax.device_put(rows, pinned), jax.device_put(rows, on_device)]
    census = Census()
    census()  # the run's baseline
    fake_cluster.lose_slice(1)
    assert census.pinned_host() == 0
    assert census()["by_kind"].get("device", 0) == census.baseline
    alive = fake_cluster.slice_devices(0)[0]
    made = jax.device_put(rows, jax.sharding.SingleDeviceSharding(alive, memory_kind="pinned_host"))
    assert census.pinned_host() == 1  # one of the run's own is still counted
    del made, earlier
