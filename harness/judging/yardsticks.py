"""The loop's verdict with the runs it is measured against, made when the judge asks for them.

The fault-free run (``baseline``) is the yardstick of the final state while the recovery kept
the batch schedule. When it changed it (resize mode, a batch that scales with the slices), two
more runs of the same loop are made through ``rerun``:

- the **clean rerun** (``clean_rerun.clean_schedule``): the same losses right after the
  snapshot the episode resumed from. Its final state is what a recovery that threw no work
  away ends with; it rules out work thrown away leaking into the state. Both runs are also
  made when the state differs from the fault-free run's after a lost slice changed the mesh:
  the sums then ran in another order, which low-precision steps carry on, and the difference
  is that rounding alone when the clean rerun (the run's meshes) ends in the very same state
  and the probe (the fault-free meshes) in the fault-free run's;
- the **restore probe**: a slice-down error (``DATA_LOSS``) raised right after that snapshot
  with every slice kept. The retry restores the snapshot on the same meshes, so the batch
  schedule is the fault-free run's, and so must be the final state. The clean rerun cannot see
  state the snapshot does not hold (a PRNG key or a learning-rate counter kept outside it): it
  restores the same way, and shares the bug. The probe sees it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pathways_chaos.harness.engine.recorder import Event
from pathways_chaos.harness.judging.verdict import Verdict, judge_error

if TYPE_CHECKING:
    from pathways_chaos.faults.model import Schedule
    from pathways_chaos.harness.judging.loop_oracle import Reruns

#: ``rerun(schedule, checkpoint_dir, name)``: the same loop under another schedule, its log
#: named ``name`` beside the episode's; its events, or why they cannot be used.
Rerun = Callable[["Schedule", Path | None, str], tuple[Sequence[Event] | None, str]]


@dataclasses.dataclass
class YardstickRuns:
    """Yardstick runs already made for one loop, options and topology, by name and schedule.

    A search over one loop asks for the same clean rerun from many schedules (a loss moved to
    the same save); a deterministic loop makes the same run each time, as the search already
    takes its one fault-free run to be. A run that did not complete is not kept; with
    ``keep=False`` none is (every run made anew, still counted)."""

    keep: bool = True
    runs: dict[str, Sequence[Event]] = dataclasses.field(default_factory=dict)
    made: int = 0
    reused: int = 0

    def rerun_through(self, rerun: Rerun) -> Rerun:
        def remembered(plan: Schedule, where: Path | None, name: str) -> tuple[Any, str]:
            key = f"{name} {plan.to_text()}"
            if key in self.runs:
                self.reused += 1
                return self.runs[key], ""
            events, why_not = rerun(plan, where, name)
            self.made += 1
            if events is not None and self.keep:
                self.runs[key] = events
            return events, why_not

        return remembered


def judge_with_yardsticks(
    events: Sequence[Event],
    baseline: Sequence[Event] | None,
    *,
    reruns: bool,
    checkpoint_dir: str | Path | None,
    rerun: Rerun,
    made: YardstickRuns | None = None,
) -> Verdict:
    """The loop judge's verdict; when the recovery changed the batch schedule, judged again
    with the clean rerun and the restore probe (``reruns``: make them at all; ``made``: the
    ones already made for this loop, reused)."""
    from pathways_chaos.faults.model import parse_schedule
    from pathways_chaos.harness.judging.clean_rerun import clean_schedule, restore_probe

    if made is not None:
        rerun = made.rerun_through(rerun)

    verdict = guarded_judge(events, baseline)
    why = verdict.not_judged.get("final-state", "")
    if not (reruns and baseline is not None and verdict.completed):
        return verdict
    remeshed = "final-state" in verdict.failed and meshes_changed(events, baseline)
    if "changed the batch schedule" not in why and not remeshed:
        return verdict
    text, why_not = clean_schedule(events)
    clean = probe = None
    probe_why_not = why_not
    if text is not None:
        where = None if checkpoint_dir is None else Path(f"{checkpoint_dir}-clean")
        clean, why_not = rerun(parse_schedule(text), where, "clean")
        probe_text = restore_probe(text)
        probe_why_not = "the clean rerun moved no loss to a save"
        if probe_text is not None:
            where = None if checkpoint_dir is None else Path(f"{checkpoint_dir}-probe")
            probe, probe_why_not = rerun(parse_schedule(probe_text), where, "probe")
    from pathways_chaos.harness.judging.loop_oracle import Reruns

    return guarded_judge(events, baseline, Reruns(clean, why_not, probe, probe_why_not))


def meshes_changed(events: Sequence[Event], baseline: Sequence[Event]) -> bool:
    """Whether the episode trained on a mesh shape the fault-free run never built (a lost
    slice): its sums ran in another order, so its state may differ by rounding alone."""

    def shapes(log: Sequence[Event]) -> set[tuple[int, ...]]:
        return {tuple(e.get("shape") or ()) for e in log if e["kind"] == "mesh"}

    return bool(shapes(events) - shapes(baseline))


def guarded_judge(
    events: Sequence[Event], baseline: Sequence[Event] | None, reruns: Reruns | None = None
) -> Verdict:
    """The loop judge, whose own exception (a bug in pathways-chaos) comes back as the verdict's
    ``judge_errors`` with its traceback: never the loop's failure, never a pass."""
    from pathways_chaos.harness.judging import loop_oracle

    try:
        return loop_oracle.judge_loop(events, baseline, reruns)
    except Exception as failure:
        ends = [e for e in events if e["kind"] == "run_end"]
        return Verdict(
            completed=bool(ends) and ends[-1]["status"] == "completed",
            central=loop_oracle.CENTRAL_JUDGES,
            judge_errors={"loop-judge": judge_error(failure)},
        )
