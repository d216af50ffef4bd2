"""The JAX device-loss seam: after a slice is lost, any code touching its devices sees the
slice-down ``JaxRuntimeError`` Pathways gives, so the real ``elastic_retry`` retries it.

If a JAX upgrade moves a private name this seam replaces, ``test_the_seam_targets_exist``
fails first and names it.
"""

from __future__ import annotations

import numpy as np
import pytest


def test_the_seam_targets_exist():
    from pathways_chaos.harness.engine.seams import missing_device_loss_targets

    missing = missing_device_loss_targets()
    assert not missing, (
        "the JAX device-loss seam (harness/engine/seams.py JaxDeviceLossSeam) lost its targets "
        f"in this JAX: {missing}; find where the array access check moved and update "
        "DEVICE_LOSS_TARGETS"
    )


def test_the_seam_is_undone_on_exit(fake_cluster_factory):
    import jax
    from jax._src import array
    from jax._src.interpreters import pxla

    before = (
        array.ArrayImpl._check_if_deleted,
        array.ArrayImpl.block_until_ready,
        pxla.shard_args,
        pxla.ExecuteReplicated.__call__,
        jax.block_until_ready,
    )
    with pytest.raises(KeyError), fake_cluster_factory(4, 2):
        assert array.ArrayImpl._check_if_deleted is not before[0]
        assert pxla.shard_args is not before[2]
        raise KeyError("boom")
    after = (
        array.ArrayImpl._check_if_deleted,
        array.ArrayImpl.block_until_ready,
        pxla.shard_args,
        pxla.ExecuteReplicated.__call__,
        jax.block_until_ready,
    )
    assert after == before


def _mesh(devices):
    import jax

    return jax.sharding.Mesh(np.asarray(devices, dtype=object).reshape(4, 2), ("replica", "data"))


def _operations(mesh):
    """Every way a loop touches a lost slice: name -> (setup before the loss, use after it)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    replicated = NamedSharding(mesh, P())
    sharded = NamedSharding(mesh, P(("replica", "data")))

    def state():
        return jax.device_put(np.ones((8, 4), np.float32), sharded)

    step = jax.jit(lambda x: x * 2, out_shardings=sharded)
    zeros = jax.jit(lambda: jnp.zeros((8,)), out_shardings=replicated)
    total = jax.jit(lambda x: jnp.sum(x), out_shardings=replicated)  # an all-reduce

    def warm(fn):
        def setup():
            x = state()
            fn(x)  # compiled and on JAX's C++ fast path before the loss
            return x

        return setup

    return {
        "jitted call": (warm(step), step),
        "jitted call, fresh function": (state, jax.jit(lambda x: x + 1)),
        "collective (sum over the mesh)": (warm(total), total),
        "jitted call, host data to a cached mesh program": (
            warm(step),
            lambda x: step(np.ones((8, 4), np.float32)),
        ),
        "jitted call, no arguments, output on the mesh": (
            lambda: zeros(),
            lambda x: zeros(),
        ),
        "device_put of host data": (state, lambda x: jax.device_put(np.ones(8), sharded)),
        "device_put of the array elsewhere": (
            state,
            lambda x: jax.device_put(x, mesh.devices.flat[0]),
        ),
        "block_until_ready (method)": (state, lambda x: x.block_until_ready()),
        "jax.block_until_ready of a tree": (
            state,
            lambda x: jax.block_until_ready([x, jnp.ones(3)]),
        ),
        "device_get": (state, jax.device_get),
        "device_get of a pytree": (state, lambda x: jax.device_get({"a": x, "b": [x, x]})),
        "device_put of a pytree": (
            state,
            lambda x: jax.device_put({"a": x, "b": np.ones(8)}, {"a": sharded, "b": sharded}),
        ),
        "make_array_from_callback": (
            state,
            lambda x: jax.make_array_from_callback(
                (8, 4), sharded, lambda index: np.ones((8, 4), np.float32)[index]
            ),
        ),
        "copy_to_host_async": (state, lambda x: x.copy_to_host_async()),
        "jax.copy_to_host_async of a tree": (state, lambda x: jax.copy_to_host_async([x])),
        "addressable_data": (state, lambda x: np.asarray(x.addressable_data(0))),
        "np.asarray": (state, np.asarray),
        "jax.tree.map over arrays": (state, lambda x: jax.tree.map(lambda a: a * 2, {"a": x})),
        "process_allgather": (state, lambda x: _process_allgather(x)),
        "printing an array": (state, lambda x: str(x)),
        "arithmetic": (state, lambda x: x + 1),
    }


def _process_allgather(x):
    from jax.experimental import multihost_utils

    return multihost_utils.process_allgather(x)


@pytest.mark.parametrize("code", ["DATA_LOSS", "DEADLINE_EXCEEDED", "NOT_FOUND", "INTERNAL"])
def test_every_operation_on_a_lost_slice_raises_the_slice_down_error(fake_cluster, code):
    import jax
    from pathwaysutils.elastic import elastic

    mesh = _mesh(fake_cluster.devices)
    ops = _operations(mesh)
    prepared = {name: setup() for name, (setup, _) in ops.items()}
    fake_cluster.lose_slice(2, code)
    wrong = {}
    for name, (_, use) in ops.items():
        try:
            use(prepared[name])
        except Exception as error:
            if not (
                isinstance(error, jax.errors.JaxRuntimeError)
                and str(error).startswith(code)
                and elastic.is_error_due_to_slice_down(error, log_traceback=False)
            ):
                wrong[name] = f"{type(error).__name__}: {str(error)[:80]}"
        else:
            wrong[name] = "no error"
    assert not wrong, wrong


@pytest.mark.parametrize(
    "name",
    [
        "jitted call",
        "collective (sum over the mesh)",
        "device_put of host data",
        "device_get of a pytree",
        "device_put of a pytree",
        "make_array_from_callback",
        "copy_to_host_async",
        "jax.copy_to_host_async of a tree",
        "addressable_data",
        "np.asarray",
        "jax.tree.map over arrays",
        "process_allgather",
        "printing an array",
    ],
)
def test_this_entry_point_on_a_lost_slice_raises_the_retried_error(fake_cluster, name):
    import jax
    from pathwaysutils.elastic import elastic

    setup, use = _operations(_mesh(fake_cluster.devices))[name]
    prepared = setup()
    fake_cluster.lose_slice(2, "DATA_LOSS")
    with pytest.raises(jax.errors.JaxRuntimeError) as caught:
        use(prepared)
    assert str(caught.value).startswith("DATA_LOSS"), caught.value
    assert elastic.is_error_due_to_slice_down(caught.value, log_traceback=False)


def test_the_surviving_slices_and_other_errors_are_untouched(fake_cluster):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    survivors = [d for s in (0, 1, 3) for d in fake_cluster.slice_devices(s)]
    mesh = jax.sharding.Mesh(np.asarray(survivors, dtype=object).reshape(3, 2), ("r", "d"))
    x = jax.device_put(np.ones((6, 2), np.float32), NamedSharding(mesh, P("r")))
    fake_cluster.lose_slice(2)
    assert float(jnp.sum(jax.jit(lambda a: a * 2)(x))) == 24.0
    donated = jax.device_put(np.ones(4), survivors[0])
    donated.delete()  # deleted for another reason than a lost slice: JAX's own error
    with pytest.raises(RuntimeError, match="deleted") as caught:
        np.asarray(donated)
    assert not isinstance(caught.value, jax.errors.JaxRuntimeError)


def test_a_repaired_slice_takes_new_work(fake_cluster):
    import jax

    fake_cluster.lose_slice(2)
    device = fake_cluster.slice_devices(2)[0]
    with pytest.raises(jax.errors.JaxRuntimeError, match="DATA_LOSS"):
        jax.device_put(np.ones(2), device)
    fake_cluster.repair_slice(2)
    assert np.asarray(jax.device_put(np.ones(2), device)).tolist() == [1.0, 1.0]


def test_snapshotter_save_and_load_on_a_lost_slice_raise(fake_cluster):
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    from orbax.checkpoint.experimental.v1.training.pathways import Snapshotter

    mesh = _mesh(fake_cluster.devices)
    state = {"w": jax.device_put(np.arange(8.0, dtype=np.float32), NamedSharding(mesh, P()))}
    snapshotter = Snapshotter(replica_axis_index=0)
    snapshotter.save(0, state)
    snapshotter.join()
    fake_cluster.lose_slice(2, "NOT_FOUND")
    with pytest.raises(jax.errors.JaxRuntimeError, match="NOT_FOUND"):
        snapshotter.save(1, state)
    abstract = {"w": jax.ShapeDtypeStruct((8,), np.float32, sharding=NamedSharding(mesh, P()))}
    with pytest.raises(jax.errors.JaxRuntimeError, match="NOT_FOUND"):
        snapshotter.load(abstract)


def test_a_moved_target_refuses_the_fake_by_name_and_leaves_nothing_patched(
    fake_cluster_factory, monkeypatch
):
    from pathwaysutils.elastic import elastic

    from pathways_chaos.harness.engine import seams

    moved = ("jax._src.array", "ArrayImpl", "_check_if_deleted_moved_in_a_new_jax")
    monkeypatch.setattr(seams, "DEVICE_LOSS_TARGETS", (*seams.DEVICE_LOSS_TARGETS, moved))
    before = elastic.get_slice_to_devices
    with pytest.raises(seams.SeamUnavailableError) as caught:
        fake_cluster_factory(4, 2).start()
    assert "JAX device-loss seam" in str(caught.value)
    assert "ArrayImpl._check_if_deleted_moved_in_a_new_jax" in str(caught.value)
    assert elastic.get_slice_to_devices is before  # the pathwaysutils seams were undone too


def test_an_armed_error_is_raised_once_by_the_next_computation_of_its_thread(fake_cluster):
    """``raise_error`` on a loop: armed at its trigger, raised by the loop's next use of a
    device (a jitted call here), once; another thread does not meet it; an error nothing met
    is taken back (``disarm_error``) so no later run does."""
    import threading

    import jax
    import jax.numpy as jnp

    x = jax.device_put(np.ones(4, np.float32), fake_cluster.slice_devices(0)[0])
    double = jax.jit(lambda a: a * 2)
    assert float(jnp.sum(double(x))) == 8.0  # compiled: the C++ fast path from here on
    fake_cluster.arm_error(lambda: jax.errors.JaxRuntimeError("INVALID_ARGUMENT: armed"))
    other: list[float] = []
    device = fake_cluster.slice_devices(1)[0]
    worker = threading.Thread(
        target=lambda: other.append(float(np.asarray(jax.device_put(np.ones(2), device)).sum()))
    )
    worker.start()
    worker.join()
    assert other == [2.0]  # another thread's use of a device (a monitor's poll): untouched
    with pytest.raises(jax.errors.JaxRuntimeError, match="INVALID_ARGUMENT: armed"):
        double(x)
    assert float(jnp.sum(double(x))) == 8.0  # once
    assert fake_cluster.disarm_error() is False
    fake_cluster.arm_error(lambda: jax.errors.JaxRuntimeError("INVALID_ARGUMENT: unmet"))
    assert fake_cluster.disarm_error() is True
    assert float(jnp.sum(double(x))) == 8.0
