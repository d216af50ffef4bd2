# ruff: noqa
"""Small utilities shared by the blind11 jobs (like a job's own utils module).

Nothing here is from pathways-chaos: only jax / numpy / grain / orbax.
"""

import os
import signal

import grain
import jax
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

FEATURES = 8
NUM_RECORDS = 4096


def record(i):
    """One deterministic record: features and a target computed from its id."""
    i = int(i)
    rng = np.random.default_rng(i)
    x = rng.standard_normal(FEATURES).astype(np.float32)
    w_true = np.linspace(-1.0, 1.0, FEATURES, dtype=np.float32)
    y = np.float32(x @ w_true + 0.1 * np.sin(i))
    return {"id": np.int64(i), "x": x, "y": y}


def source_dataset():
    return grain.MapDataset.range(NUM_RECORDS).map(record)


def active_mesh(manager, axis_names=("replica", "model")):
    """Mesh of the manager's active slices, in slice order."""
    rows = [list(manager.slice_to_devices[i]) for i in sorted(manager.active_slice_indices)]
    return Mesh(np.array(rows, dtype=object), axis_names)


def replicated(mesh):
    return NamedSharding(mesh, P())


def batch_sharding(mesh):
    return NamedSharding(mesh, P("replica"))


def abstract_like(tree):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)


def _is_key(x):
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _unwrap_key(x):
    return jax.random.key_data(x) if _is_key(x) else x


def _abstract_key_data(a):
    if not _is_key(a):
        return a
    data = jax.eval_shape(jax.random.key_data, a)
    return jax.ShapeDtypeStruct(data.shape, data.dtype, sharding=a.sharding)


def _rewrap_key(x, a):
    return jax.random.wrap_key_data(x) if _is_key(a) else x


class PreemptionCheckpoint:
    """On SIGTERM: write a checkpoint to checkpoint_dir and stop; resume from it."""

    def __init__(self, checkpoint_dir):
        self.dir = checkpoint_dir
        self.requested = False
        self._mngr = None
        if checkpoint_dir is not None:
            signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum, frame):
        del signum, frame
        self.requested = True

    @property
    def mngr(self):
        if self._mngr is None:
            self._mngr = ocp.CheckpointManager(
                os.path.join(self.dir, "preempt"),
                options=ocp.CheckpointManagerOptions(max_to_keep=1),
            )
        return self._mngr

    def available(self):
        return self.dir is not None and self.mngr.latest_step() is not None

    def save(self, step, state, data_state):
        state = jax.tree.map(_unwrap_key, state)
        self.mngr.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state),
                meta=ocp.args.JsonSave({"step": int(step), "data": data_state}),
            ),
            force=True,
        )
        self.mngr.wait_until_finished()

    def restore(self, abstract_state):
        step = self.mngr.latest_step()
        keyless = jax.tree.map(_abstract_key_data, abstract_state)
        out = self.mngr.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(keyless),
                meta=ocp.args.JsonRestore(),
            ),
        )
        state = jax.tree.map(_rewrap_key, out["state"], abstract_state)
        return state, out["meta"]["step"], out["meta"]["data"]

    def close(self):
        if self._mngr is not None:
            self._mngr.close()
