"""The snapshot round-trip property asks a trainer the toolkit did not write how it shards its
state in a child process: the property still catches a replica-sharded state, a raising
``state_sharding`` fails the property with its own words, and pytest never imports the class."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from pathways_chaos.harness import properties
from pathways_chaos.harness.properties import PropertyFailure, trainer_sharding
from pathways_chaos.harness.properties.trainer_sharding import partition_spec_of

HOSTILE = Path(__file__).parents[2] / "trainers" / "hostile.py"


def test_a_users_replica_sharded_trainer_fails_the_round_trip_from_its_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pids = tmp_path / "pids.txt"
    monkeypatch.setenv("TRAINER_PID_FILE", str(pids))
    trainer_sharding._asked.cache_clear()
    case = properties.SnapshotCase({"w": np.ones(4, "float32")}, 2, 1, (1,))
    loaded_before = set(sys.modules)

    with pytest.raises(PropertyFailure, match=r"leaf \['w'\].*sharded along the replica axis"):
        properties.check_snapshot_round_trip(case, trainer=f"{HOSTILE}:ShardsStateAlongReplicas")

    asked = pids.read_text().split()
    assert len(asked) == 1 and str(os.getpid()) not in asked
    assert not any("hostile" in name for name in set(sys.modules) - loaded_before)


def test_a_raising_state_sharding_fails_the_property_with_its_words() -> None:
    case = properties.SnapshotCase({"w": np.ones(4, "float32")}, 2, 1, (1,))

    with pytest.raises(PropertyFailure, match=r"FileNotFoundError: sharding\.yaml"):
        properties.check_snapshot_round_trip(case, trainer=f"{HOSTILE}:ShardingRaises")


def test_the_spec_is_asked_once_per_mesh_shape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pids = tmp_path / "pids.txt"
    monkeypatch.setenv("TRAINER_PID_FILE", str(pids))
    trainer_sharding._asked.cache_clear()
    spec = f"{HOSTILE}:ShardsStateAlongReplicas"
    for _ in range(3):
        assert tuple(partition_spec_of(spec, 2, 2)) == ("replica",)
    assert len(pids.read_text().split()) == 1


def test_a_correct_users_trainer_passes_the_round_trip_onto_the_survivors() -> None:
    """The survivors' mesh (3 slices of 4 lost to 1, then loaded on 3) is a second shape."""
    case = properties.SnapshotCase({"w": np.arange(8, dtype="float32")}, 4, 2, (2,))

    properties.check_snapshot_round_trip(case, trainer=f"{HOSTILE}:RecordsItsProcessPerRun")
