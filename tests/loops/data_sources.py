"""One elastic loop (pause-and-resume: it waits for every slice, so the batch schedule never
changes) over three data sources real jobs use instead of grain's ``ElasticIterator``:

- ``dataloader``: a grain ``DataLoader`` (shuffled ``IndexSampler``, ``Batch``), the snapshot
  holding the numeric part of its state (``last_seen_indices``, ``worker_count``);
- ``iter_dataset``: ``MapDataset....to_iter_dataset().batch(...)``, its ``get_state()`` in the
  snapshot;
- ``numpy_generator``: a plain generator of numpy batches, its cursor in the snapshot;
- ``loader_in_generator``: the DataLoader behind the loop's own generator of
  ``(batch, state)`` pairs (each batch must still count once).

``bug`` makes the broken variants: ``"restart"`` opens the data at its start after a restore
(model and step restored), ``"skip"`` resumes one batch past the restored position.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

RECORDS, FEATURES, HIDDEN, BATCH = 4_096, 4, 8, 16


def record(i: int) -> dict[str, Any]:
    x = np.sin(i * 0.37 * np.arange(1, FEATURES + 1)).astype(np.float32)
    return {"id": np.int64(i), "x": x, "y": np.float32(np.tanh(x.sum()))}


class Records:
    """A random-access source for the DataLoader (its repr is checked on ``set_state``)."""

    def __len__(self) -> int:
        return RECORDS

    def __getitem__(self, i: int) -> dict[str, Any]:
        return record(int(i))

    def __repr__(self) -> str:
        return f"Records({RECORDS})"


def numpy_batches(start: int) -> Iterator[dict[str, np.ndarray]]:
    """Consecutive batches of ``BATCH`` records from record ``start`` on."""
    i = start
    while True:
        rows = [record(j) for j in range(i, i + BATCH)]
        yield {k: np.stack([r[k] for r in rows]) for k in ("id", "x", "y")}
        i += BATCH


# Each source: open(saved data state or None, bug) -> (iterator, state_after_last_batch())
Source = Callable[[Any, str], tuple[Iterator[Any], Callable[[], Any]]]


def _dataloader(saved: Any, bug: str) -> tuple[Iterator[Any], Callable[[], Any]]:
    import grain

    loader = grain.DataLoader(
        data_source=Records(),
        sampler=grain.samplers.IndexSampler(RECORDS, shuffle=True, num_epochs=1, seed=3),
        operations=[grain.transforms.Batch(BATCH, drop_remainder=True)],
        worker_count=0,
    )
    it = iter(loader)
    if saved is not None and bug != "restart":
        state = json.loads(it.get_state())
        last = int(saved["last_seen_indices"]["0"]) + (BATCH if bug == "skip" else 0)
        state["last_seen_indices"] = {"0": last}
        it.set_state(json.dumps(state).encode())

    def state_now() -> Any:
        state = json.loads(it.get_state())
        return {"last_seen_indices": state["last_seen_indices"], "worker_count": 0}

    return it, state_now


def _iter_dataset(saved: Any, bug: str) -> tuple[Iterator[Any], Callable[[], Any]]:
    import grain

    ds = grain.MapDataset.range(RECORDS).shuffle(seed=3).map(lambda i: record(int(i)))
    it = iter(ds.to_iter_dataset().batch(BATCH, drop_remainder=True))
    if saved is not None and bug != "restart":
        it.set_state({"next_index": int(saved["next_index"]) + (BATCH if bug == "skip" else 0)})
    return it, it.get_state


def _numpy_generator(saved: Any, bug: str) -> tuple[Iterator[Any], Callable[[], Any]]:
    cursor = [0 if saved is None or bug == "restart" else int(saved["cursor"])]
    if bug == "skip" and saved is not None:
        cursor[0] += BATCH
    stream = numpy_batches(cursor[0])

    def counted() -> Iterator[dict[str, np.ndarray]]:
        for batch in stream:
            cursor[0] = int(batch["id"][-1]) + 1
            yield batch

    return counted(), lambda: {"cursor": cursor[0]}


def _loader_in_generator(saved: Any, bug: str) -> tuple[Iterator[Any], Callable[[], Any]]:
    it, state_now = _dataloader(saved, bug)
    last: list[Any] = [state_now()]

    def pairs() -> Iterator[tuple[dict[str, Any], Any]]:
        for batch in it:
            last[0] = state_now()
            yield {"id": np.asarray(batch["id"]), "x": batch["x"], "y": batch["y"]}, last[0]

    def first(pair: tuple[dict[str, Any], Any]) -> dict[str, Any]:
        return pair[0]

    return map(first, pairs()), lambda: last[0]


def init_state() -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    k1, k2 = jax.random.split(jax.random.key(7))
    return {
        "w1": jax.random.normal(k1, (FEATURES, HIDDEN), jnp.float32) * 0.3,
        "w2": jax.random.normal(k2, (HIDDEN, 1), jnp.float32) * 0.3,
    }


def sgd(params: Any, x: Any, y: Any) -> Any:
    import jax
    import jax.numpy as jnp

    def loss(p: Any) -> Any:
        return jnp.mean(((jnp.tanh(x @ p["w1"]) @ p["w2"])[:, 0] - y) ** 2)

    grads = jax.grad(loss)(params)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)


def train(
    source: Source,
    *,
    devices: Any = None,
    steps: int = 24,
    snapshot_every: int = 4,
    bug: str = "",
    **_: Any,
) -> Any:
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    from orbax.checkpoint import v1 as ocp
    from pathwaysutils.elastic import manager as elastic

    mgr = elastic.Manager(devices)
    snapshotter = ocp.training.pathways.Snapshotter(replica_axis_index=0)
    per_slice = len(mgr.slice_to_devices[0])

    @mgr.elastic_retry(minimum_slice_count=None, poll_interval=10, timeout=300)
    def attempt() -> Any:
        devs = [d for s in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[s]]
        mesh = jax.sharding.Mesh(
            np.array(devs, dtype=object).reshape(-1, per_slice), ("replica", "model")
        )
        shardings = {
            "w1": NamedSharding(mesh, P(None, "model")),
            "w2": NamedSharding(mesh, P("model", None)),
        }
        step_fn = jax.jit(sgd, out_shardings=shardings)
        if snapshotter.latest is not None:
            snapshotter.join()
            abstract = jax.tree.map(
                lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                jax.eval_shape(init_state),
                shardings,
            )
            _, template = source(None, "")
            got = snapshotter.load({"params": abstract, "step": 0, "data": template()})
            params, step = got["params"], int(got["step"]) + 1
            batches, data_state = source(got["data"], bug)
        else:
            params, step = jax.device_put(init_state(), shardings), 0
            batches, data_state = source(None, bug)
        rows = NamedSharding(mesh, P("replica"))
        while step < steps:
            batch = next(batches)
            params = step_fn(
                params, jax.device_put(batch["x"], rows), jax.device_put(batch["y"], rows)
            )
            if step % snapshot_every == 0:
                snapshotter.save(step, {"params": params, "step": step, "data": data_state()})
            step += 1
        return params

    out = attempt()
    snapshotter.join()
    return jax.device_get(out)


def dataloader(**options: Any) -> Any:
    return train(_dataloader, **options)


def iter_dataset(**options: Any) -> Any:
    return train(_iter_dataset, **options)


def numpy_generator(**options: Any) -> Any:
    return train(_numpy_generator, **options)


def loader_in_generator(**options: Any) -> Any:
    return train(_loader_in_generator, **options)
