"""The MTC client seams: what they change while installed, and that they leave nothing behind."""

from __future__ import annotations

import pytest

from pathways_chaos.harness.mtc.cluster import MtcCluster


def _watched():
    from jax.experimental.colocated_python import serialization as cp_serialization
    from orbax.checkpoint._src.multihost import colocated_transport, multihost, pathways
    from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import initialization

    return {
        "group_devices_by_worker": pathways.group_devices_by_worker,
        "colocated_python": initialization.colocated_python,
        "epath": initialization.epath,
        "time": initialization.time,
        "reduce_mesh": cp_serialization._reduce_mesh,
        "patch_installed": colocated_transport._PATHWAYS_SERIALIZATION_PATCH_INSTALLED,
        "runtime_active": multihost._PATHWAYS_COLOCATED_RUNTIME_ACTIVE,
    }


def test_an_mtc_episode_leaves_orbax_and_jax_as_it_found_them(mtc_episode_once):
    before, inside, after = mtc_episode_once
    assert after == before
    assert inside["group_devices_by_worker"] is not before["group_devices_by_worker"]


def test_each_fake_host_is_one_pathways_worker(fake_cluster_factory):
    from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import pathways_topology

    with fake_cluster_factory(4, 2) as fake, MtcCluster(fake) as cluster:
        topology = pathways_topology.Topology.from_devices(cluster.devices)
        assert [w.key for w in topology.workers] == [(0, 0), (0, 1), (0, 2), (0, 3)]
        assert topology.peer_ranks_by_worker_rank(4)[1] == (0, 2, 3)
        assert cluster.table.resolve("/mtc/ramdisk/x", 2) == cluster.tiers.ramdisk(2) / "x"
        assert str(cluster.table.resolve("/elsewhere/x", 2)) == "/elsewhere/x"


def test_the_colocated_manager_refuses_cpu_which_is_why_the_dispatch_is_emulated(
    fake_cluster_factory,
):
    import jax
    import numpy as np
    from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import (
        replicator_checkpoint_manager as rcm,
    )

    with fake_cluster_factory(4, 2) as fake:
        mesh = jax.sharding.Mesh(np.asarray(fake.devices).reshape(4, 2), ("replica", "data"))
        with pytest.raises(ValueError, match="requires a Pathways backend"):
            rcm.ReplicatorCheckpointManager(
                "/tmp/never-used",  # type: ignore[arg-type]
                rcm.ReplicatorCheckpointManagerOptions(use_colocated_python=True),
                global_mesh=mesh,
            )


@pytest.fixture
def mtc_episode_once(fake_cluster_factory):
    from pathways_chaos.harness.mtc.episode import run_mtc_episode
    from pathways_chaos.harness.reference.trainer import TrainerConfig

    before = _watched()
    with fake_cluster_factory(4, 2) as fake, MtcCluster(fake) as cluster:
        inside = _watched()
        out = run_mtc_episode(cluster, TrainerConfig(mode="pause_resume", final_step=6))
        assert out.error is None
    return before, inside, _watched()
