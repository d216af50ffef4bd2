"""BROKEN: after a snapshot restore it draws one batch to warm up/compile the step for the
new mesh and throws it away, so that batch's samples are never trained.

Pause-and-resume mode (waits for every slice), fixed global batch, returns None: the result is
the final checkpoint (``ocp.v1.save_pytree``) in ``checkpoint_dir``; SIGTERM checkpoints and
stops, the next run resumes from the newest checkpoint.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

D_IN, D_HID = 12, 64


def sample(i: int) -> dict[str, Any]:
    x = np.cos(np.arange(1, D_IN + 1, dtype=np.float32) * (0.05 * i + 0.3)).astype(np.float32)
    return {"id": np.int64(i), "x": x, "y": np.float32(np.sin(x.sum()))}


def init() -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    k = jax.random.split(jax.random.key(3), 2)
    params = {
        "a": jax.random.normal(k[0], (D_IN, D_HID), jnp.float32) * 0.3,
        "c": jnp.zeros((D_HID,), jnp.float32),
        "b": jax.random.normal(k[1], (D_HID, 1), jnp.float32) * 0.3,
    }
    return {"params": params, "m": jax.tree.map(jnp.zeros_like, params)}


def step_fn(state: Any, x: Any, y: Any) -> Any:
    import jax
    import jax.numpy as jnp

    def loss(p: Any) -> Any:
        return jnp.mean(((jnp.tanh(x @ p["a"] + p["c"]) @ p["b"])[:, 0] - y) ** 2)

    g = jax.grad(loss)(state["params"])
    m = jax.tree.map(lambda m, g: 0.8 * m + g, state["m"], g)
    return {"params": jax.tree.map(lambda p, m: p - 0.04 * m, state["params"], m), "m": m}


class Job:
    def __init__(self, devices: Any, checkpoint_dir: Any, steps: int, batch: int, every: int):
        import grain
        from orbax.checkpoint import v1 as ocp
        from pathwaysutils.elastic import manager as elastic

        self.mgr = elastic.Manager(devices)
        self.snap = ocp.training.pathways.Snapshotter(replica_axis_index=0)
        self.per_slice = len(self.mgr.slice_to_devices[0])
        self.ds = grain.MapDataset.range(10_000).map(lambda i: sample(int(i)))
        self.root = None if checkpoint_dir is None else Path(checkpoint_dir)
        self.steps, self.batch, self.every = steps, batch, every
        self.term = threading.Event()

    # -- setup for the current slices --------------------------------------------------------
    def build(self) -> None:
        import grain
        import jax
        from grain.experimental import ElasticIterator
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        devs = [
            d for s in sorted(self.mgr.active_slice_indices) for d in self.mgr.slice_to_devices[s]
        ]
        self.mesh = jax.sharding.Mesh(
            np.asarray(devs, dtype=object).reshape(-1, self.per_slice), ("replica", "model")
        )
        ps = {"a": P(None, "model"), "c": P("model"), "b": P("model", None)}
        sh = {k: NamedSharding(self.mesh, v) for k, v in ps.items()}
        self.shardings = {"params": sh, "m": dict(sh)}
        self.abstract = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
            jax.eval_shape(init),
            self.shardings,
        )
        self.train = jax.jit(step_fn, out_shardings=self.shardings)
        self.it = ElasticIterator(self.ds, self.batch, grain.sharding.NoSharding())
        self.data_sh = NamedSharding(self.mesh, P("replica"))

    def put(self, b: dict[str, Any]) -> tuple[Any, Any]:
        import jax

        return jax.device_put(b["x"], self.data_sh), jax.device_put(b["y"], self.data_sh)

    def newest(self) -> Path | None:
        if self.root is None or not self.root.is_dir():
            return None
        cands = sorted(p for p in self.root.iterdir() if p.name.startswith("ckpt-"))
        return cands[-1] if cands else None

    def save(self, step: int, state: Any) -> None:
        from orbax.checkpoint import v1 as ocp

        if self.root is None:
            raise RuntimeError("no checkpoint_dir")
        ocp.save_pytree(
            self.root / f"ckpt-{step:06d}",
            {"state": state, "step": step, "it": self.it.get_state()},
            overwrite=True,
        )

    # -- one elastic attempt -----------------------------------------------------------------
    def attempt(self) -> None:
        import jax
        from orbax.checkpoint import v1 as ocp

        self.build()
        template = {"state": self.abstract, "step": 0, "it": self.it.get_state()}
        ck = self.newest()
        if self.snap.latest is not None:
            self.snap.join()
            got = self.snap.load(template)
            self.it.set_state(got["it"])
            state, step = got["state"], int(got["step"]) + 1
            # new mesh: compile the step before resuming so the first real step is fast
            warm = next(self.it)
            self.train.lower(state, *self.put(warm)).compile()
        elif ck is not None:
            got = ocp.load_pytree(ck, template)
            self.it.set_state(got["it"])
            state, step = got["state"], int(got["step"]) + 1
        else:
            state, step = jax.device_put(init(), self.shardings), 0

        while step < self.steps:
            state = self.train(state, *self.put(next(self.it)))
            if step % self.every == 0:
                self.snap.save(step, {"state": state, "step": step, "it": self.it.get_state()})
            if self.term.is_set():
                self.save(step, state)
                log.warning("SIGTERM: checkpointed step %d, exiting", step)
                return
            step += 1
        if step == self.steps and self.root is not None:
            self.save(self.steps - 1, state)
            log.info("training finished, final checkpoint written")


def main(
    *,
    devices: Any = None,
    checkpoint_dir: Any = None,
    steps: int = 26,
    global_batch: int = 16,
    snapshot_every: int = 5,
    **options: Any,
) -> None:
    job = Job(devices, checkpoint_dir, steps, global_batch, snapshot_every)
    prev = None
    if threading.current_thread() is threading.main_thread():
        prev = signal.signal(signal.SIGTERM, lambda *_: job.term.set())
    run = job.mgr.elastic_retry(minimum_slice_count=None, poll_interval=10, timeout=600)(
        job.attempt
    )
    try:
        run()
        job.snap.join()
    finally:
        if prev is not None:
            signal.signal(signal.SIGTERM, prev)
    log.info("job done (pid %d)", os.getpid())
    return None
