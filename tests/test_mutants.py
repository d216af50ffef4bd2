"""Every broken trainer in the catalogue is caught, by the property the catalogue names.

Each property runs against the mutant with a fixed seed until it fails (no shrinking, to keep
this fast); the examples it needed go into the README's table. One mutant also goes through
shrinking, and its printed replay command reproduces the failure in-process.
"""

from __future__ import annotations

import shlex

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.stateful import run_state_machine_as_test

from pathways_chaos.harness import properties
from pathways_chaos.harness.properties import ExampleCounter, PropertyFailure
from pathways_chaos.harness.reference.mutants import CATALOGUE, MutantEntry, spec_of

SEARCH = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    phases=(Phase.generate,),
    suppress_health_check=list(HealthCheck),
    stateful_step_count=12,
)


def run_property(entry: MutantEntry, counter: ExampleCounter) -> None:
    trainer = spec_of(entry.trainer)
    devices = properties.available_devices()
    if entry.caught_by == "snapshot":

        @SEARCH
        @given(case=properties.snapshot_cases(max_devices=devices))
        def snapshot(case: properties.SnapshotCase) -> None:
            counter.run(lambda: properties.check_snapshot_round_trip(case, trainer))

        snapshot()
    elif entry.caught_by == "dataset":

        @SEARCH
        @given(spec=properties.dataset_specs(max_devices=devices, trainer=trainer))
        def dataset(spec: properties.EpisodeSpec) -> None:
            counter.run(lambda: properties.check_dataset_episode(spec, counter))

        dataset()
    elif entry.caught_by == "mesh":

        @SEARCH
        @given(spec=properties.mesh_specs(max_devices=devices, trainer=trainer))
        def mesh(spec: properties.EpisodeSpec) -> None:
            counter.run(lambda: properties.check_mesh_episode(spec, counter))

        mesh()
    else:
        machine = properties.episode_machine(trainer, counter)
        run_state_machine_as_test(machine, settings=SEARCH)


def test_the_catalogue_holds_at_least_ten_new_mutants_each_with_a_named_property():
    assert len(CATALOGUE) >= 11
    assert {e.caught_by for e in CATALOGUE} == {"snapshot", "dataset", "mesh", "stateful"}
    assert len({e.trainer for e in CATALOGUE}) == len(CATALOGUE)


@pytest.mark.parametrize("entry", CATALOGUE, ids=lambda e: e.trainer.__name__)
def test_mutant_is_caught_by_its_property(entry: MutantEntry, record_property):
    counter = ExampleCounter()
    with pytest.raises(PropertyFailure, match=PROPERTY_NAMES[entry.caught_by]) as caught:
        run_property(entry, counter)
    assert counter.first_failure is not None
    record_property("examples_needed", counter.first_failure)
    print(f"{entry.trainer.__name__}: caught by {entry.caught_by} after {counter.first_failure}")
    assert str(caught.value).strip()


PROPERTY_NAMES = {
    "snapshot": "snapshot round-trip property violated",
    "dataset": "dataset continuity property violated",
    "mesh": "mesh rebuild property violated",
    "stateful": r"end-to-end \(stateful\) property violated",
}


def test_the_reference_trainer_passes_what_the_mutants_fail():
    """The same search on the reference finds nothing (a property that always fails proves
    nothing); kept short: the suites run it at length."""
    short = settings(SEARCH, max_examples=4)
    machine = properties.episode_machine(properties.REFERENCE_TRAINER)
    run_state_machine_as_test(machine, settings=short)


def test_a_shrunk_stateful_failure_replays_from_its_printed_command(capsys):
    from pathways_chaos.harness.cli.replay import replay_main

    mutant = "pathways_chaos.harness.reference.mutants:NonSliceDownErrorsRetried"
    machine = properties.episode_machine(mutant)
    # Few rules per example: the shrinker runs one episode per attempt.
    with_shrinking = settings(SEARCH, phases=(Phase.generate, Phase.shrink), stateful_step_count=4)
    with pytest.raises(PropertyFailure) as caught:
        run_state_machine_as_test(machine, settings=with_shrinking)
    message = str(caught.value)
    (command,) = [
        line.split("replay: ", 1)[1] for line in message.splitlines() if "replay: " in line
    ]
    argv = shlex.split(command)
    assert argv[:2] == ["pathways-chaos", "replay"]
    schedule = argv[argv.index("--schedule") + 1]
    assert schedule.endswith("raise_error@step=0:code=INVALID_ARGUMENT"), message  # shrunk
    assert replay_main(argv[2:]) == 1
    assert "retried or swallowed" in capsys.readouterr().out
    fixed = [a if a != mutant else properties.REFERENCE_TRAINER for a in argv[2:]]
    assert replay_main(fixed) == 0
