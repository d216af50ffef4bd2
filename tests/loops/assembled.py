"""Correct elastic loops assembled from building blocks, for the fuzz of the loop judge.

Each block is a way real loops differ (how they iterate, what the state is, the mesh's axis
names, what the snapshot holds and how often, the recovery mode, whether records carry ids).
Every combination is a correct loop: the judge must PASS it or say why it could not judge,
never fail it and never crash.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

FEATURES = 4


@dataclasses.dataclass(frozen=True)
class Blocks:
    iteration: str = "next"  # next | for | zip | generator
    container: str = "dict"  # dict | tuple | namedtuple | dataclass
    hidden: int = 8
    momentum: bool = True
    axes: tuple[str, str] = ("replica", "model")
    snapshot_key: str = "state"
    every: int = 4
    mode: str = "resize"  # resize | pause_resume
    batch: str = "fixed"  # fixed | scaled
    ids: bool = True
    steps: int = 16


class Pair(NamedTuple):
    params: Any
    momentum: Any


@dataclasses.dataclass
class Holder:
    params: Any
    momentum: Any


def _register() -> None:
    import jax

    with contextlib.suppress(ValueError):  # registered already
        jax.tree_util.register_dataclass(Holder, data_fields=["params", "momentum"], meta_fields=[])


def _record(i: int, ids: bool) -> dict[str, Any]:
    phase = np.arange(1, FEATURES + 1, dtype=np.float64)
    x = np.sin(i * 0.29 * phase).astype(np.float32)
    out = {"x": x, "y": np.float32(np.cos(x.sum()))}
    if ids:
        out["id"] = np.int64(i)
    return out


def _wrap(b: Blocks, params: Any, momentum: Any) -> Any:
    return {
        "dict": lambda: {"params": params, "momentum": momentum},
        "tuple": lambda: (params, momentum),
        "namedtuple": lambda: Pair(params, momentum),
        "dataclass": lambda: Holder(params, momentum),
    }[b.container]()


def _unwrap(b: Blocks, state: Any) -> tuple[Any, Any]:
    if b.container == "dict":
        return state["params"], state["momentum"]
    if b.container == "tuple":
        return state[0], state[1]
    return state.params, state.momentum


def run(b: Blocks, *, devices: Any = None) -> Any:
    """The loop these blocks make, as a module-level function (a child process imports it)."""
    return make_loop(b)(devices=devices)


def make_loop(b: Blocks) -> Callable[..., Any]:
    """The loop ``main(devices=...)`` these blocks make."""

    def main(*, devices: Any = None) -> Any:
        import grain
        import jax
        import jax.numpy as jnp
        import orbax.checkpoint as ocp
        from grain.experimental import ElasticIterator
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P
        from pathwaysutils.elastic import manager

        _register()
        mgr = manager.Manager(devices)
        snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
        per_slice = len(mgr.slice_to_devices[0])
        data = grain.MapDataset.range(4096).map(lambda i: _record(int(i), b.ids))
        replica, inner = b.axes

        def init() -> Any:
            k = jax.random.key(3)
            params = {
                "w": jax.random.normal(k, (FEATURES, b.hidden), jnp.float32) * 0.3,
                "v": jnp.ones((b.hidden,), jnp.float32) * 0.1,
            }
            zeros = jax.tree.map(jnp.zeros_like, params) if b.momentum else {}
            return _wrap(b, params, zeros)

        def step(state: Any, x: Any, y: Any) -> Any:
            params, momentum = _unwrap(b, state)

            def loss(p: Any) -> Any:
                return jnp.mean((jnp.tanh(x @ p["w"]) @ p["v"] - y) ** 2)

            g = jax.grad(loss)(params)
            if b.momentum:
                momentum = jax.tree.map(lambda m, d: 0.9 * m + d, momentum, g)
                params = jax.tree.map(lambda p, m: p - 0.05 * m, params, momentum)
            else:
                params = jax.tree.map(lambda p, d: p - 0.05 * d, params, g)
            return _wrap(b, params, momentum)

        def batches(it: Any, start: int) -> Iterator[tuple[int, Any]]:
            if b.iteration == "next":
                s = start
                while s < b.steps:
                    yield s, next(it)
                    s += 1
            elif b.iteration == "for":
                s = start
                for batch in it:
                    if s >= b.steps:
                        return
                    yield s, batch
                    s += 1
            elif b.iteration == "zip":
                yield from zip(range(start, b.steps), it, strict=False)
            else:

                def gen() -> Iterator[Any]:
                    while True:
                        yield next(it)

                yield from zip(range(start, b.steps), gen(), strict=False)

        @mgr.elastic_retry(
            minimum_slice_count=1 if b.mode == "resize" else None, poll_interval=5, timeout=300
        )
        def attempt() -> Any:
            devs = [d for s in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[s]]
            mesh = jax.sharding.Mesh(
                np.asarray(devs, dtype=object).reshape(-1, per_slice), (replica, inner)
            )
            rep = NamedSharding(mesh, P())
            size = 16 if b.batch == "fixed" else 4 * mgr.active_slice_count
            it = ElasticIterator(data, size, grain.sharding.NoSharding())
            abstract = jax.tree.map(
                lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep),
                jax.eval_shape(init),
            )
            train = jax.jit(step, out_shardings=rep)
            if snapshotter.latest is not None:
                snapshotter.join()
                saved = snapshotter.load({b.snapshot_key: abstract, "at": 0, "it": it.get_state()})
                state, start = saved[b.snapshot_key], int(saved["at"]) + 1
                it.set_state(saved["it"])
            else:
                state, start = jax.device_put(init(), rep), 0
            spec = P(replica) if size % mesh.shape[replica] == 0 else P()
            for s, batch in batches(it, start):
                x = jax.device_put(batch["x"], NamedSharding(mesh, spec))
                y = jax.device_put(batch["y"], NamedSharding(mesh, spec))
                state = train(state, x, y)
                if s % b.every == 0:
                    snapshotter.save(s, {b.snapshot_key: state, "at": s, "it": it.get_state()})
            return state

        state = attempt()
        snapshotter.join()
        return jax.device_get(state)

    main.__qualname__ = f"assembled[{b}]"
    return main
