"""Written blind by a tester (2026-12-06). State is a registered dataclass pytree (TrainState
with w, b, velocity, step), data from a plain python generator yielding dicts with 'ids' (sample
ids), resumable from a cursor. Checkpoints: ocp.StandardCheckpointer to disk every 4 steps, the
cursor saved as an array leaf in the same tree. Pause/resume elastic_retry with a 2-D mesh
(slice, device). SIGTERM: checkpoint immediately, return None."""

import dataclasses
import glob
import os
import signal
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from pathwaysutils.elastic import manager as elastic_manager

D, BATCH, N = 6, 8, 2048


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class TrainState:
    w: jax.Array
    b: jax.Array
    vw: jax.Array
    vb: jax.Array
    step: jax.Array
    cursor: jax.Array  # next sample id to draw


def batches(start):
    rng = np.random.default_rng(7)
    X = rng.uniform(-1, 1, size=(N, D)).astype(np.float32)
    Y = (np.tanh(X[:, 0] * 2) + X[:, 1:].sum(-1) * 0.3).astype(np.float32)
    i = start
    while i + BATCH <= N:
        ids = np.arange(i, i + BATCH)
        yield {"ids": ids, "x": X[ids], "y": Y[ids]}
        i += BATCH


@jax.jit
def step_fn(s: TrainState, x, y):
    def loss(w, b):
        return jnp.mean((x @ w + b - y) ** 2)

    gw, gb = jax.grad(loss, argnums=(0, 1))(s.w, s.b)
    vw = 0.8 * s.vw + gw
    vb = 0.8 * s.vb + gb
    return TrainState(s.w - 0.1 * vw, s.b - 0.1 * vb, vw, vb, s.step + 1, s.cursor + x.shape[0])


def _latest(d):
    steps = [
        int(os.path.basename(p))
        for p in glob.glob(os.path.join(d, "*"))
        if os.path.basename(p).isdigit()
    ]
    return max(steps) if steps else None


def main(devices=None, checkpoint_dir=None, steps=32, every=4, **_):
    root = checkpoint_dir or tempfile.mkdtemp(prefix="loop3-")
    em = elastic_manager.Manager(devices)
    ckptr = ocp.StandardCheckpointer()
    stop = {"term": False}
    prev = signal.signal(signal.SIGTERM, lambda *a: stop.__setitem__("term", True))

    def save(s):
        ckptr.save(os.path.join(root, str(int(s.step))), s, force=True)
        ckptr.wait_until_finished()

    @em.elastic_retry(poll_interval=1)
    def train():
        slices = sorted(em.active_slice_indices)
        mesh = Mesh(np.array([list(em.slice_to_devices[i]) for i in slices]), ("slice", "dev"))
        rep = NamedSharding(mesh, P())
        data_sh = NamedSharding(mesh, P(("slice", "dev")))
        s = jax.device_put(
            TrainState(
                jnp.zeros(D),
                jnp.zeros(()),
                jnp.zeros(D),
                jnp.zeros(()),
                jnp.zeros((), jnp.int32),
                jnp.zeros((), jnp.int32),
            ),
            rep,
        )
        last = _latest(root)
        if last is not None:
            s = ckptr.restore(
                os.path.join(root, str(last)), jax.tree.map(ocp.utils.to_shape_dtype_struct, s)
            )
        for batch in batches(int(s.cursor)):
            if int(s.step) >= steps:
                break
            s = step_fn(s, jax.device_put(batch["x"], data_sh), jax.device_put(batch["y"], data_sh))
            if stop["term"]:
                save(s)
                return None
            if int(s.step) % every == 0:
                save(s)
        return jax.device_get(s)

    try:
        return train()
    finally:
        ckptr.close()
        signal.signal(signal.SIGTERM, prev)
