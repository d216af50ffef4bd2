"""A resize loop whose learning-rate schedule counts updates in a Python int that a recovery
does not restore: the steps a failure threw away still decay the rate. Every batch is trained
once, in order, from the restored snapshot; only the numbers are wrong, and in resize mode (a
batch that scales with the slices) only a clean rerun can say so."""

from __future__ import annotations

from typing import Any

from pathways_chaos.harness.reference import user_loop as parts


def main(*, devices: Any = None, final_step: int = 24, every: int = 4) -> Any:
    import jax
    import orbax.checkpoint as ocp
    from pathwaysutils.elastic import manager

    mgr = manager.Manager(devices)
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    per_slice = len(mgr.slice_to_devices[0])
    data = parts.dataset(100_000)
    updates = [0]  # bug: host-side, never saved or restored

    def step_fn(state: Any, x: Any, y: Any, lr: Any) -> Any:
        return parts.train_step(state, x, y, lr=lr)

    @mgr.elastic_retry(minimum_slice_count=1, poll_interval=10, timeout=300)
    def attempt() -> Any:
        mesh = parts.create_mesh(mgr, per_slice)
        abstract, shardings, _, iterator = parts.initialize_training_loop(
            mesh, mgr, data, 16, False
        )
        train = jax.jit(step_fn, out_shardings=shardings)
        if snapshotter.latest is not None:
            state, step = parts.restore_from_snapshot(snapshotter, abstract, iterator)
        else:
            state, step = jax.device_put(parts.init_params(), shardings), 0
        while step < final_step:
            lr = 0.05 / (1.0 + 0.1 * updates[0])
            state = train(state, *parts.place_batch(next(iterator), mesh), lr)
            updates[0] += 1
            if step % every == 0:
                snapshotter.save(
                    step, {"state": state, "step": step, "iterator_state": iterator.get_state()}
                )
            step += 1
        return state

    state = attempt()
    snapshotter.join()
    return jax.device_get(state)
