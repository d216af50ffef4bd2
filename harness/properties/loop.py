"""The properties over a user's own loop (``--chaos-loop``): generated fault schedules, judged by
the loop judge against a fault-free run of the same loop.

A loop is a black box: the faults fire on what the observer sees (the Nth batch drawn, save,
restore or attempt, a time on the episode clock), so the generator sizes its triggers from the
fault-free run (how many batches and saves the loop makes). Slice 0 is never lost: it always
holds a replica of the latest snapshot, so every generated schedule is one a correct loop
survives, whatever its recovery mode (every lost slice also comes back, after a few health
polls, so a pause-and-resume loop is never left waiting for good).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
import shlex
import tempfile
import time
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from pathways_chaos.harness.engine.topology import SliceTopology
from pathways_chaos.harness.judging.yardsticks import YardstickRuns
from pathways_chaos.harness.properties.loop_schedules import (
    FAMILIES,
    LOOP_SCENARIOS,
    LoopShape,
    ScheduleWriter,
    loop_schedules,
)
from pathways_chaos.harness.properties.settings import (
    LOSS_KINDS,
    PropertyFailure,
    PropertyNotJudged,
)

#: The loop searched when no other is named: the reference trainer, run as a loop (its
#: ``trainer=`` option names another ``ReferenceTrainer`` class).
TRAINER_LOOP = "pathways_chaos.harness.reference.trainer_loop:main"

#: What the coverage report counts per episode (``loop_features``).
LOOP_FEATURES = (
    "slice lost",
    "restore",
    "restore interrupted",
    "mesh shrink",
    "mesh grows back",
    "in-loop scale-up",
    "retried error",
    "save held in flight",
    "preemption resumed",
    "fault never fired",
)


@dataclasses.dataclass(frozen=True)
class LoopTarget:
    """The loop under test: ``MODULE:FUNC`` (or ``FILE.py:FUNC``), its options, the fake
    cluster's shape. Everything the replay command needs to run it again."""

    spec: str
    options: tuple[tuple[str, Any], ...] = ()
    topology: str = str(SliceTopology.DEFAULT)

    @property
    def num_slices(self) -> int:
        return int(self.topology.lower().partition("x")[0])

    def replay_command(self, schedule: str) -> str:
        parts = ["pathways-chaos", "replay", "--loop", self.spec, "--schedule", schedule]
        if self.topology != str(SliceTopology.DEFAULT):
            parts += ["--topology", self.topology]
        for key, value in self.options:
            parts += ["--option", f"{key}={json.dumps(value)}"]
        return " ".join(shlex.quote(p) for p in parts)


def play_target(
    target: LoopTarget,
    schedule: str,
    baseline: list[dict[str, Any]] | None,
    log_path: Path | None = None,
    yardsticks: YardstickRuns | None = None,
) -> tuple[Any, float]:
    """One episode on a fresh fake cluster (nothing carries over), with its own checkpoint
    folder (and its log at ``log_path`` when given); returns the ``Outcome`` and its wall
    time. ``yardsticks``: the clean reruns already made for this loop, reused."""
    from pathways_chaos.harness.play import play_loop

    with tempfile.TemporaryDirectory(prefix="pathways-chaos-loop-") as tmp:
        t0 = time.perf_counter()
        outcome = play_loop(
            target.spec,  # imported by the episode's child only, never by the search
            schedule,
            baseline=baseline,
            options=dict(target.options),
            topology=target.topology,
            checkpoint_dir=Path(tmp) / "checkpoints",
            log_path=log_path,
            yardsticks=yardsticks,
        )
        return outcome, time.perf_counter() - t0


# -- what an episode covered ---------------------------------------------------------------
def loop_features(events: list[dict[str, Any]]) -> set[str]:
    """Which of ``LOOP_FEATURES`` a loop episode's log shows."""
    out: set[str] = set()
    restores = {"restore_begin": 0, "restore_end": 0}
    last_mesh: int | None = None
    attempt_meshes = 0
    scheduled = 0
    fired = 0
    for e in events:
        kind = e["kind"]
        if kind == "episode_start":
            scheduled = len([p for p in str(e.get("schedule", "")).split(",") if p])
        elif kind == "fault":
            fired += 1
            name = e["fault"]["kind"]
            if name in (*LOSS_KINDS, "flapping") and "touched" in e:
                out.add("slice lost")
            elif name == "raise_error":
                out.add("retried error")
        elif kind in restores:
            restores[kind] += 1
        elif kind == "attempt_start":
            attempt_meshes = 0
        elif kind == "mesh":
            n = len(e["slices"])
            attempt_meshes += 1
            if last_mesh is not None and n < last_mesh:
                out.add("mesh shrink")
            if last_mesh is not None and n > last_mesh:
                out.add("mesh grows back")
                if attempt_meshes > 1:
                    out.add("in-loop scale-up")
            last_mesh = n
        elif kind == "save_held":
            out.add("save held in flight")
        elif kind == "run_end" and e.get("status") == "suspended":
            out.add("preemption resumed")
    if restores["restore_end"]:
        out.add("restore")
    if restores["restore_begin"] > restores["restore_end"]:
        out.add("restore interrupted")
    if fired < scheduled:
        out.add("fault never fired")
    return out


def fired_kinds(events: list[dict[str, Any]]) -> list[str]:
    """The kinds of the faults that fired in an episode (a ``fault`` event that touched the
    cluster): one drawn but never fired (``fault_unfired``), or not injected, is not counted."""
    return [
        str(e["fault"]["kind"])
        for e in events
        if e.get("kind") == "fault" and "touched" in e and isinstance(e.get("fault"), dict)
    ]


@dataclasses.dataclass
class SearchStats:
    """What the loop search covered: schedules run, their time, fault kinds, event shares."""

    loop: str = ""
    profile: str = ""
    budget_s: float | None = None
    schedules: int = 0
    failures: int = 0
    skipped_for_budget: int = 0
    seconds: float = 0.0
    longest_s: float = 0.0  # the longest schedule's episode: how far a budget can be overrun
    wall_s: float = 0.0  # the searches' wall time (generation, shrinking, episodes)
    baseline_s: float = 0.0
    reruns_made: int = 0  # clean reruns and restore probes run for the schedules' judges
    reruns_reused: int = 0  # ... and reused from an earlier schedule of the same search
    scenarios: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    fault_kinds: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    features: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    by_property: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    #: Schedules that failed once and passed when run again (not reported as failures).
    flaky: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def note(self, prop: str, writer: ScheduleWriter, events: list[Any], seconds: float) -> None:
        self.schedules += 1
        self.by_property[prop] += 1
        self.seconds += seconds
        self.longest_s = max(self.longest_s, seconds)
        self.scenarios.update(writer.scenarios)
        self.fault_kinds.update(fired_kinds(events))
        self.features.update(loop_features(events))

    def to_json(self) -> dict[str, Any]:
        n = max(1, self.schedules)
        return {
            "made_by": "pathways-chaos loop search",
            "loop": self.loop,
            "profile": self.profile,
            "budget_s": self.budget_s,
            "episode_s": round(self.seconds, 2),
            "longest_s": round(self.longest_s, 2),
            "wall_s": round(self.wall_s, 2),
            "baseline_s": round(self.baseline_s, 2),
            "schedules": self.schedules,
            "failures": self.failures,
            "skipped_for_budget": self.skipped_for_budget,
            "reruns_made": self.reruns_made,
            "reruns_reused": self.reruns_reused,
            "flaky": self.flaky,
            "schedules_per_minute": round(self.schedules / self.seconds * 60, 1)
            if self.seconds
            else None,
            "by_property": dict(self.by_property),
            "scenarios": dict(self.scenarios),
            "fault_kinds": dict(self.fault_kinds),
            "episode_shares": {f: round(self.features[f] / n, 3) for f in LOOP_FEATURES},
        }

    def merge(self, other: dict[str, Any]) -> None:
        """Adds a worker's figures (``to_json``) to these (pytest-xdist)."""
        self.loop = self.loop or other["loop"]
        self.profile = self.profile or other["profile"]
        self.budget_s = self.budget_s if self.budget_s is not None else other["budget_s"]
        self.schedules += other["schedules"]
        self.failures += other["failures"]
        self.skipped_for_budget += other["skipped_for_budget"]
        self.reruns_made += other.get("reruns_made", 0)
        self.reruns_reused += other.get("reruns_reused", 0)
        self.flaky += other["flaky"]
        self.seconds += other["episode_s"]
        self.longest_s = max(self.longest_s, other.get("longest_s", 0.0))
        self.wall_s += other["wall_s"]
        self.baseline_s += other["baseline_s"]
        self.by_property.update(other["by_property"])
        self.scenarios.update(other["scenarios"])
        self.fault_kinds.update(other["fault_kinds"])
        for name, share in other["episode_shares"].items():
            self.features[name] += round(share * other["schedules"])

    def summary(self) -> str:
        data = self.to_json()
        budget = f" of a {self.budget_s:g} s budget" if self.budget_s else ""
        skipped = self.skipped_for_budget
        unrun = f", {skipped} not run (budget spent)" if skipped else ""
        if self.flaky:
            logs = "; ".join(" and ".join(map(str, f.get("logs", []))) for f in self.flaky)
            unrun += f", {len(self.flaky)} flaky (failed once, passed again; logs: {logs})"
        shares = ", ".join(f"{k} {v:.0%}" for k, v in data["episode_shares"].items() if v)
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.fault_kinds.items()))
        return (
            f"pathways-chaos loop search ({self.profile}): {self.schedules} schedules in "
            f"{self.wall_s + self.baseline_s:.1f} s{budget} on {self.loop}, "
            f"{self.failures} failed{unrun}; "
            f"fault kinds fired: {kinds or 'none'}; episodes with: {shares or 'nothing'}"
        )


def _shape_of(violation: str) -> str:
    """A violation without its numbers: "fails the same way" compares these."""
    return re.sub(r"\d+", "N", violation)


class LoopPropertyFailure(PropertyFailure):
    """A loop property does not hold; ``schedule`` is the text that shows it."""

    def __init__(self, message: str, schedule: str = "") -> None:
        super().__init__(message)
        self.schedule = schedule


# -- the search over one loop --------------------------------------------------------------
#: Share of the budget each property gets (they run in this order in the suite).
BUDGET_SHARES = {"snapshot": 0.2, "dataset": 0.2, "mesh": 0.2, "stateful": 0.4}
#: Examples per property when no budget is set: this share of the profile's max_examples.
PROFILE_SHARES = {"snapshot": 0.25, "dataset": 0.25, "mesh": 0.25, "stateful": 0.5}


class LoopSearch:
    """Searches one loop: the fault-free run once per (loop, options, topology), a budget,
    the example database keyed by the loop, the figures of what it covered."""

    def __init__(
        self,
        target: LoopTarget,
        *,
        profile: str = "ci",
        budget_s: float | None = None,
        seed: int | None = 0,
        database: Any = "default",
        max_examples: int | None = None,
        shrink: bool = True,
    ) -> None:
        self.target = target
        self.profile = profile
        self.budget_s = budget_s
        self.seed = seed
        self.database = database
        self.max_examples = max_examples
        self.shrink = shrink  # off: the first failure, cut down by ``minimize`` alone
        self.stats = SearchStats(loop=target.spec, profile=profile, budget_s=budget_s)
        #: Where each episode's log is written (a temporary folder unless set).
        self.log_dir: Path | None = None
        self._episodes = 0
        self._baseline: list[dict[str, Any]] | None = None
        self._shape: LoopShape | None = None
        self._episode_s: float | None = None
        self._allowances: dict[str, float] = {}
        self._started: dict[str, float] = {}
        self._failed: set[str] = set()
        #: Clean reruns and restore probes made so far, reused by later schedules; a failure's
        #: check run makes its own (a failure never rests on a kept run alone).
        self.yardsticks = YardstickRuns()

    # the fault-free run, once
    def baseline(self) -> tuple[list[dict[str, Any]], LoopShape]:
        if self._baseline is None or self._shape is None:
            outcome, seconds = play_target(self.target, "", None)
            if not outcome.result.completed:
                raise PropertyFailure(
                    f"the fault-free run of {self.target.spec} did not complete "
                    f"({outcome.result.error}): fix the loop before searching its faults"
                )
            self._baseline = list(outcome.events)
            self._shape = LoopShape.of(self._baseline, seconds)
            self.stats.baseline_s += seconds
            if self._shape.batches == 0:
                raise PropertyFailure(
                    f"{self.target.spec} drew no batch the observer can see in its fault-free "
                    "run: the loop search triggers faults on batches (draw them from a grain "
                    "iterator or DataLoader, or a generator whose batches carry sample ids)"
                )
            # A warm episode (executables and the compilation cache reused) prices the rest.
            _, self._episode_s = play_target(self.target, "", self._baseline)
            self.stats.baseline_s += self._episode_s
        return self._baseline, self._shape

    def examples_for(self, prop: str) -> int:
        """The profile's share of examples, or what ``prop``'s share of the budget buys."""
        from hypothesis import settings

        if self.max_examples is not None:
            return self.max_examples
        by_profile = max(3, int(settings().max_examples * PROFILE_SHARES[prop]))
        if self.budget_s is None:
            return by_profile
        self.baseline()
        allowance = self._allowance(prop)
        if self.stats.schedules:  # what this loop's schedules have cost so far, wall time
            per_episode = max(self.stats.wall_s, self.stats.seconds) / self.stats.schedules
        else:
            per_episode = 2.5 * (self._episode_s or 1.0)  # faults cost more than a clean run
        return max(3, int(allowance / max(0.05, per_episode)) + 1)

    def _allowance(self, prop: str) -> float:
        """``prop``'s share of what is left of the budget, fixed when it starts."""
        assert self.budget_s is not None
        if prop not in self._allowances:
            waiting = [p for p in BUDGET_SHARES if p not in self._allowances]
            left = max(0.0, self.budget_s - self.stats.wall_s - self.stats.baseline_s)
            share = BUDGET_SHARES[prop] / sum(BUDGET_SHARES[p] for p in waiting)
            self._allowances[prop] = left * share
        return self._allowances[prop]

    def settings(self, prop: str) -> Any:
        from hypothesis import HealthCheck, Phase, settings
        from hypothesis.database import DirectoryBasedExampleDatabase

        database = self.database
        if database == "default":
            database = DirectoryBasedExampleDatabase(Path(".hypothesis") / "examples")
        return settings(
            settings(),
            max_examples=self.examples_for(prop),
            deadline=None,
            derandomize=False,  # a seed instead: reproducible, and the database stays on
            database=database,
            phases=tuple(
                p
                for p in Phase
                if p is not Phase.explain and (self.shrink or p is not Phase.shrink)
            ),
            suppress_health_check=list(HealthCheck),
            stateful_step_count=6,
        )

    def database_key(self, prop: str) -> bytes:
        return f"pathways-chaos loop {prop} {self.target!r}".encode()

    # one episode, judged
    def check(self, prop: str, writer: ScheduleWriter) -> None:
        """Runs the loop under the writer's schedule; a ``PropertyFailure`` unless it survived."""
        __tracebackhide__ = True
        if self._over_budget(prop):
            self.stats.skipped_for_budget += 1
            return
        baseline, _ = self.baseline()
        schedule = writer.text()
        first = self._log_path("first")
        outcome, seconds = play_target(self.target, schedule, baseline, first, self.yardsticks)
        self.stats.note(prop, writer, outcome.events, seconds)
        self.stats.reruns_made = self.yardsticks.made
        self.stats.reruns_reused = self.yardsticks.reused
        _note_hypothesis_events(outcome.events, writer)
        verdict = outcome.verdict
        if verdict.ok:
            first.unlink(missing_ok=True)  # only a failure's logs are kept
            return
        second = first.with_name(first.name.replace("-first", "-again"))
        again, seconds = play_target(self.target, schedule, baseline, second)
        self.stats.seconds += seconds  # the budget pays for the check run, too
        if again.verdict.ok:
            # Failed once and passed again: not a failure the replay command can show, but
            # never a pass either: reported as flaky, with what it said and both runs' logs.
            self.stats.flaky.append(
                {
                    "property": prop,
                    "schedule": schedule,
                    "violations": verdict.violations,
                    "logs": [str(first), str(second)],
                }
            )
            return
        self.stats.failures += 1
        self._failed.add(prop)
        raise LoopPropertyFailure(self.failure_message(prop, schedule, verdict), schedule)

    def _log_path(self, tag: str) -> Path:
        """Where the next episode's log goes (kept when it fails: a flaky failure names it)."""
        if self.log_dir is None:
            self.log_dir = Path(tempfile.mkdtemp(prefix="pathways-chaos-search-logs-"))
        self._episodes += 1
        return self.log_dir / f"episode-{self._episodes}-{tag}.jsonl"

    def failure_message(self, prop: str, schedule: str, verdict: Any) -> str:
        lines = [f"{PROPERTY_NAMES[prop]} property violated by {self.target.spec}:"]
        lines += [f"  - {v}" for v in verdict.violations]
        lines += [
            f"  schedule: {schedule or '(none)'}",
            f"  replay: {self.target.replay_command(schedule)}",
        ]
        return "\n".join(lines)

    def minimize(self, prop: str, schedule: str) -> tuple[str, Any] | None:
        """Drops every entry the failure does not need, one at a time, until each that is
        left is needed (hypothesis shrinks the scenarios it drew; this shrinks the text the
        replay command runs). None when the schedule no longer fails."""
        baseline, _ = self.baseline()
        entries = [e for e in schedule.split(",") if e]
        outcome, _ = play_target(self.target, ",".join(entries), baseline)
        if outcome.verdict.ok:
            return None
        verdict = outcome.verdict
        same_way = _shape_of(verdict.violations[0])
        i = 0
        while i < len(entries) and len(entries) > 1:
            candidate = entries[:i] + entries[i + 1 :]
            trial, _ = play_target(self.target, ",".join(candidate), baseline)
            if trial.verdict.ok or _shape_of(trial.verdict.violations[0]) != same_way:
                i += 1  # needed, or without it the loop fails another way
            else:
                entries, verdict = candidate, trial.verdict
        return ",".join(entries), verdict

    def _over_budget(self, prop: str) -> bool:
        """Past its share of the budget, a property runs no more new examples, unless one has
        failed (then shrinking and hypothesis's final replay must run every episode)."""
        if self.budget_s is None or prop in self._failed or prop not in self._started:
            return False
        # Wall time, not only the episodes': what a CI job waits for.
        return time.perf_counter() - self._started[prop] >= self._allowance(prop)

    def run(self, prop: str) -> None:
        """Searches ``prop`` (snapshot, dataset, mesh or stateful) over the loop;
        ``PropertyNotJudged`` when the budget was spent before it ran one schedule."""
        __tracebackhide__ = True  # pytest shows the failure's message, not this machinery
        from hypothesis import given
        from hypothesis.stateful import get_state_machine_test

        _, shape = self.baseline()
        if prop == "stateful":
            search = get_state_machine_test(
                loop_machine(self), settings=self.settings(prop), _min_steps=1
            )
        elif prop in FAMILIES:

            @self.settings(prop)
            @given(writer=loop_schedules(shape, self.target.num_slices, prop))
            def search(writer: ScheduleWriter) -> None:
                __tracebackhide__ = True
                self.check(prop, writer)

        else:
            raise ValueError(f"no loop property {prop!r}: snapshot, dataset, mesh or stateful")
        # A failure found for this loop is tried first next time (the key names the loop).
        search._hypothesis_internal_database_key = self.database_key(prop)  # type: ignore[attr-defined]
        self._started[prop] = time.perf_counter()
        ran, unrun = self.stats.by_property[prop], self.stats.skipped_for_budget
        if self.seed is not None:
            # What @seed(n) sets, without the database=None that @seed adds: a reproducible
            # search that still tries a failure it saved before anything new.
            search._hypothesis_internal_use_seed = self.seed  # type: ignore[attr-defined]
        try:
            try:
                search()
            finally:
                self.stats.wall_s += time.perf_counter() - self._started[prop]
        except LoopPropertyFailure as failure:
            smaller = self.minimize(prop, failure.schedule)
            if smaller is None or smaller[0] == failure.schedule:
                raise
            raise LoopPropertyFailure(
                self.failure_message(prop, *smaller)
                + f"\n  (hypothesis's shortest schedule was {failure.schedule}; the entries "
                "above are each needed)",
                smaller[0],
            ) from failure
        if self.stats.by_property[prop] == ran and self.stats.skipped_for_budget > unrun:
            spent = "the fault-free runs and the properties before it"
            if self._failed:
                spent += f" (shrinking the {', '.join(sorted(self._failed))} failure)"
            raise PropertyNotJudged(
                f"{PROPERTY_NAMES[prop]} not judged, because {spent} spent the "
                f"{self.budget_s:g} s budget before it ran one schedule: give a larger "
                f"--chaos-budget, or run it alone (-k {prop})"
            )


PROPERTY_NAMES = {
    "snapshot": "snapshot round-trip (loop)",
    "dataset": "dataset continuity (loop)",
    "mesh": "mesh rebuild (loop)",
    "stateful": "end-to-end (loop, stateful)",
}


def _note_hypothesis_events(events: list[Any], writer: ScheduleWriter) -> None:
    from hypothesis import event
    from hypothesis.control import currently_in_test_context

    if currently_in_test_context():
        for name in sorted(loop_features(events)):
            event(f"episode includes: {name}")
        for name in sorted(set(writer.scenarios)):
            event(f"scenario: {name}")


def loop_machine(search: LoopSearch) -> type[Any]:
    """A state machine whose rules write a loop's fault schedule as the run goes (each rule a
    scenario at a batch that only moves forward) and whose teardown runs and judges it.

    One rule, with no precondition and no invalid draws, so hypothesis discards no example;
    an example it is throwing away (an exception in flight) runs no episode.
    """
    from hypothesis.stateful import RuleBasedStateMachine, rule

    _, shape = search.baseline()

    class LoopMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.writer = ScheduleWriter(shape, search.target.num_slices)

        @rule(
            what=st.sampled_from(LOOP_SCENARIOS),
            advance=st.integers(0, max(1, shape.batches // 4)),
            data=st.data(),
        )
        def fault(self, what: str, advance: int, data: st.DataObject) -> None:
            """One scenario, ``advance`` batches after the last one."""
            self.writer.advance(advance)
            self.writer.write(data.draw, what)

        def teardown(self) -> None:
            import sys

            if sys.exc_info()[1] is not None:
                return
            search.check("stateful", self.writer)

    LoopMachine.__name__ = LoopMachine.__qualname__ = "LoopMachine"
    return LoopMachine
