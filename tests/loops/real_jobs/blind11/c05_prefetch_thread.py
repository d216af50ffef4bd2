# ruff: noqa
# INTENDED VERDICT: CORRECT (should survive every scenario).
#
# Style: a background prefetch thread pulls batches from the ElasticIterator into a bounded
# queue, each paired with the iterator state right after that batch; the loop snapshots the
# position that belongs to the batch it actually trained (not the iterator's own, which runs
# ahead). The thread is stopped in a finally block when an attempt ends, fails or returns.
import queue
import threading

import jax
import jax.numpy as jnp
import numpy as np
import optax
import grain
import grain.experimental as gex
import orbax.checkpoint as ocp
from pathwaysutils.elastic import manager as pw_manager

import sys as _sys, pathlib as _pathlib  # kept as written but for this line: the

_sys.path.insert(0, str(_pathlib.Path(__file__).parent))  # tester's helper sits beside it
import jobutil


class Prefetcher:
    def __init__(self, iterator, depth=3):
        self._it = iterator
        self._q = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, name="prefetch", daemon=True)
        self._thread.start()

    def _fill(self):
        while not self._stop.is_set():
            try:
                item = (next(self._it), self._it.get_state())
            except StopIteration:
                item = None
            while not self._stop.is_set():
                try:
                    self._q.put(item, timeout=0.05)
                    break
                except queue.Full:
                    continue
            if item is None:
                return

    def batches(self):
        while True:
            item = self._q.get()
            if item is None:
                return
            yield item

    def close(self):
        self._stop.set()
        while True:
            try:
                self._q.get_nowait()
            except queue.Empty:
                break
        self._thread.join(timeout=10)


TX = optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.05, momentum=0.8))


@jax.jit
def sgd_step(state, x, y):
    def loss(p):
        return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

    g = jax.grad(loss)(state["params"])
    upd, opt = TX.update(g, state["opt"], state["params"])
    return {"params": optax.apply_updates(state["params"], upd), "opt": opt}


def main(devices=None, checkpoint_dir=None, steps=30, every=4, global_batch=12):
    manager = pw_manager.Manager(devices)
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    preempt = jobutil.PreemptionCheckpoint(checkpoint_dir)

    @manager.elastic_retry(
        minimum_slice_count=1, poll_interval=1, retry_policy=pw_manager.ElasticRetryLimit(12)
    )
    def attempt():
        mesh = jobutil.active_mesh(manager)
        rep, shard = jobutil.replicated(mesh), jobutil.batch_sharding(mesh)
        p0 = {"w": np.zeros((jobutil.FEATURES,), np.float32), "b": np.zeros((), np.float32)}
        state = jax.device_put({"params": p0, "opt": TX.init(p0)}, rep)
        source = gex.ElasticIterator(
            jobutil.source_dataset(), global_batch, grain.sharding.ShardOptions(0, 1)
        )
        step = 0
        if snapshotter.latest is not None:
            snapshotter.join()
            r = snapshotter.load(
                {"state": jobutil.abstract_like(state), "step": 0, "pos": source.get_state()}
            )
            state, step = r["state"], int(r["step"]) + 1
            source.set_state(r["pos"])
        elif preempt.available():
            state, last, pos = preempt.restore(jobutil.abstract_like(state))
            source.set_state(pos)
            step = last + 1

        pf = Prefetcher(source)
        try:
            batches = pf.batches()
            while step < steps:
                batch, pos_after = next(batches)
                state = sgd_step(
                    state, jax.device_put(batch["x"], shard), jax.device_put(batch["y"], shard)
                )
                if step % every == 0:
                    snapshotter.save(step, {"state": state, "step": step, "pos": pos_after})
                if preempt.requested:
                    preempt.save(step, state, pos_after)
                    return None
                if manager.available_inactive_slices:
                    manager.active_slice_indices |= manager.available_inactive_slices
                    mesh = jobutil.active_mesh(manager)
                    rep, shard = jobutil.replicated(mesh), jobutil.batch_sharding(mesh)
                    state = jax.device_put(state, rep)
                step += 1
            return state
        finally:
            pf.close()

    out = attempt()
    snapshotter.join()
    preempt.close()
    return out
