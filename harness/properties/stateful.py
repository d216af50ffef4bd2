"""Property 4, end to end: a state machine writes a fault schedule rule by rule; the oracle
judges the episode it makes."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from pathways_chaos.harness.properties.episode_spec import (
    REFERENCE_TRAINER,
    EpisodeSpec,
    judge,
    run_spec,
)
from pathways_chaos.harness.properties.settings import LOSS_KINDS, ExampleCounter, fail

STATEFUL_SLICES = 4
STATEFUL_STEPS = 10
STATEFUL_MAX_ATTEMPTS = 8
STATEFUL_MAX_FAULTS = 4
#: Seconds between the monitor's health polls in stateful episodes (a step is 1 s on the
#: episode clock): a slice back after 1-3 polls rejoins within the 10-step run, so in-loop
#: scale-ups happen inside it.
STATEFUL_POLL_INTERVAL = 1

#: The stateful machine's fault scenarios, one drawn per ``fault`` rule: a loss whose slice
#: stays down (a later ``repair`` scenario may bring it back), a loss whose slice rejoins
#: after 1-3 polls
#: (an in-loop scale-up or, in signal mode, a restart), a retried INTERNAL error, a save held in
#: flight with a failure the step after it, an error in the elastic-event callback, a
#: preemption (a new run from the persisted checkpoint).
SCENARIOS = (
    "loss_then_rejoin",
    "repair",
    "loss",
    "failure_during_a_slow_save",
    "transient_internal_error",
    "error_in_the_elastic_callback",
    "preemption",
)

#: How a stateful episode must end, drawn once per example: completed (six in eight), a
#: user's INVALID_ARGUMENT that must end the run, or a host-callback bug (INTERNAL on every
#: attempt) that must exhaust the retry policy.
ENDINGS = ("completed",) * 6 + ("invalid_argument", "host_callback_bug")

#: What the figures count per stateful episode (``episode_features``).
FEATURES = (
    "loss",
    "repair",
    "in-loop scale-up",
    "mesh shrink",
    "failure during an in-flight save",
    "loss during an in-flight save",
    "callback error",
)


def episode_features(events: list[dict[str, Any]]) -> set[str]:
    """Which of ``FEATURES`` an episode's log shows (for hypothesis statistics and the bench)."""
    out: set[str] = set()
    held: set[tuple[int, int]] = set()
    last_mesh: int | None = None
    for e in events:
        kind = e["kind"]
        if kind == "fault" and "touched" in e:
            fault = e["fault"]
            if "repair_after_polls" in fault:
                out.add("loss")
                if held:
                    out.add("loss during an in-flight save")
                if fault["repair_after_polls"]:
                    out.add("repair")
            elif fault["kind"] == "repair":
                out.add("repair")
        elif kind == "fault" and e["fault"]["kind"] == "callback_error":
            out.add("callback error")
        elif kind == "save_held":
            held.add((e.get("run", 0), e["step"]))
        elif kind in ("save_released", "save_dropped"):
            held.discard((e.get("run", 0), e["step"]))
            if kind == "save_dropped" and "lost" in e.get("reason", ""):
                # The gate drops the held save inside the loss, before its fault event.
                out.add("loss during an in-flight save")
        elif kind == "error" and held:
            out.add("failure during an in-flight save")
        elif kind == "scale_up" and e.get("how") == "in_loop":
            out.add("in-loop scale-up")
        elif kind == "mesh":
            n = len(e["slices"])
            if last_mesh is not None and n < last_mesh:
                out.add("mesh shrink")
            last_mesh = n
        elif kind == "run_start":
            held.clear()
    return out


def note_features(events: list[dict[str, Any]], counter: ExampleCounter | None) -> None:
    """Feeds ``--hypothesis-show-statistics`` (and the bench's counter)."""
    from hypothesis import event
    from hypothesis.control import currently_in_test_context

    features = episode_features(events)
    if currently_in_test_context():
        for name in sorted(features):
            event(f"episode includes: {name}")
    if counter is not None:
        counter.features.append(features)


def _in_flight_exception() -> BaseException | None:
    import sys

    return sys.exc_info()[1]


def episode_machine(
    trainer: str = REFERENCE_TRAINER,
    counter: ExampleCounter | None = None,
    devices_per_slice: int = 1,
) -> type[RuleBasedStateMachine]:
    """A state machine whose rules write a fault schedule and whose teardown judges it.

    Rules are fault scenarios (``SCENARIOS``: losses, rejoins, a failure while a save is in
    flight, an error in the elastic-event callback, preemption) at steps that only move
    forward, and repairs; the ending (completed or one of two terminal errors) is drawn once,
    in ``configure``. The model keeps the schedule meaningful (never the last healthy slice;
    a repair only of a lost one). The trainer's loop is one call (and SIGTERM reaches only
    the main thread), so the episode runs in teardown, once the rules are done. An example
    hypothesis is throwing away (it ran out of data, or a rule failed: an exception is in
    flight) runs no episode, so no failure is reported from an example hypothesis discards.
    """
    # One piece (over 80 lines): the state machine class is built here so that its rules and
    # teardown close over ``trainer`` and ``counter``; hypothesis collects rules from the class.

    class EpisodeMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.entries: list[str] = []
            self.step = 0
            self.healthy = set(range(STATEFUL_SLICES))
            self.lost_at: dict[int, int] = {}  # slice -> the step it was lost at
            self.faults = 0
            self.open = True
            self.mode, self.scale_up, self.interval = "resize", "in_loop", 2
            self.preemptions = 0
            self.ending, self.end_at = "completed", STATEFUL_STEPS - 1

        @initialize(
            # resize and in-loop scale-up more often: they are where meshes shrink and grow
            mode=st.sampled_from(["resize", "resize", "resize", "pause_resume"]),
            scale_up=st.sampled_from(["in_loop", "in_loop", "signal", "off"]),
            interval=st.integers(1, 4),
            ending=st.sampled_from(ENDINGS),
            end_at=st.integers(0, STATEFUL_STEPS - 1),
        )
        def configure(
            self, mode: str, scale_up: str, interval: int, ending: str, end_at: int
        ) -> None:
            """The run's shape, and how it must end (drawn here, not by a rule: a rule that
            ends the schedule would be picked as often as every fault together)."""
            self.mode, self.scale_up, self.interval = mode, scale_up, interval
            self.ending, self.end_at = ending, end_at
            if ending == "host_callback_bug":
                self.open = False  # INTERNAL on every attempt: no other fault matters

        def _can_fault(self, n: int = 1) -> bool:
            return self.open and self.faults + n <= STATEFUL_MAX_FAULTS

        def _add(self, text: str) -> None:
            self.entries.append(text)
            self.faults += 1

        def _advance(self, steps: int) -> None:
            self.step = min(self.step + steps, STATEFUL_STEPS - 1)

        # One rule, with no precondition: hypothesis draws a rule, then retries while the rule
        # it drew is disabled, and gives the whole example up after a few (39% of examples
        # were invalid so); and a no-op rule, the "simplest", was drawn more than any fault.
        @rule(what=st.sampled_from(SCENARIOS), advance=st.integers(0, 2), data=st.data())
        def fault(self, what: str, advance: int, data: st.DataObject) -> None:
            """One fault scenario at the current step (``SCENARIOS``, drawn evenly)."""
            if not self._can_fault():
                return
            self._advance(advance)
            if what in ("loss", "loss_then_rejoin", "repair") and len(self.healthy) < 2:
                what = "transient_internal_error"
            if what == "preemption" and (self.mode != "resize" or self.preemptions >= 2):
                what = "transient_internal_error"
            if what in ("failure_during_a_slow_save", "error_in_the_elastic_callback") and (
                not self._can_fault(2) or self.step >= STATEFUL_STEPS - 2
            ):
                what = "transient_internal_error"
            getattr(self, "_" + what)(data)

        def _loss(self, data: st.DataObject, polls: int | None = None) -> None:
            s = data.draw(st.sampled_from(sorted(self.healthy)), label="slice")
            kind = data.draw(st.sampled_from(LOSS_KINDS), label="kind")
            if polls is None:
                polls = data.draw(st.integers(0, 3), label="repair_after_polls")
            if self.mode == "pause_resume":
                polls = max(polls, 1)  # it waits for every slice: this one must come back
            # A slice back after some polls is still not counted healthy: another loss before
            # it is back must not take the last replica of the snapshot with it.
            self.healthy.discard(s)
            if not polls:
                self.lost_at[s] = self.step
            back = f":repair_after_polls={polls}" if polls else ""
            self._add(f"{kind}@step={self.step}:slice={s}{back}")

        def _loss_then_rejoin(self, data: st.DataObject) -> None:
            self._loss(data, polls=data.draw(st.integers(1, 3), label="repair_after_polls"))

        def _transient_internal_error(self, data: st.DataObject) -> None:
            del data
            self._add(f"raise_error@step={self.step}:code=INTERNAL")

        def _failure_during_a_slow_save(self, data: st.DataObject) -> None:
            """The next save stays in flight some seconds; a failure comes the step after it."""
            seconds = data.draw(st.integers(2, 5), label="seconds")
            self._add(f"slow_save@step={self.step}:seconds={seconds}")
            saved_at = -(-self.step // self.interval) * self.interval  # the held save's step
            at = min(saved_at + 1, STATEFUL_STEPS - 1)
            self.step = max(self.step, at)
            then = data.draw(st.sampled_from(["loss", "internal", "internal"]), label="then")
            if then == "loss" and len(self.healthy) > 1:
                self._loss(data, polls=0)
            else:
                self._add(f"raise_error@step={self.step}:code=INTERNAL")

        def _error_in_the_elastic_callback(self, data: st.DataObject) -> None:
            """A retried failure whose elastic-event callback meets a slice-down error."""
            del data
            self._add(f"raise_error@step={self.step}:code=INTERNAL")
            self._add("callback_error@callback=1")

        def _preemption(self, data: st.DataObject) -> None:
            del data
            self.preemptions += 1
            self._add(f"preemption@step={self.step}")

        def _repairable(self) -> list[int]:
            # Not at the step of its loss: see REPAIR_SAME_STEP.
            return sorted(s for s, at in self.lost_at.items() if at < self.step)

        def _repair(self, data: st.DataObject) -> None:
            """A slice lost for good comes back (a loss instead, when none is down)."""
            if not self._repairable():
                self._loss(data)
                return
            s = data.draw(st.sampled_from(self._repairable()), label="slice")
            after_polls = data.draw(st.integers(0, 2), label="after_polls")
            del self.lost_at[s]
            self.healthy.add(s)
            polls = f":after_polls={after_polls}" if after_polls else ""
            self._add(f"repair@step={self.step}:slice={s}{polls}")

        @invariant()
        def schedule_keeps_a_slice(self) -> None:
            # The model's own invariant: the generated schedule never loses every slice.
            assert self.healthy, f"schedule {self.entries} loses every slice"

        def schedule(self) -> tuple[list[str], str]:
            """The entries and the outcome they must have, with the drawn ending."""
            if self.ending == "invalid_argument":
                # A user bug that is no lost slice: it must end the run.
                bug = f"raise_error@step={self.end_at}:code=INVALID_ARGUMENT"
                return [*self.entries, bug], "error:INVALID_ARGUMENT"
            if self.ending == "host_callback_bug":
                # A Python exception in a host callback: INTERNAL on every attempt.
                every = [
                    f"raise_error@attempt={n}:code=INTERNAL"
                    for n in range(2, STATEFUL_MAX_ATTEMPTS + 2)
                ]
                return [f"raise_error@step={self.end_at}:code=INTERNAL", *every], (
                    "retries_exhausted"
                )
            return list(self.entries), "completed"

        def spec(self) -> EpisodeSpec:
            entries, expect = self.schedule()
            return EpisodeSpec(
                schedule=",".join(entries),
                slices=STATEFUL_SLICES,
                devices_per_slice=devices_per_slice,
                mode=self.mode,
                scale_up=self.scale_up,
                steps=STATEFUL_STEPS,
                snapshot_interval=self.interval,
                global_batch=2 * STATEFUL_SLICES,
                max_attempts=STATEFUL_MAX_ATTEMPTS,
                poll_interval=STATEFUL_POLL_INTERVAL,
                expect=expect,
                trainer=trainer,
            )

        def teardown(self) -> None:
            if _in_flight_exception() is not None:
                # Hypothesis is discarding this example (out of data) or a rule failed: an
                # episode here would be judged and then thrown away, so none runs.
                if counter is not None:
                    counter.discarded += 1
                return
            spec = self.spec()

            def body() -> None:
                outcome = run_spec(spec)
                events = outcome.events
                note_features(events, counter)
                if counter is not None:
                    counter.saw(events)
                fail("end-to-end (stateful)", judge(events, spec, outcome.verdict), spec)

            if counter is None:
                body()
            else:
                counter.run(body)

    EpisodeMachine.__name__ = EpisodeMachine.__qualname__ = "EpisodeMachine"
    return EpisodeMachine
