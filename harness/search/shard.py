"""One shard of the search: rounds of seeded hypothesis searches over its properties, within a
time budget, every episode written as one JSONL line and the shard's report as JSON.

A round runs each of the shard's properties once, with the round's seed (the shard's own
range) and a few examples; hypothesis first replays what the shared database holds for that
property, then generates, then shrinks a failure where it found it. A property that failed is
not searched again by this shard (the same bug again is no news); the others go on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from pathways_chaos.harness.engine.owned_paths import open_fresh, write_atomic
from pathways_chaos.harness.properties.settings import ExampleCounter, PropertyFailure
from pathways_chaos.harness.search.database import (
    DatabaseLost,
    database_failure,
    describe,
    saved,
)
from pathways_chaos.harness.search.plan import SEED_SPAN, ShardPlan

#: Wall seconds an episode may run past the shard's budget before it is ended.
EPISODE_GRACE_S = 5.0

#: Schema tag of every line and report, so ``merge`` refuses what it cannot read.
FORMAT = "pathways-chaos-search/1"


def fault_kinds(schedule: str) -> list[str]:
    """The distinct fault kinds of a schedule's text (``data_loss@step=2:slice=1`` -> data_loss)."""
    return sorted({e.partition("@")[0] for e in schedule.split(",") if e.strip()})


@dataclasses.dataclass
class Current:
    """The example about to run: what the episode line says about it."""

    prop: str
    schedule: str
    replay: str | None


class EpisodeLog(ExampleCounter):
    """Counts examples like the mutant table's counter, and writes one line per episode."""

    def __init__(self, shard: ShardSearch) -> None:
        super().__init__()
        self.shard = shard
        self.current: Current | None = None
        self.features_of: Callable[[list[dict[str, Any]]], set[str]] = lambda events: set()
        self._events: list[dict[str, Any]] | None = None
        self.failing = False  # this property failed in this round: shrink, never skip
        self.last_failure: dict[str, Any] | None = None
        self.first_failure_line: dict[str, Any] | None = None
        self.round_examples = 0
        self.from_database = 0  # the round's first N examples are the database's

    def begin(self, prop: str, schedule: str, replay: str | None) -> None:
        self.current = Current(prop, schedule, replay)

    def saw(self, events: list[dict[str, Any]]) -> None:
        if not self.shard.loop:  # a loop's log records no recompiles
            super().saw(events)
        self._events = events

    def run(self, body: Callable[[], None]) -> None:
        current, self.current, self._events = self.current, None, None
        if current is None:  # a body this log was not told about: count it, write nothing
            super().run(body)
            return
        if self.shard.over_budget() and not self.failing:
            self.discarded += 1
            self.shard.skipped_for_budget += 1
            return
        self.round_examples += 1
        started = time.perf_counter()
        ok, violation = True, None
        try:
            super().run(body)
        except PropertyFailure as failure:
            ok, violation = False, str(failure)
            raise
        except Exception as error:
            ok, violation = False, f"toolkit error: {type(error).__name__}: {error}"
            raise
        finally:
            line = self.shard.episode_line(
                current,
                fired=self._fired(),
                ok=ok,
                violation=violation,
                seconds=time.perf_counter() - started,
                features=sorted(self.features_of(self._events)) if self._events else [],
                from_database=self.round_examples <= self.from_database,
                after_failure=self.failing,
            )
            if not ok:
                if not self.failing:
                    self.first_failure_line = line
                self.failing = True
                self.last_failure = line

    def _fired(self) -> list[str] | None:
        """A loop episode's fault kinds that fired (one drawn and never fired is not
        counted); None where the log cannot say (the trainer's faults fire or fail the run)."""
        if not self.shard.loop or self._events is None:
            return None
        from pathways_chaos.harness.properties.loop import fired_kinds

        return sorted(set(fired_kinds(self._events)))


class ShardSearch:
    """One shard: its plan, the code under test, the shared database, its output files."""

    def __init__(
        self,
        plan: ShardPlan,
        out_dir: Path,
        database: Any,
        *,
        trainer: str | None = None,
        loop: str | None = None,
        loop_topology: str = "4x2",
        budget_s: float = 120.0,
        examples_per_round: int = 5,
        max_rounds: int | None = None,
        shrink: bool = True,
    ) -> None:
        from pathways_chaos.harness.properties.episode_spec import REFERENCE_TRAINER

        self.plan = plan
        self.out_dir = out_dir
        self.database = database
        self.loop = loop
        self.loop_topology = loop_topology
        self.trainer = trainer or REFERENCE_TRAINER
        self.budget_s = budget_s
        self.examples_per_round = examples_per_round
        self.max_rounds = max_rounds
        self.shrink = shrink
        self.skipped_for_budget = 0
        self.schedules = 0
        self.seeds: list[int] = []
        self.findings: list[dict[str, Any]] = []
        self.flaky: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []
        #: Properties whose episode the budget's end cut short: not judged, never a finding.
        self.unfinished: list[dict[str, Any]] = []
        self.by_property: dict[str, int] = {}
        self._deadline = 0.0
        self._t0 = time.monotonic()
        self._round = 0
        self._seed = 0
        self._out: IO[str] | None = None
        self._loop_search: Any = None

    # -- what is searched, and under which key --------------------------------------------
    @property
    def subject(self) -> str:
        return f"loop {self.loop}" if self.loop else f"trainer {self.trainer}"

    def database_key(self, prop: str) -> bytes:
        """The property and the code under test, never the shard: every run shares it."""
        if self.loop:
            return self._loop().database_key(prop)  # the loop suite's own key
        return f"pathways-chaos search {prop} {self.trainer}".encode()

    def over_budget(self) -> bool:
        return time.monotonic() >= self._deadline

    # -- the files ---------------------------------------------------------------------------
    @property
    def episodes_path(self) -> Path:
        return self.out_dir / f"{self.plan.name}.jsonl"

    @property
    def report_path(self) -> Path:
        return self.out_dir / f"{self.plan.name}.json"

    def episode_line(
        self, current: Current, fired: list[str] | None = None, **fields: Any
    ) -> dict[str, Any]:
        """One episode's line; ``fault_kinds`` are those that fired where the log says so,
        ``scheduled_kinds`` those the schedule drew."""
        line = {
            "format": FORMAT,
            "shard": self.plan.index,
            "shards": self.plan.count,
            "property": current.prop,
            "seed": self._seed,
            "round": self._round,
            "schedule": current.schedule,
            "fault_kinds": fault_kinds(current.schedule) if fired is None else fired,
            "scheduled_kinds": fault_kinds(current.schedule),
            "replay": current.replay,
            **fields,
            "seconds": round(fields["seconds"], 3),
            "t": round(time.monotonic() - self._t0, 3),  # when it ended, from the shard's start
        }
        self.schedules += 1
        self.by_property[current.prop] = self.by_property.get(current.prop, 0) + 1
        assert self._out is not None
        self._out.write(json.dumps(line) + "\n")
        self._out.flush()  # a Pod killed mid-search still leaves what it ran
        return line

    # -- the search ------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Rounds until the budget (or ``max_rounds``) is spent; returns the shard's report."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        started = time.time()
        t0 = self._t0 = time.monotonic()
        self._deadline = t0 + self.budget_s
        todo = list(self.plan.properties)
        # A restarted Pod starts its shard over: the file says what this attempt ran. Made anew,
        # never written through a symlink someone planted on the shared volume.
        lost: DatabaseLost | None = None
        with (
            _hypothesis_home_of_its_own(),
            os.fdopen(open_fresh(self.episodes_path, what="episode log"), "w") as out,
        ):
            self._out = out
            try:
                self._rounds(todo)
            except DatabaseLost as error:  # the report below is still written: what ran
                lost = error
                self.errors.append({"property": "*", "seed": self._seed, "error": str(error)})
            self._out = None
        report = self.report(started, time.monotonic() - t0)
        write_atomic(self.report_path, (json.dumps(report, indent=2) + "\n").encode())
        if lost is not None:
            raise lost
        return report

    def _rounds(self, todo: list[str]) -> None:
        while todo and not self.over_budget():
            if self.max_rounds is not None and self._round >= self.max_rounds:
                break
            if self._round >= SEED_SPAN:
                break
            self._seed = self.plan.seed(self._round)
            self.seeds.append(self._seed)
            for prop in list(todo):
                if self.over_budget():
                    break
                with self._episodes_within_budget():
                    done = self._search(prop)
                if done:
                    todo.remove(prop)
            self._round += 1

    @contextlib.contextmanager
    def _episodes_within_budget(self) -> Iterator[None]:
        """No episode outlives the budget: a loop that hangs (its fault-free run included) is
        ended where the budget ends, plus ``EPISODE_GRACE_S``, not at the default deadline."""
        from pathways_chaos.harness.engine.deadline import default_deadline, set_default_deadline

        left = max(self._deadline - time.monotonic(), 0.0) + EPISODE_GRACE_S
        current = default_deadline()
        wall = round(left if current.wall_s is None else min(current.wall_s, left), 1)
        previous = set_default_deadline(dataclasses.replace(current, wall_s=wall))
        try:
            yield
        finally:
            set_default_deadline(previous)

    def _search(self, prop: str) -> bool:
        """One seeded search of ``prop``; True when it is done for this shard (it failed)."""
        from hypothesis.errors import FlakyFailure

        log = EpisodeLog(self)
        key = self.database_key(prop)
        try:
            log.from_database = saved(self.database, key)
            if self.loop:
                self._run_loop(prop, log)
            else:
                self._run_trainer(prop, log, key)
        except PropertyFailure as failure:
            if self.over_budget() and "wall-time deadline" in str(failure):
                # Ended by the budget's end (_episodes_within_budget), not by the code: a slow
                # correct loop is not a finding, nor is a hanging one judged by it.
                first = str(failure).splitlines()[0] if str(failure) else ""
                self.unfinished.append({"property": prop, "seed": self._seed, "message": first})
                return True
            self.findings.append(self._finding(prop, failure, log))
            return True
        except FlakyFailure as flaky:
            self._check_database(flaky, prop)
            self.flaky.append(
                {"property": prop, "seed": self._seed, "message": str(flaky).splitlines()[0]}
            )
            return True
        except Exception as error:  # the toolkit's bug, never the code under test's failure
            self._check_database(error, prop)
            self.errors.append(
                {
                    "property": prop,
                    "seed": self._seed,
                    "error": f"{type(error).__name__}: {error}",
                }
            )
            return True
        return False

    def _check_database(self, error: BaseException, prop: str) -> None:
        """A database that stopped answering ends the shard (every later example would fail
        the same way), as one line; anything else is left to the caller."""
        lost = database_failure(error)
        if lost is not None:
            raise DatabaseLost(
                f"the example database {describe(self.database)} stopped answering during "
                f"{prop} ({lost}): the shard stopped; what it ran is in {self.report_path}; "
                "restart the database and run the shard again"
            ) from None

    def _finding(self, prop: str, failure: PropertyFailure, log: EpisodeLog) -> dict[str, Any]:
        """The shrunk failure: hypothesis's last failing example is its shortest (it replays
        that one last); a loop's schedule is cut down further by ``LoopSearch.minimize``."""
        last = log.last_failure or {}
        schedule = getattr(failure, "schedule", None) or last.get("schedule", "")
        replay = last.get("replay")
        if self.loop:
            replay = self._loop().target.replay_command(schedule)
        first = log.first_failure_line or {}
        return {
            "property": prop,
            "subject": self.subject,
            "shard": self.plan.index,
            "seed": self._seed,
            "round": self._round,
            "schedule": schedule,
            "fault_kinds": fault_kinds(schedule),
            "replay": replay,
            "message": str(failure),
            "found_in_database": bool(first.get("from_database")),
            "first_schedule": first.get("schedule"),
            # Examples until the first failure, then hypothesis's shrinking ones.
            "examples_to_find": log.first_failure,
            "shrink_examples": log.examples - (log.first_failure or log.examples),
        }

    def _settings(self) -> Any:
        from hypothesis import HealthCheck, Phase, settings

        return settings(
            max_examples=self.examples_per_round,
            deadline=None,
            derandomize=False,  # the round's seed instead
            database=self.database,
            phases=tuple(
                p
                for p in Phase
                if p is not Phase.explain and (self.shrink or p is not Phase.shrink)
            ),
            suppress_health_check=list(HealthCheck),
            stateful_step_count=12,
            report_multiple_bugs=False,
            print_blob=False,
        )

    def _run_trainer(self, prop: str, log: EpisodeLog, key: bytes) -> None:
        from hypothesis import given
        from hypothesis.stateful import get_state_machine_test

        from pathways_chaos.harness.properties import (
            available_devices,
            check_dataset_episode,
            check_mesh_episode,
            check_snapshot_round_trip,
            dataset_specs,
            episode_features,
            episode_machine,
            mesh_specs,
            snapshot_cases,
        )
        from pathways_chaos.harness.properties.episode_spec import EpisodeSpec

        trainer, devices, settings = self.trainer, available_devices(), self._settings()
        log.features_of = episode_features

        def episode(name: str, check: Callable[..., None]) -> Callable[[EpisodeSpec], None]:
            def body(spec: EpisodeSpec) -> None:
                log.begin(name, spec.schedule, spec.replay_command())
                log.run(lambda: check(spec, log))

            return body

        test: Any
        if prop == "snapshot":

            @settings
            @given(case=snapshot_cases(max_devices=devices))
            def test(case: Any) -> None:
                lost = ",".join(f"replica_loss@slice={s}" for s in case.lost)
                log.begin("snapshot", lost, None)  # a round trip, not an episode: no replay
                log.run(lambda: check_snapshot_round_trip(case, trainer))

        elif prop == "dataset":
            test = settings(
                given(spec=dataset_specs(devices, trainer))(episode(prop, check_dataset_episode))
            )
        elif prop == "mesh":
            test = settings(
                given(spec=mesh_specs(devices, trainer))(episode(prop, check_mesh_episode))
            )
        elif prop == "stateful":
            base = episode_machine(trainer, log)

            class ShardMachine(base):  # type: ignore[misc,valid-type]
                def spec(self) -> Any:
                    spec = super().spec()
                    log.begin("stateful", spec.schedule, spec.replay_command())
                    return spec

            test = get_state_machine_test(ShardMachine, settings=settings)
        else:
            raise ValueError(f"no property {prop!r}")
        test._hypothesis_internal_database_key = key
        # What @seed(n) sets, without the database=None @seed adds.
        test._hypothesis_internal_use_seed = self._seed
        test()

    # -- a user's loop -------------------------------------------------------------------------
    def _loop(self) -> Any:
        if self._loop_search is None:
            from pathways_chaos.harness.properties.loop import (
                LoopSearch,
                LoopTarget,
                SearchStats,
                loop_features,
            )

            class ShardStats(SearchStats):
                """The loop search's figures; each episode's log goes to the episode line too."""

                log: EpisodeLog | None = None

                def note(self, prop: str, writer: Any, events: list[Any], seconds: float) -> None:
                    super().note(prop, writer, events, seconds)
                    if self.log is not None:
                        self.log.saw(events)

            class ShardLoopSearch(LoopSearch):
                """The loop search, one episode line per schedule it runs."""

                log: EpisodeLog | None = None

                def check(self, prop: str, writer: Any) -> None:
                    log = self.log
                    assert log is not None
                    schedule = writer.text()
                    log.begin(prop, schedule, self.target.replay_command(schedule))
                    log.run(lambda: LoopSearch.check(self, prop, writer))

            target = LoopTarget(str(self.loop), topology=self.loop_topology)
            search = ShardLoopSearch(
                target,
                profile="search",
                budget_s=None,
                database=self.database,
                max_examples=self.examples_per_round,
                shrink=self.shrink,
            )
            search.stats = ShardStats(loop=target.spec, profile="search", budget_s=None)
            self._loop_search = search
            self._loop_features = loop_features
        return self._loop_search

    def _run_loop(self, prop: str, log: EpisodeLog) -> None:
        search = self._loop()
        log.features_of = self._loop_features
        search.log = search.stats.log = log
        search.seed = self._seed
        search.run(prop)

    # -- the report ------------------------------------------------------------------------
    def report(self, started: float, wall_s: float) -> dict[str, Any]:
        plan = self.plan
        return {
            "format": FORMAT,
            "shard": plan.index,
            "shards": plan.count,
            "name": plan.name,
            "subject": self.subject,
            "properties": list(plan.properties),
            "base_seed": plan.base_seed,
            "seed_range": [plan.first_seed, plan.first_seed + SEED_SPAN - 1],
            "seeds": self.seeds,
            "examples_per_round": self.examples_per_round,
            "budget_s": self.budget_s,
            "wall_s": round(wall_s, 2),
            "started": started,
            "schedules": self.schedules,
            "by_property": self.by_property,
            "skipped_for_budget": self.skipped_for_budget,
            "findings": self.findings,
            # A loop's schedules that failed once and passed when run again (LoopSearch's own).
            "flaky": self.flaky
            + ([] if self._loop_search is None else list(self._loop_search.stats.flaky)),
            "errors": self.errors,
            "unfinished": self.unfinished,
            "database": describe(self.database),
            "host": socket.gethostname(),
            "pod": os.environ.get("HOSTNAME", ""),
            "episodes": self.episodes_path.name,
        }


@contextlib.contextmanager
def _hypothesis_home_of_its_own() -> Iterator[None]:
    """hypothesis keeps files of its own (besides the example database) in ``.hypothesis`` of
    the folder the command runs in: a shard gives it a temporary folder instead, removed
    after, so a search leaves nothing outside ``--out`` and ``--database``."""
    from hypothesis import configuration

    before = getattr(configuration, "__hypothesis_home_directory", None)
    with tempfile.TemporaryDirectory(prefix="pathways-chaos-hypothesis-") as home:
        configuration.set_hypothesis_home_dir(home)
        try:
            yield
        finally:
            configuration.set_hypothesis_home_dir(before)
