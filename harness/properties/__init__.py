"""The property suites' bodies, parameterised by the trainer (or the user's loop) under test.

suites/properties wraps each in ``@given`` for the reference trainer, or, with ``--chaos-loop``,
for a user's own loop; test_mutants.py runs the same bodies against every broken trainer
and asserts the catalogue's property catches it. Every property raises ``PropertyFailure`` with a
message that names the property, what broke and (for episodes) the replay command that
reproduces it. One module per property (snapshot, dataset, mesh, stateful), the shared
``settings``, the generated slice ``churn``, and ``loop`` (the same properties over a user's
loop); this package re-exports their public names.
"""

from __future__ import annotations

from pathways_chaos.harness.properties.churn import recompiles, slice_churn
from pathways_chaos.harness.properties.dataset import (
    IteratorPhase,
    check_dataset_episode,
    check_iterator_continuity,
    compare_ids,
    dataset_specs,
    iterator_runs,
)
from pathways_chaos.harness.properties.episode_spec import REFERENCE_TRAINER, run_spec
from pathways_chaos.harness.properties.mesh import check_mesh_episode, mesh_specs
from pathways_chaos.harness.properties.runner import run_property
from pathways_chaos.harness.properties.settings import (
    LOSS_KINDS,
    REJOIN_MARGIN,
    REPAIR_SAME_STEP,
    ExampleCounter,
    PropertyFailure,
    available_devices,
    enable_compilation_cache,
    fail,
    mutant_search,
    share_of_profile,
    trainer_under_test,
)
from pathways_chaos.harness.properties.snapshot import (
    SNAPSHOT_DTYPES,
    KeyLeaf,
    SnapshotCase,
    check_save_in_flight,
    check_snapshot_round_trip,
    snapshot_cases,
    snapshot_trees,
)
from pathways_chaos.harness.properties.stateful import (
    ENDINGS,
    FEATURES,
    SCENARIOS,
    STATEFUL_MAX_ATTEMPTS,
    STATEFUL_MAX_FAULTS,
    STATEFUL_POLL_INTERVAL,
    STATEFUL_SLICES,
    STATEFUL_STEPS,
    episode_features,
    episode_machine,
    note_features,
)

__all__ = [
    "ENDINGS",
    "FEATURES",
    "LOSS_KINDS",
    "REFERENCE_TRAINER",
    "REJOIN_MARGIN",
    "REPAIR_SAME_STEP",
    "SCENARIOS",
    "SNAPSHOT_DTYPES",
    "STATEFUL_MAX_ATTEMPTS",
    "STATEFUL_MAX_FAULTS",
    "STATEFUL_POLL_INTERVAL",
    "STATEFUL_SLICES",
    "STATEFUL_STEPS",
    "ExampleCounter",
    "IteratorPhase",
    "KeyLeaf",
    "PropertyFailure",
    "SnapshotCase",
    "available_devices",
    "check_dataset_episode",
    "check_iterator_continuity",
    "check_mesh_episode",
    "check_save_in_flight",
    "check_snapshot_round_trip",
    "compare_ids",
    "dataset_specs",
    "enable_compilation_cache",
    "episode_features",
    "episode_machine",
    "fail",
    "iterator_runs",
    "mesh_specs",
    "mutant_search",
    "note_features",
    "recompiles",
    "run_property",
    "run_spec",
    "share_of_profile",
    "slice_churn",
    "snapshot_cases",
    "snapshot_trees",
    "trainer_under_test",
]
