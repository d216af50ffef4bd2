"""Snapshot round-trip: load(save(x)) is x bitwise after losing any replicas but one."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pathways_chaos.harness import properties
from pathways_chaos.harness.properties import PropertyFailure


@properties.share_of_profile(4)  # no episode: a save and a load, ~30 ms
@given(data=st.data())
def test_snapshot_round_trip_after_losing_replicas(
    chaos_trainer: str, max_devices: int, data: st.DataObject
) -> None:
    case = data.draw(properties.snapshot_cases(max_devices=max_devices))  # larger: --fake-slices
    properties.check_snapshot_round_trip(case, chaos_trainer)


@properties.share_of_profile(0.5)
@given(
    saves=st.lists(st.tuples(st.integers(0, 100), st.booleans()), min_size=1, max_size=6).map(
        lambda xs: [(i * 101 + step, join) for i, (step, join) in enumerate(xs)]
    )
)
def test_a_save_while_one_is_in_flight_is_skipped_and_latest_stays_right(
    saves: list[tuple[int, bool]],
) -> None:
    properties.check_save_in_flight(saves)


def test_every_replica_lost_is_a_clear_error() -> None:
    case = properties.SnapshotCase({"w": __import__("numpy").ones(3, "float32")}, 2, 2, (0, 1))
    properties.check_snapshot_round_trip(case)  # raises unless SnapshotLostError names step 7


def test_a_leaf_sharded_along_the_replica_axis_is_reported_by_name() -> None:
    """Alone, the Snapshotter returns a wrong shape silently (orbax 0.12.8); the harness says so."""
    import jax
    import numpy as np

    from pathways_chaos.harness.judging.snapshot_checks import (
        SnapshotShardingError,
        check_replicated_along_replica_axis,
    )

    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:8]).reshape(4, 2), ("replica", "data"))
    P = jax.sharding.PartitionSpec
    good = jax.sharding.NamedSharding(mesh, P(None, "data"))
    bad = jax.sharding.NamedSharding(mesh, P("replica"))
    tree = {
        "ok": jax.ShapeDtypeStruct((4, 2), "float32", sharding=good),
        "layers": [jax.ShapeDtypeStruct((8,), "float32", sharding=bad)],
    }
    with pytest.raises(SnapshotShardingError, match=r"leaf \['layers'\]\[0\].*replica axis"):
        check_replicated_along_replica_axis(tree, mesh)
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    with pytest.raises(SnapshotShardingError, match=r"leaf \['x'\] is not on every replica"):
        check_replicated_along_replica_axis(
            {"x": jax.ShapeDtypeStruct((2,), "int32", sharding=one)}, mesh
        )
    check_replicated_along_replica_axis({"ok": tree["ok"], "step": 3}, mesh)


def test_the_round_trip_property_catches_a_replica_sharded_trainer() -> None:
    case = properties.SnapshotCase({"w": __import__("numpy").ones(4, "float32")}, 2, 1, (1,))
    mutant = "pathways_chaos.harness.reference.mutants:StateShardedAlongReplicaAxis"
    with pytest.raises(PropertyFailure, match=r"leaf \['w'\].*sharded along the replica axis"):
        properties.check_snapshot_round_trip(case, trainer=mutant)
