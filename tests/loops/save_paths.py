"""One pause-and-resume loop, its snapshot written through the orbax path ``path`` names: each
path a real job saves through, so ``slow_save`` and losses during a save can be tried on each.

The loop saves every ``every`` batches and, after a slice-down error, restores the newest
complete save of its own path (model, step and data position), nothing else.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pathways_chaos.harness.reference import user_loop as parts

#: Each save path, and whether its save call blocks the loop (sync) or returns at once (async).
PATHS = {
    "snapshotter": "async",
    "manager_async": "async",
    "manager_sync": "sync",
    "standard": "async",
    "async_checkpointer": "async",
    "pytree": "sync",
    "v1_save_pytree": "sync",
    "v1_save_pytree_async": "async",
    "v1_training": "sync",
    "v1_training_async": "async",
}


class Store:
    """Saves and restores ``{"state", "step", "iterator_state"}`` through one orbax path."""

    def __init__(self, path: str, directory: str | None) -> None:
        import orbax.checkpoint as ocp

        if path not in PATHS:
            raise ValueError(f"unknown save path {path!r}: use one of {', '.join(PATHS)}")
        if path != "snapshotter" and directory is None:
            raise ValueError(f"the {path} path needs a checkpoint_dir")
        self.path = path
        self.root = Path(directory) if directory is not None else Path(".")
        self.pending: Any = None  # a v1 AsyncResponse not yet waited for
        self.snapshotter: Any = None
        self.manager: Any = None
        self.checkpointer: Any = None
        if path == "snapshotter":
            self.snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
        elif path.startswith("manager"):
            options = ocp.CheckpointManagerOptions(
                max_to_keep=3, enable_async_checkpointing=path == "manager_async"
            )
            self.manager = ocp.CheckpointManager(self.root, options=options)
        elif path == "standard":
            self.checkpointer = ocp.StandardCheckpointer()
        elif path == "async_checkpointer":
            self.checkpointer = ocp.AsyncCheckpointer(ocp.PyTreeCheckpointHandler())
        elif path == "pytree":
            self.checkpointer = ocp.PyTreeCheckpointer()
        elif path.startswith("v1_training"):
            self.checkpointer = ocp.v1.training.Checkpointer(self.root)

    # -- saving ---------------------------------------------------------------------------------
    def save(self, step: int, state: Any, iterator: Any) -> None:
        import numpy as np
        import orbax.checkpoint as ocp

        data = iterator.get_state()
        tree = {"state": state, "step": np.asarray(step), "iterator_state": data}
        where = self.root / f"step_{step:06d}"
        p = self.path
        if p == "snapshotter":
            self.snapshotter.save(step, {"state": state, "step": step, "iterator_state": data})
        elif p.startswith("manager"):
            self.manager.save(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(state), iterator_state=ocp.args.JsonSave(data)
                ),
            )
        elif p == "standard":
            self.checkpointer.wait_until_finished()
            self.checkpointer.save(where, tree)
        elif p == "async_checkpointer":
            self.checkpointer.save(where, args=ocp.args.PyTreeSave(tree))
        elif p == "pytree":
            self.checkpointer.save(where, tree)
        elif p == "v1_save_pytree":
            ocp.v1.save_pytree(where, tree)
        elif p == "v1_save_pytree_async":
            self.finish()
            self.pending = ocp.v1.save_pytree_async(where, tree)
        elif p == "v1_training":
            self.checkpointer.save(step, tree)
        elif p == "v1_training_async":
            self.finish()
            self.pending = self.checkpointer.save_async(step, tree)

    def finish(self) -> None:
        """Waits for the saves in flight, each path its own way."""
        if self.snapshotter is not None:
            self.snapshotter.join()
        if self.manager is not None:
            self.manager.wait_until_finished()
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.result()
        if self.path in ("standard", "async_checkpointer"):
            self.checkpointer.wait_until_finished()
        if self.path.startswith("v1_training"):
            self.checkpointer.wait()

    def close(self) -> None:
        if self.manager is not None:
            self.manager.close()
        if self.checkpointer is not None:
            self.checkpointer.close()

    # -- restoring ------------------------------------------------------------------------------
    def latest_dir(self) -> Path | None:
        if not self.root.is_dir():
            return None
        done = [p for p in self.root.iterdir() if re.fullmatch(r"step_\d+", p.name)]
        return max(done, default=None)

    def restore(self, abstract: Any, iterator: Any) -> tuple[Any, int] | None:
        """The newest complete save as (state, next step), or ``None``; sets the iterator."""
        import numpy as np
        import orbax.checkpoint as ocp

        template = {
            "state": abstract,
            "step": np.asarray(0),
            "iterator_state": iterator.get_state(),
        }
        self.pending = None  # a failed attempt's save in flight is not this attempt's
        p = self.path
        if p == "snapshotter":
            if self.snapshotter.latest is None:
                return None
            self.snapshotter.join()
            got = self.snapshotter.load({**template, "step": 0})
        elif p.startswith("manager"):
            step = self.manager.latest_step()
            if step is None:
                return None
            got = self.manager.restore(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(abstract), iterator_state=ocp.args.JsonRestore()
                ),
            )
            got = {"state": got["state"], "step": step, "iterator_state": got["iterator_state"]}
        elif p.startswith("v1_training"):
            latest = self.checkpointer.latest
            if latest is None:
                return None
            got = self.checkpointer.load(latest, template)
        else:
            where = self.latest_dir()
            if where is None:
                return None
            if p == "standard":
                got = self.checkpointer.restore(where, template)
            elif p in ("async_checkpointer", "pytree"):
                restore_args = ocp.checkpoint_utils.construct_restore_args(template)
                got = self.checkpointer.restore(
                    where, args=ocp.args.PyTreeRestore(template, restore_args=restore_args)
                )
            else:
                got = ocp.v1.load_pytree(where, template)
        iterator.set_state({k: int(v) for k, v in dict(got["iterator_state"]).items()})
        return got["state"], int(got["step"]) + 1


def main(
    *,
    path: str = "snapshotter",
    devices: Any = None,
    checkpoint_dir: str | None = None,
    final_step: int = 12,
    every: int = 3,
    global_batch: int = 8,
) -> Any:
    import jax
    from pathwaysutils.elastic import manager

    mgr = manager.Manager(devices)
    per_slice = len(mgr.slice_to_devices[0])
    data = parts.dataset(10_000)
    store = Store(path, checkpoint_dir)

    @mgr.elastic_retry(
        minimum_slice_count=None,
        poll_interval=1,
        timeout=120,
        retry_policy=manager.ElasticRetryLimit(max_attempts=5),
    )
    def attempt() -> Any:
        mesh = parts.create_mesh(mgr, per_slice)
        abstract, shardings, train, iterator = parts.initialize_training_loop(
            mesh, mgr, data, global_batch, True
        )
        got = store.restore(abstract, iterator)
        state, step = (
            got if got is not None else (jax.device_put(parts.init_params(), shardings), 0)
        )
        while step < final_step:
            state = train(state, *parts.place_batch(next(iterator), mesh))
            if step % every == every - 1:
                store.save(step, state, iterator)
            step += 1
        store.finish()
        return state

    try:
        state = attempt()
    finally:
        store.close()
    return jax.device_get(state)
