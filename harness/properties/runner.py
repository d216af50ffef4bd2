"""One property suite, by name, against one trainer (the mutant table and the bench)."""

from __future__ import annotations

from typing import Any

from pathways_chaos.harness.properties.dataset import check_dataset_episode, dataset_specs
from pathways_chaos.harness.properties.episode_spec import EpisodeSpec
from pathways_chaos.harness.properties.mesh import check_mesh_episode, mesh_specs
from pathways_chaos.harness.properties.settings import ExampleCounter, available_devices
from pathways_chaos.harness.properties.snapshot import (
    SnapshotCase,
    check_snapshot_round_trip,
    snapshot_cases,
)
from pathways_chaos.harness.properties.stateful import episode_machine


def run_property(caught_by: str, trainer: str, counter: ExampleCounter, settings: Any) -> None:
    """Runs the property suite ``caught_by`` (snapshot, dataset, mesh or stateful) on
    ``trainer`` under ``settings``; raises the first ``PropertyFailure``."""
    from hypothesis import given
    from hypothesis.stateful import run_state_machine_as_test

    devices = available_devices()
    if caught_by == "snapshot":

        @settings
        @given(case=snapshot_cases(max_devices=devices))
        def snapshot(case: SnapshotCase) -> None:
            counter.run(lambda: check_snapshot_round_trip(case, trainer))

        snapshot()
    elif caught_by == "dataset":

        @settings
        @given(spec=dataset_specs(max_devices=devices, trainer=trainer))
        def dataset(spec: EpisodeSpec) -> None:
            counter.run(lambda: check_dataset_episode(spec, counter))

        dataset()
    elif caught_by == "mesh":

        @settings
        @given(spec=mesh_specs(max_devices=devices, trainer=trainer))
        def mesh(spec: EpisodeSpec) -> None:
            counter.run(lambda: check_mesh_episode(spec, counter))

        mesh()
    elif caught_by == "stateful":
        run_state_machine_as_test(episode_machine(trainer, counter), settings=settings)
    else:
        raise ValueError(f"no property suite {caught_by!r}: snapshot, dataset, mesh or stateful")
