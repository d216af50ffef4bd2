"""The loop search (issue 21): it finds the broken loops that need two faults in order, which
the fixed chaos scenarios miss, and prints a replay command that fails the same way.

The two-fault loops are in ``two_fault_loops.py``; the sample loop must pass.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pathways_chaos.faults.model import check_schedule_fits, parse_schedule
from pathways_chaos.harness.properties.loop import (
    LoopPropertyFailure,
    LoopSearch,
    LoopTarget,
    play_target,
)
from pathways_chaos.harness.properties.loop_schedules import (
    FAMILIES,
    LOOP_SCENARIOS,
    PROGRAM_ERROR,
    LoopShape,
    ScheduleWriter,
    loop_schedules,
)

ROOT = Path(__file__).resolve().parents[3]
LOOPS_FILE = "tests/harness/properties/two_fault_loops.py"


def _loops_module():  # tests/ is no package: by path, as --chaos-loop loads it
    import importlib.util

    spec = importlib.util.spec_from_file_location("two_fault_loops", ROOT / LOOPS_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TWO_FAULT_LOOPS = _loops_module().TWO_FAULT_LOOPS
SAMPLE = "pathways_chaos.harness.reference.user_loop:main"
CLI = Path(sys.executable).with_name("pathways-chaos")


def _target(name: str) -> LoopTarget:
    return LoopTarget(f"{LOOPS_FILE}:{name}")


def _run(args: list[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


# -- the generator: every schedule is one a correct loop survives -------------------------------
@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    family=st.sampled_from(sorted(FAMILIES)),
    slices=st.integers(1, 8),
    batches=st.integers(1, 40),
    saves=st.integers(0, 10),
    data=st.data(),
)
def test_generated_schedules_parse_fit_and_never_lose_slice_0_for_good(
    family, slices, batches, saves, data
):
    shape = LoopShape(batches, saves, 1.0)
    writer = data.draw(loop_schedules(shape, slices, family))
    schedule = parse_schedule(writer.text())  # the replay command's text round-trips
    assert parse_schedule(schedule.to_text()) == schedule
    check_schedule_fits(schedule, slices, kubernetes=False)
    assert set(writer.scenarios) <= set(FAMILIES[family]) | {"retried_error"}
    assert sum(1 for e in schedule if e.fault.kind == "preemption") <= 2
    losses = [
        e.fault.slice for e in schedule if hasattr(e.fault, "slice") and e.fault.kind != "repair"
    ]
    for entry in schedule:
        if entry.fault.kind == "repair":  # nothing else loses a slice a repair brings back
            assert losses.count(entry.fault.slice) == 1, f"{writer.text()}: repair after 2 losses"
        if hasattr(entry.fault, "slice"):
            assert entry.fault.slice != 0, f"{entry.to_text()} loses slice 0"
        if hasattr(entry.fault, "repair_after_polls") and entry.fault.kind != "flapping":
            assert entry.fault.repair_after_polls >= 1, f"{entry.to_text()} never comes back"
        if entry.at.kind in ("batch", "save"):
            limit = batches if entry.at.kind == "batch" else saves
            assert 1 <= entry.at.value <= limit, f"{entry.to_text()}: past the fault-free run"
    if "program_error" in writer.scenarios:  # the run ends there: everything else fired before
        *before, last = list(schedule)
        assert last.fault.kind == "raise_error" and last.fault.code == "INVALID_ARGUMENT"
        assert all(e.at.kind == "batch" and e.at.value < last.at.value for e in before), (
            writer.text()
        )


@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_every_scenario_writes_its_faults(data):
    shape = LoopShape(24, 6, 1.0)
    seen = {}
    for what in (*LOOP_SCENARIOS, PROGRAM_ERROR):
        writer = ScheduleWriter(shape, 4, batch=5, restores=1)
        writer.write(data.draw, what)
        assert writer.scenarios == [what]
        seen[what] = writer.text()
    kinds = {name: {e.partition("@")[0] for e in text.split(",")} for name, text in seen.items()}
    assert kinds["flapping"] == {"flapping"}
    assert "repair" in kinds["loss_and_repair"]
    assert "@save=" in seen["loss_during_a_save"]
    assert "@restore=" in seen["loss_during_a_restore"]
    assert "slow_save" in kinds["slow_save_then_failure"]
    assert kinds["retried_error"] == {"raise_error"}
    assert kinds["preemption"] == {"preemption"}
    # the retry's callback: restores=1 before, the retried error is the second restore
    assert kinds["callback_error"] == {"raise_error", "callback_error"}
    assert seen["callback_error"].endswith(",callback_error@callback=2")
    assert seen["program_error"] == "raise_error@batch=5:code=INVALID_ARGUMENT"
    assert kinds["slice_down"] <= {"data_loss", "deadline_exceeded", "not_found", "internal"}


# -- the two-fault loops: the pair in order shows the bug, nothing less does -------------------
@pytest.mark.parametrize("name", sorted(TWO_FAULT_LOOPS))
def test_each_two_fault_loop_fails_only_under_its_two_faults_in_order(name):
    bad, other = TWO_FAULT_LOOPS[name]
    target = _target(name)
    baseline, _ = play_target(target, "", None)
    assert baseline.result.completed and baseline.verdict.ok, baseline.verdict.summary()
    events = list(baseline.events)
    shown, _ = play_target(target, bad, events)
    assert not shown.verdict.ok, f"{name} survived {bad}"
    for schedule in [*bad.split(","), other]:
        out, _ = play_target(target, schedule, events)
        assert out.verdict.ok, f"{name} already fails under {schedule}: {out.verdict.violations}"
        assert out.of_kind("fault"), f"{schedule} never fired"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TWO_FAULT_LOOPS))
def test_the_fixed_chaos_scenarios_miss_each_two_fault_loop(name):
    out = _run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:randomly",
            "suites/chaos/test_user_loop.py",
            f"--chaos-loop={LOOPS_FILE}:{name}",
        ]
    )
    assert out.returncode == 0, out.stdout[-3000:]
    # Missed: nothing failed (a scenario that could not judge is skipped as not judged).
    assert " passed" in out.stdout and "failed" not in out.stdout.splitlines()[-1]


# -- the search finds them, and its command reproduces the failure -----------------------------
def _search_failure(name: str, **kwargs: object) -> tuple[LoopSearch, LoopPropertyFailure]:
    search = LoopSearch(_target(name), database=None, seed=0, max_examples=40, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(LoopPropertyFailure) as raised:
        search.run("stateful")
    return search, raised.value


def _replay(message: str) -> tuple[list[str], subprocess.CompletedProcess[str]]:
    (line,) = [ln for ln in message.splitlines() if ln.strip().startswith("replay: ")]
    command = shlex.split(line.strip().removeprefix("replay: "))
    assert command[:3] == ["pathways-chaos", "replay", "--loop"], command
    return command, _run([str(CLI), *command[1:]])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TWO_FAULT_LOOPS))
def test_the_search_finds_each_two_fault_loop_and_its_command_fails_the_same_way(name):
    search, failure = _search_failure(name, shrink=False)
    entries = failure.schedule.split(",")
    assert len(entries) >= 2, f"one fault showed a two-fault bug: {failure.schedule}"
    assert search.stats.failures >= 1 and search.stats.schedules <= 40
    violations = [ln.strip()[2:] for ln in str(failure).splitlines() if ln.startswith("  - ")]
    assert violations
    _, out = _replay(str(failure))
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    for violation in violations:  # the same violations, word for word
        assert f"FAILED: {violation}" in out.stdout, (violation, out.stdout[-3000:])
    # Each entry the command keeps is needed: alone, none shows the bug.
    baseline, _ = search.baseline()
    for entry in entries:
        alone, _ = play_target(search.target, entry, baseline)
        assert alone.verdict.ok, f"{entry} alone already fails: {alone.verdict.violations}"


def test_the_replay_command_of_a_surviving_schedule_exits_0_and_bad_input_is_one_line():
    ok = _run([str(CLI), "replay", "--loop", SAMPLE, "--schedule", "data_loss@batch=5:slice=1"])
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]
    assert "verdict: survived" in ok.stdout
    for args, says in [
        (["--option", "final_step"], "is not KEY=VALUE"),
        (["--topology", "4by2"], "is not NxM"),
        (["--schedule", "data_loss@batch=5:slice=9"], "outside the cluster's 4 slices"),
    ]:
        bad = _run([str(CLI), "replay", "--loop", SAMPLE, *args])
        assert bad.returncode == 2, bad.stdout + bad.stderr
        lines = bad.stderr.strip().splitlines()
        assert len(lines) == 1 and says in lines[0], bad.stderr
    missing = _run([str(CLI), "replay", "--loop", "no_such_module:main"])
    assert missing.returncode == 2 and "cannot be loaded" in missing.stderr


class _Recording(LoopSearch):
    """Remembers each schedule it ran, and those that failed."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.tried: list[str] = []
        self.failed: list[str] = []

    def check(self, prop: str, writer: ScheduleWriter) -> None:
        self.tried.append(writer.text())
        try:
            super().check(prop, writer)
        except LoopPropertyFailure:
            self.failed.append(writer.text())
            raise


def test_a_failure_found_once_is_tried_first_next_time(tmp_path):
    from hypothesis.database import DirectoryBasedExampleDatabase

    name = "checkpoint_position_from_step"
    database = DirectoryBasedExampleDatabase(tmp_path / "examples")
    first = _Recording(_target(name), database=database, seed=0, max_examples=40, shrink=False)
    with pytest.raises(LoopPropertyFailure):
        first.run("dataset")
    assert first.tried[0] not in first.failed  # it had to search: the check below can fail
    again = _Recording(_target(name), database=database, seed=1, max_examples=40, shrink=False)
    with pytest.raises(LoopPropertyFailure):
        again.run("dataset")
    assert again.tried[0] in first.failed, (again.tried[:2], first.failed)
    assert again.failed[0] == again.tried[0]


# -- the suite itself: selection, budget, figures ----------------------------------------------
def _suite(*args: str) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, "-m", "pytest", "-p", "no:randomly", "suites/properties", *args])


def test_the_property_suites_search_one_subject_and_the_libraries_only_without_a_loop():
    with_loop = _suite("--collect-only", "-q", f"--chaos-loop={SAMPLE}")
    without = _suite("--collect-only", "-q")
    assert with_loop.returncode == 0 and without.returncode == 0, with_loop.stdout + without.stdout
    picked = [ln for ln in with_loop.stdout.splitlines() if "::" in ln]
    assert picked and all("test_loop_properties.py" in ln for ln in picked), picked
    assert len(picked) == 4
    # Without a loop the same four search the reference trainer as a loop, and the libraries'
    # own properties (round trips, the ElasticIterator) run beside them; no trainer-class
    # episode property is left.
    default = [ln for ln in without.stdout.splitlines() if "::" in ln]
    assert [ln for ln in default if "test_loop_properties.py" in ln] == picked
    others = {ln.split("::")[0].rsplit("/", 1)[-1] for ln in default} - {"test_loop_properties.py"}
    assert others == {
        "test_snapshot_round_trip.py",
        "test_dataset_continuity.py",
        "test_multi_tier_restore.py",
    }, others
    assert not any("stateful_episodes" in ln or "mesh_rebuild.py" in ln for ln in default)


def test_a_bad_loop_or_budget_stops_the_suite_in_one_line():
    for args, says in [
        (["--chaos-loop=nowhere:main"], "--chaos-loop='nowhere:main' cannot be loaded"),
        ([f"--chaos-loop={SAMPLE}", "--chaos-budget=-5"], "--chaos-budget '-5': use a number"),
    ]:
        out = _suite("--collect-only", "-q", *args)
        assert out.returncode == 4, out.stdout[-2000:] + out.stderr[-2000:]
        errors = [ln for ln in out.stderr.splitlines() if ln.startswith("ERROR")]
        assert len(errors) == 1 and says in errors[0], out.stderr[-2000:]


@pytest.mark.slow
def test_the_sample_loop_passes_a_budgeted_search_and_the_figures_say_what_it_covered(tmp_path):
    report = tmp_path / "search.json"
    out = _suite(
        f"--chaos-loop={SAMPLE}",
        "--chaos-budget=30",
        f"--chaos-search-report={report}",
        "-q",
        "-rs",
    )
    assert out.returncode == 0, out.stdout[-4000:]
    (line,) = [
        ln for ln in out.stdout.splitlines() if ln.startswith("pathways-chaos loop search (")
    ]
    assert "of a 30 s budget" in line and "0 failed" in line, line
    figures = json.loads(report.read_text())
    # How many schedules fit 30 s is the machine's speed (the bench's business, not a test's);
    # what the budget guarantees is that each property runs at least one schedule or says it
    # was not judged (on a loaded machine the fault-free runs and the properties before it can
    # spend a later one's share: CI once left stateful none), never a pass with none; and that
    # no property starts a schedule once its share is spent: at most one each past it.
    by_property = figures["by_property"]
    assert by_property.get("snapshot", 0) >= 1 and figures["failures"] == 0, figures
    unrun = [n for n in ("dataset", "mesh", "stateful") if by_property.get(n, 0) == 0]
    not_judged = [
        ln for ln in out.stdout.splitlines() if ln.startswith("SKIPPED") and "NOT JUDGED" in ln
    ]
    assert len(not_judged) == len(unrun), (unrun, out.stdout[-3000:])
    assert not unrun or figures["skipped_for_budget"] > 0, figures
    assert sum(by_property.values()) == figures["schedules"], figures
    overrun = 4 * figures["longest_s"] + 5  # + hypothesis's own time
    assert figures["wall_s"] + figures["baseline_s"] <= 30 + overrun, figures
    # The line and the JSON say the same: every fault kind fired, with its count.
    assert figures["fault_kinds"], figures
    for kind, count in figures["fault_kinds"].items():
        assert f"{kind} {count}" in line, (kind, count, line)
    assert f"{figures['schedules']} schedules in" in line, line
    shares = figures["episode_shares"]
    assert 0 < shares["slice lost"] <= 1 and all(0 <= v <= 1 for v in shares.values()), shares


def test_a_property_the_budget_left_no_time_for_is_not_judged_never_passed():
    """A blind tester's search: one property's failure was shrunk past the budget, and the
    three after it reported PASSED having run no schedule at all."""
    from pathways_chaos.harness.properties.settings import PropertyNotJudged

    search = LoopSearch(LoopTarget(SAMPLE), database=None, seed=0, budget_s=0.001)
    with pytest.raises(PropertyNotJudged, match=r"not judged, because .* spent the 0.001 s"):
        search.run("mesh")
    assert search.stats.by_property["mesh"] == 0 and search.stats.skipped_for_budget > 0


def test_the_suite_says_not_judged_for_each_property_that_ran_no_schedule():
    out = _suite(f"--chaos-loop={SAMPLE}", "--chaos-budget=0.001", "-q", "-rs")
    assert out.returncode == 0, out.stdout[-3000:]
    skipped = [ln for ln in out.stdout.splitlines() if ln.startswith("SKIPPED")]
    assert len(skipped) == 4 and all("NOT JUDGED" in ln for ln in skipped), out.stdout[-3000:]
    assert " passed" not in out.stdout.splitlines()[-1], out.stdout[-500:]


def test_the_search_finds_a_loop_that_retries_a_program_error():
    """A blind tester's loop retried everything, INVALID_ARGUMENT included, in an outer loop of
    its own: the chaos suite's raise_error scenario failed it, the search passed it (it never
    wrote a program error)."""
    loop = (
        Path(__file__).parents[2] / "loops/real_jobs/blind11/b10_outer_retry_swallows_user_error.py"
    )
    search = LoopSearch(
        LoopTarget(f"{loop}:main"), database=None, seed=0, max_examples=30, shrink=False
    )
    with pytest.raises(LoopPropertyFailure, match="raised INVALID_ARGUMENT, which is not a sl"):
        search.run("snapshot")


def test_each_example_of_the_search_imports_the_loop_only_in_its_child(tmp_path):
    """The search hands the loop's spec to each episode's child: pytest (or the search
    command) never imports the module under test."""
    import os

    from pathways_chaos.harness.properties.loop import LoopTarget, play_target

    marker = tmp_path / "imported.txt"
    loop = tmp_path / "marked_search_loop.py"
    loop.write_text(
        "import os\n"
        f"open({str(marker)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
        "from pathways_chaos.harness.reference.user_loop import main\n"
    )
    target = LoopTarget(f"{loop}:main", topology="2x1")
    baseline, _ = play_target(target, "", None)
    outcome, _ = play_target(
        target, "data_loss@batch=4:slice=1:repair_after_polls=2", baseline.events
    )

    assert outcome.verdict.ok, outcome.verdict.violations
    pids = marker.read_text().split()
    # the fault-free run's child, the episode's (and a clean rerun's, when it needs one)
    assert len(set(pids)) >= 2 and str(os.getpid()) not in pids, pids
    assert not any("marked_search_loop" in name for name in sys.modules)


def test_replay_of_a_loop_takes_the_wall_deadline_the_docs_give_it():
    """``replay --loop ... --wall-deadline S``: a loop that blocks ends at S, named, not after
    the default 600 s; a bad value is one line."""
    hangs = f"{ROOT / 'tests' / 'loops' / 'hostile.py'}:waits_on_an_event"
    out = _run([str(CLI), "replay", "--loop", hangs, "--wall-deadline", "6"], timeout=120)
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    assert "wall-time deadline of 6 s: the loop was blocked at" in out.stdout, out.stdout[-2000:]
    bad = _run([str(CLI), "replay", "--loop", SAMPLE, "--wall-deadline", "soon"], timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "--wall-deadline='soon'" in bad.stderr


def test_a_replay_whose_fault_never_fired_is_not_judged_and_not_green():
    """A trigger the loop never reaches (batch 999 of a 24-batch run) judged nothing: the
    command says NOT JUDGED with the faults-fired reason and exits 5, never 0."""
    out = _run([str(CLI), "replay", "--loop", SAMPLE, "--schedule", "data_loss@batch=999:slice=1"])
    assert out.returncode == 5, out.stdout[-2000:] + out.stderr[-2000:]
    assert "verdict: NOT JUDGED" in out.stdout
    assert "not judged: faults-fired, because" in out.stdout
    assert "fault never fired: data_loss@batch=999:slice=1" in out.stdout


def test_a_replay_that_is_not_a_pass_shows_the_loops_output_and_log_keeps_it(tmp_path):
    """What the loop printed is often the reason: the last 20 lines of its stdout and stderr
    are shown (cut to 20, never the whole flood), and ``--log`` keeps all of it."""
    loop = "tests/loops/misbehaving.py:prints_then_crashes"
    log = tmp_path / "kept" / "episode.jsonl"
    argv = [str(CLI), "replay", "--loop", loop, "--schedule", "data_loss@batch=1:slice=1"]
    out = _run([*argv, "--log", str(log)])

    assert out.returncode in (1, 5), out.stdout[-2000:] + out.stderr[-2000:]
    kept = tmp_path / "kept" / "episode.child" / "output-1.txt"
    assert f"the loop's output, run 1 (its last 20 lines; all in {kept}):" in out.stdout
    assert "  | config: dataset path /data/missing" in out.stdout
    assert "  | step 29: loss 0.5" in out.stdout and "  | step 10: loss" not in out.stdout
    assert "step 0: loss 0.5" in kept.read_text() and log.is_file()
