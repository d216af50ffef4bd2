"""A broken variant of ``real_jobs/ckpt_manager_ok.py`` for final-state after a slice comes
back: its learning rate decays with the batches it has drawn, a count kept outside the
snapshot, so the work a failure threw away still slows its learning. A run that lost the same
slice cleanly right after the snapshot (and took it back after the same batches) ends elsewhere.

The original is a correct resize-mode loop with a Snapshotter and a CheckpointManager.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

FEATURES, HIDDEN = 16, 64
TRUE_W = np.linspace(-1.0, 1.0, FEATURES).astype(np.float32)


def make_record(i: int) -> dict[str, Any]:
    rng = np.random.default_rng(i)
    x = rng.standard_normal(FEATURES).astype(np.float32)
    y = np.float32(np.tanh(x @ TRUE_W))
    return {"id": np.int64(i), "x": x, "y": y}


def init_state(seed: int = 0) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    k1, k2 = jax.random.split(jax.random.key(seed))
    params = {
        "w1": jax.random.normal(k1, (FEATURES, HIDDEN), jnp.float32) * 0.2,
        "b1": jnp.zeros((HIDDEN,), jnp.float32),
        "w2": jax.random.normal(k2, (HIDDEN, 1), jnp.float32) * 0.2,
    }
    return {"params": params, "mom": jax.tree.map(jnp.zeros_like, params)}


def loss_fn(params: Any, x: Any, y: Any) -> Any:
    import jax.numpy as jnp

    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean(((h @ params["w2"])[:, 0] - y) ** 2)


def sgd_momentum(state: Any, x: Any, y: Any, lr: Any) -> Any:
    import jax

    grads = jax.grad(loss_fn)(state["params"], x, y)
    mom = jax.tree.map(lambda m, g: 0.9 * m + g, state["mom"], grads)
    params = jax.tree.map(lambda p, m: p - lr * m, state["params"], mom)
    return {"params": params, "mom": mom}


def main(
    *,
    devices: Any = None,
    checkpoint_dir: Any = None,
    steps: int = 30,
    global_batch: int = 16,
    snapshot_every: int = 3,
    **options: Any,
) -> Any:
    import grain
    import jax
    import orbax.checkpoint as ocp
    from grain.experimental import ElasticIterator
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    from pathwaysutils.elastic import manager as elastic

    mgr = elastic.Manager(devices)
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    per_slice = len(mgr.slice_to_devices[0])
    source = grain.MapDataset.range(50_000).map(lambda i: make_record(int(i)))

    stop = threading.Event()
    old_handler = None
    if threading.current_thread() is threading.main_thread():
        old_handler = signal.signal(signal.SIGTERM, lambda *_: stop.set())

    ckpt_mgr = None
    if checkpoint_dir is not None:
        ckpt_mgr = ocp.CheckpointManager(
            checkpoint_dir, options=ocp.CheckpointManagerOptions(max_to_keep=2, create=True)
        )

    def build(mesh: Any) -> tuple[Any, Any, Any, Any]:
        pspec = {"w1": P(None, "model"), "b1": P("model"), "w2": P("model", None)}
        shard = jax.tree.map(lambda s: NamedSharding(mesh, s), pspec)
        shardings = {"params": shard, "mom": dict(shard)}
        abstract = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
            jax.eval_shape(init_state),
            shardings,
        )
        step_fn = jax.jit(sgd_momentum, out_shardings=shardings)
        batch = mgr.scale_by_active_slices(global_batch)
        it = ElasticIterator(source, batch, grain.sharding.NoSharding())
        return shardings, abstract, step_fn, it

    drawn = [0]  # batches drawn, for a learning-rate decay, kept outside the snapshot

    @mgr.elastic_retry(minimum_slice_count=1, poll_interval=5, timeout=300)
    def attempt() -> Any:
        slices = sorted(mgr.active_slice_indices)
        devs = np.array([d for s in slices for d in mgr.slice_to_devices[s]], dtype=object)
        mesh = jax.sharding.Mesh(devs.reshape(len(slices), per_slice), ("replica", "model"))
        shardings, abstract, step_fn, it = build(mesh)
        data_sharding = NamedSharding(mesh, P("replica"))

        if snapshotter.latest is not None:
            snapshotter.join()
            snap = snapshotter.load({"state": abstract, "step": 0, "data": it.get_state()})
            it.set_state(snap["data"])
            state, step = snap["state"], int(snap["step"]) + 1
            log.info("restored snapshot of step %d", step - 1)
        elif ckpt_mgr is not None and ckpt_mgr.latest_step() is not None:
            last = ckpt_mgr.latest_step()
            restored = ckpt_mgr.restore(
                last,
                args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(abstract), data=ocp.args.JsonRestore()
                ),
            )
            it.set_state(restored["data"])
            state, step = restored["state"], last + 1
            log.info("resumed from checkpoint of step %d", last)
        else:
            state, step = jax.device_put(init_state(), shardings), 0

        while step < steps:
            batch = next(it)
            x = jax.device_put(batch["x"], data_sharding)
            y = jax.device_put(batch["y"], data_sharding)
            drawn[0] += 1  # the bug: counts every batch drawn, thrown-away work too
            state = step_fn(state, x, y, np.float32(0.03 / (1 + 0.01 * drawn[0])))
            if step % snapshot_every == 0:
                snapshotter.save(step, {"state": state, "step": step, "data": it.get_state()})
            if stop.is_set():
                if ckpt_mgr is None:
                    raise RuntimeError("SIGTERM but nowhere to checkpoint")
                ckpt_mgr.save(
                    step,
                    args=ocp.args.Composite(
                        state=ocp.args.StandardSave(state),
                        data=ocp.args.JsonSave(it.get_state()),
                    ),
                    force=True,
                )
                ckpt_mgr.wait_until_finished()
                log.info("preempted: checkpointed step %d", step)
                return None
            if mgr.available_inactive_slices and step + 1 < steps:
                # take the new slices: snapshot this exact step, then restart the attempt
                snapshotter.join()
                snapshotter.save(step, {"state": state, "step": step, "data": it.get_state()})
                snapshotter.join()
                raise elastic.ScaleUpSignalError()
            step += 1
        return state

    try:
        state = attempt()
        snapshotter.join()
    finally:
        if old_handler is not None:
            signal.signal(signal.SIGTERM, old_handler)
        if ckpt_mgr is not None:
            ckpt_mgr.close()
    return None if state is None else jax.device_get(state)
