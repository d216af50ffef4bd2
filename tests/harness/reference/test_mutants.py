"""Every broken trainer in the catalogue is caught, by the property the catalogue names.

Each property runs against the mutant with a fixed seed until it fails (no shrinking, to keep
this fast); the examples it needed go into the README's table. One mutant also goes through
shrinking, and its printed replay command reproduces the failure in-process. The correct
variants (other step math, the same recovery) pass the same checks, and the property suites
run on whatever ``--chaos-trainer`` names.
"""

from __future__ import annotations

import re
import shlex

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from pathways_chaos.harness import properties
from pathways_chaos.harness.properties import ExampleCounter, PropertyFailure
from pathways_chaos.harness.reference.mutants import (
    CATALOGUE,
    CallbackErrorEscapes,
    MutantEntry,
    spec_of,
)
from pathways_chaos.harness.reference.variants import CORRECT_VARIANTS

pytest_plugins = ["pytester"]

SEARCH = properties.mutant_search(max_examples=60)


def run_property(entry: MutantEntry, counter: ExampleCounter) -> None:
    properties.run_property(entry.caught_by, spec_of(entry.trainer), counter, SEARCH)


def test_the_catalogue_holds_at_least_ten_new_mutants_each_with_a_named_property():
    assert len(CATALOGUE) >= 18
    assert {e.caught_by for e in CATALOGUE} == {"snapshot", "dataset", "mesh", "stateful"}
    assert len({e.trainer for e in CATALOGUE}) == len(CATALOGUE)
    assert all(e.judge for e in CATALOGUE)
    assert set(CAUSES) <= {e.trainer.__name__ for e in CATALOGUE}


def test_the_mutants_override_only_public_seams():
    """Mutants need no private hook: every method they override is public."""
    from pathways_chaos.harness.reference.trainer import ReferenceTrainer

    for entry in CATALOGUE:
        overridden = {
            name
            for name, value in vars(entry.trainer).items()
            if callable(value) and name in vars(ReferenceTrainer)
        }
        private = sorted(n for n in overridden if n.startswith("_") and not n.endswith("__"))
        assert not private, f"{entry.trainer.__name__} overrides private {private}"


@pytest.mark.parametrize("entry", CATALOGUE, ids=lambda e: e.trainer.__name__)
def test_mutant_is_caught_by_its_property(entry: MutantEntry, record_property):
    counter = ExampleCounter()
    with pytest.raises(PropertyFailure, match=PROPERTY_NAMES[entry.caught_by]) as caught:
        run_property(entry, counter)
    assert counter.first_failure is not None
    record_property("examples_needed", counter.first_failure)
    print(f"{entry.trainer.__name__}: caught by {entry.caught_by} after {counter.first_failure}")
    assert str(caught.value).strip()
    cause = CAUSES.get(entry.trainer.__name__)
    if cause is not None:  # the blind spots of issue 12: the message names the step and cause
        assert re.search(cause, str(caught.value)), str(caught.value)


#: For each blind spot's mutant: what its failure message must say (the step and the cause).
CAUSES = {
    "StaleSnapshotRestore": r"attempt \d+ (restored snapshot step \d+|started again from step "
    r"\d+ with no restore), but snapshot step \d+ was in flight .* at the failure",
    "ScaleUpKeepsOldMesh": r"slices \[\d+\] joined by an in-loop scale-up after step \d+, but "
    r"step \d+ ran on a mesh of slices",
    "IteratorNotCarriedAcrossScaleUp": r"exactly-once violated from step \d+: duplicated",
    "BatchFromTotalSlices": r"step \d+ consumed a global batch of \d+ \(ids \d+\.\.\d+\) on a "
    r"mesh of \d+ slices",
    "RandomnessNotRestored": r"fault-free run of the same trainer .*Randomness.* on one device"
    r".*the first committed step whose loss differs is step \d+",
    "CallbackErrorEscapes": r"run did not complete: JaxRuntimeError: INTERNAL: injected error in "
    r"the elastic-event callback",
    "NonSliceDownErrorsRetried": r"INVALID_ARGUMENT error is not a lost slice",
}


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

    mutant = spec_of(CallbackErrorEscapes)
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
    # shrunk: the callback error on the first callback, after the INTERNAL that triggers it at
    # step 0 (the shrinker may leave losses that never fire once the run ends at step 0)
    assert "raise_error@step=0:code=INTERNAL,callback_error@callback=1" in schedule, message
    assert schedule.count(",") <= 3, message
    assert replay_main(argv[2:]) == 1
    assert "injected error in the elastic-event callback" in capsys.readouterr().out
    fixed = [a if a != mutant else properties.REFERENCE_TRAINER for a in argv[2:]]
    assert replay_main(fixed) == 0


# -- correct variants: other step math, the same recovery ------------------------------------
VARIANT_SCHEDULES = (
    "slow_save@step=3:seconds=4,raise_error@step=5:code=INTERNAL",
    "slow_save@step=3:polls=3,data_loss@step=5:slice=1",
    "data_loss@step=2:slice=1:repair_after_polls=2",
    "raise_error@step=4:code=INTERNAL,callback_error@callback=1",
    "preemption@step=5,not_found@step=7:slice=3",
)


@pytest.mark.parametrize("variant", CORRECT_VARIANTS, ids=lambda v: v.__name__)
def test_a_correct_variant_passes_every_check(variant):
    """Every oracle check, under faults of every new kind, finds nothing; the model's replay
    (the old judge) would have failed the variant with no fault at all."""
    from pathways_chaos.harness.judging import committed, replay
    from pathways_chaos.harness.properties.episode_spec import EpisodeSpec, judge, run_spec

    for schedule in ("", *VARIANT_SCHEDULES):
        spec = EpisodeSpec(
            schedule=schedule,
            devices_per_slice=1,
            poll_interval=1,
            trainer=spec_of(variant),
        )
        events = run_spec(spec).events
        assert judge(events, spec) == [], schedule
        if not schedule:
            start = next(e for e in events if e["kind"] == "run_start")
            lineage, _ = committed.committed_lineage(events)
            final = next(e for e in reversed(events) if e["kind"] == "run_end")
            by_model, _ = replay.replay_state(start["config"], lineage)
            assert replay.compare_state(final["final_state"], by_model), "model replay agrees"


def test_a_correct_variant_passes_the_stateful_search():
    short = settings(SEARCH, max_examples=4)
    machine = properties.episode_machine(spec_of(CORRECT_VARIANTS[-1]))
    run_state_machine_as_test(machine, settings=short)


def test_the_property_suites_fail_on_the_mutant_chaos_trainer_names(pytester):
    """``pytest suites/properties --chaos-trainer=<mutant>`` fails, naming the cause."""
    mutant = spec_of(CallbackErrorEscapes)
    result = pytester.runpytest_subprocess(
        "--pyargs",
        "pathways_chaos.suites.properties.test_stateful_episodes",
        f"--chaos-trainer={mutant}",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*trainer pathways_chaos.harness.reference.mutants:Callback*"])
    result.stdout.fnmatch_lines(["*injected error in the elastic-event callback*"])


def test_a_bad_chaos_trainer_stops_the_property_suites_in_one_line(pytester):
    result = pytester.runpytest_subprocess(
        "--pyargs",
        "pathways_chaos.suites.properties.test_stateful_episodes",
        "--chaos-trainer=nowhere",
        "-p",
        "no:cacheprovider",
    )
    assert result.ret != 0
    out = result.stdout.str() + result.stderr.str()
    assert "--chaos-trainer='nowhere' cannot be loaded" in out, out[-2000:]
