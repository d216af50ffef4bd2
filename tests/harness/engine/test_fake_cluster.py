"""The fake cluster against the real pathwaysutils code: what a lost slice looks like."""

from __future__ import annotations

import time

import numpy as np
import pytest

from pathways_chaos.harness.engine.fake_cluster import SliceState
from pathways_chaos.harness.errors import ChaosConfigError


def _manager(fake):
    from pathwaysutils.elastic import manager

    return manager.Manager(fake.devices)


def test_seams_are_removed_on_exit_even_after_an_error(fake_cluster_factory):
    from pathwaysutils.elastic import elastic, manager

    before = (
        elastic.get_slice_to_devices,
        elastic.DefaultSliceHealthChecker._simple_execution,
        elastic.time,
        manager.threading,
    )
    with pytest.raises(KeyError), fake_cluster_factory(4, 2):
        assert elastic.get_slice_to_devices is not before[0]
        assert elastic.time is not before[2]
        raise KeyError("boom")
    after = (
        elastic.get_slice_to_devices,
        elastic.DefaultSliceHealthChecker._simple_execution,
        elastic.time,
        manager.threading,
    )
    assert after == before


def test_real_clock_leaves_time_alone(fake_cluster_factory):
    import time as real_time

    from pathwaysutils.elastic import elastic

    with fake_cluster_factory(4, 2, clock="real"):
        assert elastic.time is real_time


def test_a_second_fake_cluster_cannot_stack(fake_cluster, fake_cluster_factory):
    with pytest.raises(RuntimeError, match="already patched"):
        fake_cluster_factory(2, 2).start()


def test_the_real_manager_sees_the_slices(fake_cluster):
    m = _manager(fake_cluster)
    assert m.all_slice_indices == frozenset({0, 1, 2, 3})
    assert m.active_slice_indices == frozenset({0, 1, 2, 3})
    assert [d.id for d in m.slice_to_devices[2]] == [4, 5]


def test_a_lost_slice_fails_its_health_check_and_loses_its_arrays(fake_cluster):
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    from pathwaysutils.elastic import elastic

    devices = fake_cluster.devices
    everywhere = jax.device_put(
        np.arange(8.0), NamedSharding(Mesh(np.array(devices), ("d",)), PartitionSpec())
    )
    elsewhere = jax.device_put(np.arange(4.0), devices[0])
    dead = {d.id for d in fake_cluster.slice_devices(2)}
    # Earlier episodes in this process may have left arrays (a Snapshotter's last snapshot).
    on_slice = sum(1 for a in jax.live_arrays() if dead & {d.id for d in a.devices()})
    touched = fake_cluster.lose_slice(2)

    assert touched == [f"slice 2: down (DATA_LOSS), {on_slice} live arrays deleted"]
    assert everywhere.is_deleted() and not elsewhere.is_deleted()
    assert elastic.get_active_slice_indices(_manager_slices(fake_cluster)) == frozenset({0, 1, 3})
    with pytest.raises(jax.errors.JaxRuntimeError) as info:
        fake_cluster.check_access([0, 2])
    assert elastic.is_error_due_to_slice_down(info.value)
    fake_cluster.check_access([0, 1, 3])  # the survivors are fine


def test_a_lost_slice_frees_only_its_own_buffers_not_a_survivors_it_shared(fake_cluster):
    """``device_put`` of a one-device array onto a mesh keeps that array's buffer for its
    device. Deleting the whole replicated array on a loss freed it, so a correct loop that
    placed its init params (``nnx.split``, on device 0) again in the next attempt crashed with
    "Array has been deleted" (a blind tester's flax nnx loop), where Pathways keeps them."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = fake_cluster.devices
    init = jax.numpy.arange(8.0)  # as nnx.split leaves params: on device 0, uncommitted
    mesh = NamedSharding(Mesh(np.array(devices), ("d",)), PartitionSpec())
    placed = jax.device_put(init, mesh)
    fake_cluster.lose_slice(2)

    assert placed.is_deleted() and not init.is_deleted()
    assert float(init.sum()) == 28.0
    with pytest.raises(jax.errors.JaxRuntimeError, match="DATA_LOSS"):
        np.asarray(placed)  # the lost slice's array fails at use as Pathways says


def _manager_slices(fake):
    return {s: fake.slice_devices(s) for s in range(fake.num_slices)}


@pytest.mark.parametrize("code", ["DATA_LOSS", "DEADLINE_EXCEEDED", "NOT_FOUND", "INTERNAL"])
def test_every_slice_down_code_is_recognised_by_pathwaysutils(fake_cluster, code):
    import jax
    from pathwaysutils.elastic import elastic

    fake_cluster.lose_slice(1, code)
    with pytest.raises(jax.errors.JaxRuntimeError, match=code) as info:
        fake_cluster.check_access([1])
    assert elastic.is_error_due_to_slice_down(info.value, log_traceback=False)


def test_a_non_slice_down_code_is_refused_as_a_slice_loss(fake_cluster):
    with pytest.raises(ChaosConfigError, match="not a slice-down error"):
        fake_cluster.lose_slice(1, "INVALID_ARGUMENT")


def test_repair_after_k_polls(fake_cluster):
    from pathwaysutils.elastic import elastic

    fake_cluster.lose_slice(3, repair_after_polls=2)
    slices = _manager_slices(fake_cluster)
    seen = [sorted(elastic.get_active_slice_indices(slices)) for _ in range(3)]
    assert seen == [[0, 1, 2], [0, 1, 2], [0, 1, 2, 3]]
    assert fake_cluster.state(3) is SliceState.REPAIRED


def test_a_timed_repair_is_seen_by_the_first_poll_at_its_time_and_told(fake_cluster):
    """A clean rerun's repair: back for polls from a clock time on, however many polls ran
    before; a slice its polls brought back is told to the repair listeners, once."""
    from pathwaysutils.elastic import elastic

    told: list[int] = []
    fake_cluster.add_repair_listener(told.append)
    fake_cluster.lose_slice(3)
    fake_cluster.repair_slice_after(3, 2.0)
    slices = _manager_slices(fake_cluster)
    seen = [sorted(elastic.get_active_slice_indices(slices)) for _ in range(4)]
    fake_cluster.clock.advance(2.0)
    seen.append(sorted(elastic.get_active_slice_indices(slices)))
    seen.append(sorted(elastic.get_active_slice_indices(slices)))
    fake_cluster.remove_repair_listener(told.append)
    assert seen == [[0, 1, 2]] * 4 + [[0, 1, 2, 3]] * 2
    assert told == [3]


def test_wait_for_slices_times_out_on_the_fake_clock_without_real_waiting(fake_cluster):
    from pathwaysutils.elastic import elastic

    fake_cluster.lose_slice(0)
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError, match="Only 3 active"):
        elastic.wait_for_slices(
            4, poll_interval=10, timeout=60, slice_to_devices=_manager_slices(fake_cluster)
        )
    assert fake_cluster.clock.time() >= 50  # five polls of ten fake seconds
    assert time.perf_counter() - t0 < 10


def test_slow_slice_health_check_times_out(fake_cluster):
    from pathwaysutils.elastic import elastic

    fake_cluster.slow_health(1, 30.0)
    active = elastic.get_active_slice_indices(_manager_slices(fake_cluster))
    assert active == frozenset({0, 2, 3})
    assert fake_cluster.clock.time() == 30.0


def test_unknown_slice_is_refused(fake_cluster):
    with pytest.raises(ChaosConfigError, match=r"use 0\.\.3"):
        fake_cluster.lose_slice(7)


def test_leaving_the_cluster_brings_every_slice_back(fake_cluster_factory):
    fake = fake_cluster_factory(4, 2)
    with fake:
        fake.lose_slice(1)
    assert fake.states() == {i: SliceState.UP for i in range(4)}
