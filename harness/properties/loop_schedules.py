"""Fault schedules for a user's loop, written scenario by scenario from what its fault-free run
showed (how many batches and saves): every schedule is one a correct loop survives (slice 0 is
never lost, every loss comes back, the attempts stay within the loop's retry budget)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from pathways_chaos.harness.properties.settings import LOSS_KINDS

#: Fault scenarios a loop is searched with; each one is one or two schedule entries.
LOOP_SCENARIOS = (
    "slice_down",  # a slice-down code (each of LOSS_KINDS), back after 1-3 health polls
    "loss_and_repair",  # lost, then repaired by a later entry
    "flapping",  # lost, back, lost again once touched a few times
    "loss_during_a_save",  # lost at the loop's Nth Snapshotter save
    "loss_during_a_restore",  # a loss, then another at the restore it causes
    "slow_save_then_failure",  # a save held in flight, a loss or retried error meanwhile
    "retried_error",  # a slice-down code raised with no slice lost (a retried error)
    "callback_error",  # a retried error, then an error in the elastic-event callback it calls
    "preemption",  # SIGTERM: a loop that handles it checkpoints, and a new run resumes
)
#: An ending, not a fault: the program's own error (INVALID_ARGUMENT) after every other entry
#: has fired must end the run (a loop retrying or swallowing it hides a bug). Only the snapshot
#: family draws it: in the stateful machine it cut the runs short that two faults in order
#: need (the bench's time to the first failure of snapshot_step_after_resume went 10 -> 45 s).
PROGRAM_ERROR = "program_error"

#: Elastic attempts each scenario may cost (a loop's retry policy is finite): a schedule's
#: scenarios together cost at most ``MAX_ATTEMPT_COST``.
ATTEMPT_COST = {
    "slice_down": 1,
    "loss_and_repair": 1,
    "flapping": 3,
    "loss_during_a_save": 1,
    "loss_during_a_restore": 2,
    "slow_save_then_failure": 1,
    "retried_error": 1,
    "callback_error": 2,
    "preemption": 0,
    PROGRAM_ERROR: 0,
}
MAX_ATTEMPT_COST = 4
#: Preemptions per schedule: an episode runs the loop at most three times.
MAX_PREEMPTIONS = 2

#: The property families: each draws its schedules from these scenarios.
FAMILIES = {
    "snapshot": (
        "slice_down",
        "loss_during_a_save",
        "loss_during_a_restore",
        "slow_save_then_failure",
        "retried_error",
        PROGRAM_ERROR,
    ),
    "dataset": ("slice_down", "loss_and_repair", "retried_error", "preemption"),
    "mesh": ("slice_down", "loss_and_repair", "flapping"),
    "stateful": LOOP_SCENARIOS,
}


@dataclasses.dataclass(frozen=True)
class LoopShape:
    """What the fault-free run shows: how many batches and saves, how long it took."""

    batches: int
    saves: int
    seconds: float

    @classmethod
    def of(cls, events: list[dict[str, Any]], seconds: float) -> LoopShape:
        batches = sum(1 for e in events if e["kind"] == "batch")
        saves = sum(1 for e in events if e["kind"] == "snapshot_save" and not e.get("skipped"))
        return cls(batches, saves, seconds)


@dataclasses.dataclass
class ScheduleWriter:
    """Writes a schedule scenario by scenario, at batches that only move forward.

    It keeps the schedule one a correct loop survives: slice 0 is never lost, every loss comes
    back, the scenarios' attempts stay within ``MAX_ATTEMPT_COST``, at most two preemptions.
    """

    shape: LoopShape
    num_slices: int
    batch: int = 1
    restores: int = 0
    cost: int = 0
    preemptions: int = 0
    entries: list[str] = dataclasses.field(default_factory=list)
    scenarios: list[str] = dataclasses.field(default_factory=list)
    #: Slices an explicit ``repair`` entry will bring back: no other scenario loses them.
    reserved: set[int] = dataclasses.field(default_factory=set)
    #: Slices some entry loses (a repair is written only for a slice lost once).
    touched: set[int] = dataclasses.field(default_factory=set)
    #: A program error was written: the run ends there, so nothing may follow it.
    ended: bool = False

    @property
    def last_batch(self) -> int:
        return max(1, self.shape.batches)

    def can(self, what: str) -> bool:
        if self.ended or self.cost + ATTEMPT_COST[what] > MAX_ATTEMPT_COST:
            return False
        if what == PROGRAM_ERROR:  # after every other entry has fired
            after = self._after_every_entry()
            return after is not None and after <= self.last_batch
        if what == "preemption":
            return self.preemptions < MAX_PREEMPTIONS
        if what in ("retried_error", "slow_save_then_failure", "callback_error"):
            return what != "slow_save_then_failure" or self.shape.saves > 0
        if what == "loss_during_a_save" and self.shape.saves == 0:
            return False
        return bool(self.free_slices())  # the rest lose a slice other than slice 0

    def free_slices(self) -> list[int]:
        """Slices a scenario may lose: never slice 0, never one with a repair to come.

        A repair written for one loss must not land right after another loss of the same
        slice: the fake cluster deletes a lost slice's arrays at the loss, and a slice repaired
        before the loop touched them makes the loop read deleted arrays ("RuntimeError: Array
        has been deleted"), which no real slice does. Found by the dev profile on the sample
        loop: raise_error@batch=2:code=DATA_LOSS,repair@batch=7:slice=1,
        data_loss@save=2:slice=1:repair_after_polls=1 (REPAIR_SAME_STEP for trainers).
        """
        return [s for s in range(1, self.num_slices) if s not in self.reserved]

    def advance(self, batches: int) -> None:
        self.batch = min(self.batch + batches, self.last_batch)

    def write(self, draw: Callable[[st.SearchStrategy[Any]], Any], what: str) -> None:
        """Appends ``what`` at the current batch (a retried error instead, where it cannot be)."""
        if not self.can(what):
            what = "retried_error" if self.can("retried_error") else ""
            if not what:
                return
        self.scenarios.append(what)
        self.cost += ATTEMPT_COST[what]
        getattr(self, "_" + what)(draw)

    def text(self) -> str:
        return ",".join(self.entries)

    def __repr__(self) -> str:  # what hypothesis prints for a failing example: the schedule
        return f"ScheduleWriter(schedule={self.text()!r}, scenarios={self.scenarios!r})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # hypothesis's printer
        del cycle
        printer.text(repr(self))

    # one method per scenario
    def _loss(
        self,
        draw: Callable[..., Any],
        trigger: str,
        polls: int | None = None,
        untouched: bool = False,
    ) -> int:
        free = [s for s in self.free_slices() if not (untouched and s in self.touched)]
        if not free:  # the slices left are reserved: a retried error stands in for the loss
            self._retried_error(draw)
            return -1
        s = draw(st.sampled_from(free))
        kind = draw(st.sampled_from(LOSS_KINDS))
        polls = draw(st.integers(1, 3)) if polls is None else polls
        self.entries.append(f"{kind}@{trigger}:slice={s}:repair_after_polls={polls}")
        self.restores += 1
        self.touched.add(s)
        return s

    def _slice_down(self, draw: Callable[..., Any]) -> None:
        how = draw(st.sampled_from(["batch", "batch", "batch", "time", "attempt"]))
        if how == "time":  # the episode clock runs at least a second a batch
            trigger = f"time={self.batch + draw(st.integers(0, 3))}"
        elif how == "attempt" and self.restores:
            trigger = f"attempt={min(self.restores + 1, 3)}"
        else:
            trigger = f"batch={self.batch}"
        self._loss(draw, trigger)

    def _loss_and_repair(self, draw: Callable[..., Any]) -> None:
        # Back by itself after 4-6 polls at the latest (a pause-and-resume loop draws no
        # batch until then), repaired at a later batch before that when the loop goes on.
        # A slice no entry lost before (a flapping one, or one lost at a save or a time,
        # may go down again just before this repair).
        s = self._loss(draw, f"batch={self.batch}", polls=draw(st.integers(4, 6)), untouched=True)
        if s < 0:
            return
        later = min(self.batch + draw(st.integers(1, 5)), self.last_batch)
        if later > self.batch:  # never at the batch of the loss itself
            self.entries.append(f"repair@batch={later}:slice={s}")
            self.reserved.add(s)

    def _flapping(self, draw: Callable[..., Any]) -> None:
        s = draw(st.sampled_from(self.free_slices()))
        times, up = draw(st.integers(1, 3)), draw(st.integers(2, 6))
        self.entries.append(f"flapping@batch={self.batch}:slice={s}:times={times}:up_accesses={up}")
        self.touched.add(s)
        self.restores += times

    def _save_near(self, draw: Callable[..., Any]) -> int:
        """The Nth save at about the current batch (saves are counted over the episode)."""
        near = math.ceil(self.batch * self.shape.saves / self.last_batch)
        return int(min(max(1, near + draw(st.integers(0, 1))), self.shape.saves))

    def _loss_during_a_save(self, draw: Callable[..., Any]) -> None:
        self._loss(draw, f"save={self._save_near(draw)}")

    def _loss_during_a_restore(self, draw: Callable[..., Any]) -> None:
        self._loss(draw, f"batch={self.batch}")
        self._loss(draw, f"restore={self.restores}")

    def _slow_save_then_failure(self, draw: Callable[..., Any]) -> None:
        if draw(st.booleans()):
            hold = f"seconds={draw(st.integers(2, 6))}"
        else:
            hold = f"polls={draw(st.integers(1, 3))}"
        self.entries.append(f"slow_save@batch={self.batch}:{hold}")
        every = max(1, self.last_batch // max(1, self.shape.saves))  # batches between saves
        self.advance(draw(st.integers(1, every + 1)))
        if self.free_slices() and draw(st.booleans()):
            self._loss(draw, f"batch={self.batch}")
        else:
            self._retried_error(draw)

    def _retried_error(self, draw: Callable[..., Any]) -> None:
        code = draw(st.sampled_from([k.upper() for k in LOSS_KINDS]))
        self.entries.append(f"raise_error@batch={self.batch}:code={code}")
        self.restores += 1

    def _callback_error(self, draw: Callable[..., Any]) -> None:
        """The callback pathwaysutils calls for the retry this error causes raises INTERNAL
        when it next uses a device (``callback=`` counts the episode's callback calls, about
        one per restore; a callback that uses no device never meets it, said unfired)."""
        self._retried_error(draw)
        self.entries.append(f"callback_error@callback={self.restores}")
        self.restores += 1

    def _after_every_entry(self) -> int | None:
        """The first batch after every entry has fired; None when an entry fires on anything
        but a batch (a time, a save, a restore, an attempt), which no batch is sure to follow."""
        triggers = [e.partition("@")[2].partition(":")[0] for e in self.entries]
        if not all(t.startswith("batch=") for t in triggers):
            return None
        return max([self.batch, *(int(t.removeprefix("batch=")) + 1 for t in triggers)])

    def _program_error(self, draw: Callable[..., Any]) -> None:
        del draw
        after = self._after_every_entry()
        assert after is not None  # can() held
        self.batch = after
        self.entries.append(f"raise_error@batch={self.batch}:code=INVALID_ARGUMENT")
        self.ended = True

    def _preemption(self, draw: Callable[..., Any]) -> None:
        del draw
        self.preemptions += 1
        self.entries.append(f"preemption@batch={self.batch}")


@st.composite
def loop_schedules(
    draw: st.DrawFn, shape: LoopShape, num_slices: int, family: str = "stateful"
) -> ScheduleWriter:
    """One to three scenarios of ``family`` at batches that move forward through the run."""
    writer = ScheduleWriter(shape, num_slices)
    for _ in range(draw(st.integers(1, 3))):
        writer.advance(draw(st.integers(0, max(1, shape.batches // 3))))
        writer.write(draw, draw(st.sampled_from(FAMILIES[family])))
    return writer
