"""Broken loops whose bug shows only after TWO faults in a particular order.

Each wraps the sample loop (``harness/reference/user_loop.train``) with one plausible mistake.
A single fault does not show it, nor does either fault alone, nor the same two in the other
order; the fixed chaos scenarios (suites/chaos/test_user_loop.py) do not catch them; the loop
search does (tests/harness/properties/test_loop_search.py). Like the sample loop, nothing here calls
the toolkit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from pathways_chaos.harness.reference import user_loop


# -- 1. a mesh cache keyed by the number of active slices ------------------------------------
def mesh_cache_by_slice_count(**options: Any) -> Any:
    """Caches each attempt's mesh by how many slices are active, not by which.

    Needs a loss of one slice, its rejoin, then a loss of ANOTHER slice: the cached 3-slice
    mesh still holds the slice lost now. A flapping slice (the same one lost again) gets the
    right mesh from the cache, so the fixed scenarios pass.
    """
    cache: dict[int, Any] = {}

    def make_mesh(elastic_manager: Any, devices_per_slice: int) -> Any:
        count = elastic_manager.active_slice_count
        if count not in cache:  # bug: the key should be the active slice indices
            cache[count] = user_loop.create_mesh(elastic_manager, devices_per_slice)
        return cache[count]

    return user_loop.train(make_mesh=make_mesh, **options)


# -- 2. a preemption checkpoint that assumes the full batch ------------------------------------
def _checkpoint_position_from_step(directory: str | None, state: Any, step: int, it: Any) -> None:
    from orbax.checkpoint import v1 as ocp

    if directory is None:
        raise RuntimeError("preempted, but no checkpoint_dir to save to")
    global_batch = 16  # the loop's default
    # bug: the data position as steps x the full batch; after a loss the batch scaled down
    position = {"global_next_index": (step + 1) * global_batch}
    ocp.save_pytree(
        f"{directory}/step_{step:08d}", {"state": state, "step": step, "iterator_state": position}
    )


@contextlib.contextmanager
def _saving_checkpoints_with(save: Any) -> Iterator[None]:
    real = user_loop.save_checkpoint
    user_loop.save_checkpoint = save
    try:
        yield
    finally:
        user_loop.save_checkpoint = real


def checkpoint_position_from_step(**options: Any) -> Any:
    """On a preemption notice, writes the data position as ``(step + 1) x global batch``.

    Right while every batch was full; wrong once a slice loss scaled the batch down. So it
    needs a loss and THEN a preemption: a preemption alone, a loss alone, or a preemption
    before the loss all resume at the right sample.
    """
    with _saving_checkpoints_with(_checkpoint_position_from_step):
        return user_loop.train(**options)


# -- 3. a snapshot restore that adds the resumed run's offset again ----------------------------
@contextlib.contextmanager
def _loading_checkpoints_with(load: Any) -> Iterator[None]:
    real = user_loop.load_checkpoint
    user_loop.load_checkpoint = load
    try:
        yield
    finally:
        user_loop.load_checkpoint = real


def snapshot_step_after_resume(**options: Any) -> Any:
    """After resuming from a preemption checkpoint, adds the resumed step to every snapshot
    restore's step (the loop counts the resumed run's steps from its start, and "corrects" the
    snapshot's absolute step by that offset once more).

    Needs a preemption and THEN a slice loss: a loss alone, a preemption alone, or a loss
    before the preemption restore the right step.
    """
    resumed = {"offset": 0}
    real_load = user_loop.load_checkpoint

    def load_checkpoint(path: Any, abstract: Any, iterator: Any) -> tuple[Any, int]:
        state, step = real_load(path, abstract, iterator)
        resumed["offset"] = step
        return state, step

    def restore(snapshotter: Any, abstract: Any, iterator: Any) -> tuple[Any, int]:
        state, step = user_loop.restore_from_snapshot(snapshotter, abstract, iterator)
        return state, step + resumed["offset"]  # bug: the snapshot's step is already absolute

    with _loading_checkpoints_with(load_checkpoint):
        return user_loop.train(restore=restore, **options)


#: name -> (a schedule of two faults in the order that shows the bug, the same two faults in
#: an order (or a combination) that does not).
TWO_FAULT_LOOPS = {
    "mesh_cache_by_slice_count": (
        "data_loss@batch=3:slice=1:repair_after_polls=1,data_loss@batch=14:slice=2:repair_after_polls=3",
        "data_loss@batch=3:slice=1:repair_after_polls=1,data_loss@batch=14:slice=1:repair_after_polls=3",
    ),
    "checkpoint_position_from_step": (
        "data_loss@batch=3:slice=1:repair_after_polls=2,preemption@batch=10",
        "preemption@batch=3,data_loss@batch=10:slice=1:repair_after_polls=2",
    ),
    "snapshot_step_after_resume": (
        "preemption@batch=5,data_loss@batch=14:slice=2:repair_after_polls=2",
        "data_loss@batch=5:slice=2:repair_after_polls=2,preemption@batch=14",
    ),
}
