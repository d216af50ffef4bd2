"""What "survived" means for a user's own loop, from the black-box log alone.

The observer sees batches (data positions, sample ids), snapshot saves and restores, attempts,
meshes and live arrays, never the loop's step counter except where the loop hands it to the
Snapshotter. The committed lineage is rebuilt as for the reference trainer: the last
attempt's batches, back through the restore that started it to the batches drawn before the
save it restored, and so on. Each judge says whether it applied; one that could not says why
(``not_judged``), so a verdict never passes on a check that did not run.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence

from pathways_chaos.harness.engine.recorder import Event
from pathways_chaos.harness.judging import chain_judges
from pathways_chaos.harness.judging import lineage as chain_checks
from pathways_chaos.harness.judging.final_values import leaf_array as _array
from pathways_chaos.harness.judging.final_values import (
    worst_outside_tolerance as _worst_outside_tolerance,
)
from pathways_chaos.harness.judging.loop_causes import cause_of, causes_named
from pathways_chaos.harness.judging.loop_lineage import (
    BatchRecord,
    batch_sizes,
    batches_per_step,
    committed_batches,
    restored_unseen,
)
from pathways_chaos.harness.judging.oracle import JUDGE_FAILED, Verdict, recoveries
from pathways_chaos.harness.judging.process_exit import process_exit as _process_exit
from pathways_chaos.harness.judging.replay import REPLAY_ATOL, REPLAY_RTOL
from pathways_chaos.harness.judging.restore_latest import restore_latest
from pathways_chaos.harness.judging.resume_step import resume_step
from pathways_chaos.harness.judging.run_outcome import completed as run_completed
from pathways_chaos.harness.judging.run_outcome import did_something, faults_fired
from pathways_chaos.harness.judging.wording import plural as _plural

#: Every judge, in the order the verdict lists them: causes before the effects they lead to
#: (a swallowed error or a snapshot that pairs the wrong position before the samples it made
#: skip; a crash, the end of many a cause, listed after any other finding).
JUDGES = (
    "process-exit",
    "faults-fired",
    "completed",
    "errors-handled",
    "snapshot-pairs",
    "restore-latest",
    "resume-step",
    "restore-used",
    "restore-shapes",
    "meshes",
    "scale-up",
    "exactly-once",
    "no-leaks",
    "step-count",
    "final-state",
)
#: The judges a pass needs: the faults happened, every sample was trained exactly once, the
#: final state is the fault-free run's. Without any of them a pass judged nothing that matters.
CENTRAL_JUDGES = ("faults-fired", "exactly-once", "final-state")
_LOSS_KINDS = frozenset(
    {"data_loss", "deadline_exceeded", "not_found", "internal", "slice_loss", "flapping"}
)


@dataclasses.dataclass
class LoopVerdict(Verdict):
    """The oracle's verdict, plus which judges ran and why the others could not."""

    judged: list[str] = dataclasses.field(default_factory=list)
    not_judged: dict[str, str] = dataclasses.field(default_factory=dict)
    batches: list[BatchRecord] = dataclasses.field(default_factory=list)
    #: The cause each violation names (same order), from ``loop_causes.CAUSES``: what an
    #: acceptance row chooses its fix by.
    causes: list[str] = dataclasses.field(default_factory=list)
    #: Every cause any violation names (a primary cause and what its text also shows).
    named: set[str] = dataclasses.field(default_factory=set)

    @property
    def central_not_judged(self) -> dict[str, str]:
        """The central judges (``CENTRAL_JUDGES``) that could not judge a verdict that found no
        failure: such a pass judged nothing that matters, so it is "not judged", never passed
        (a failure stands whatever else could not be judged)."""
        if not self.ok:
            return {}
        return {k: v for k, v in self.not_judged.items() if k in CENTRAL_JUDGES}

    @property
    def word(self) -> str:
        """``FAILED``, ``NOT JUDGED`` or ``SURVIVED``: what every front door says. A judge that
        raised is our bug: not judged, never the loop's failure, unless another judge failed."""
        if self.violations:
            return "FAILED"
        if self.judge_errors or self.central_not_judged:
            return "NOT JUDGED"
        return "SURVIVED"

    @property
    def exit_code(self) -> int:
        """The command line's: 0 survived, 1 failed, 5 not judged (never a green CI step;
        pytest's 5 is "no tests ran", the nearest meaning)."""
        return {"SURVIVED": 0, "FAILED": 1, "NOT JUDGED": 5}[self.word]

    def summary(self) -> str:
        lines = [f"judged: {', '.join(self.judged) or 'nothing'}"]
        lines += [f"not judged: {name}, because {why}" for name, why in self.not_judged.items()]
        lines += [
            f"not judged: {name}, because {JUDGE_FAILED}: {why.splitlines()[0]}"
            for name, why in self.judge_errors.items()
        ]
        lines += [f"FAILED: {v}" for v in self.violations]
        return "\n".join(lines)


def judge_loop(
    events: Sequence[Event],
    baseline: Sequence[Event] | None = None,
    clean: Sequence[Event] | None = None,
    clean_why_not: str = "",
) -> LoopVerdict:
    """Judges a loop episode; ``baseline`` is the log of a fault-free run of the same loop,
    ``clean`` that of a run with the same losses made right after the snapshot the episode
    resumed from (``harness/judging/clean_rerun.py``): the yardstick of the final state when
    the recovery changed the batch schedule (resize mode with a batch that scales)."""
    # One piece (over 80 lines): the judges run in JUDGES' order and each reads what the ones
    # before it found (the lineage, the chain, whether the schedule was kept); split, that
    # shared state would travel through a dozen parameters.
    lineage, problems = committed_batches(events)
    ends = [e for e in events if e["kind"] == "run_end"]
    completed = bool(ends) and ends[-1]["status"] == "completed"
    failed = next((e for e in reversed(ends) if e["status"] == "failed"), None)
    error = None if failed is None else failed.get("error")
    base_lineage = committed_batches(baseline)[0] if baseline else None
    base_end = _last_end(baseline) if baseline else None

    chain = chain_checks.follow(events) if completed else None
    base_chain = chain_checks.follow(baseline) if baseline else None
    results: dict[str, list[str] | str] = {}  # name -> violations, or why it was not judged
    results["process-exit"] = _process_exit(events)
    results["faults-fired"] = faults_fired(events)
    results["completed"] = run_completed(events, ends, failed) + (
        did_something(events, ends[-1]) if completed else []
    )
    unseen = restored_unseen(events)
    if chain is not None and chain.followed:
        results["exactly-once"] = chain_judges.trained_once_in_order(
            chain, base_chain if base_chain is not None and base_chain.followed else None
        )
    elif unseen:  # which batches its model holds is not known from the draws
        results["exactly-once"] = unseen
    else:
        once = _exactly_once(lineage, base_lineage, completed)
        results["exactly-once"] = (problems or once) if isinstance(once, str) else problems + once
    results["restore-latest"] = restore_latest(events)
    results["resume-step"] = resume_step(events, chain, batches_per_step(events, baseline))
    broken = (
        "the run did not complete"
        if chain is None
        else f"the chain of trained steps breaks: {chain.why_not}"
    )
    if chain is not None and chain.followed:
        results["snapshot-pairs"] = chain_judges.snapshots_consistent(chain)
        results["restore-used"] = chain_judges.restores_used(chain)
        results["scale-up"] = chain_judges.rejoined_slices_used(chain, events)
    else:
        results["snapshot-pairs"] = results["restore-used"] = results["scale-up"] = broken
    results["restore-shapes"] = chain_judges.restored_shapes(events)
    results["errors-handled"] = chain_judges.errors_handled(
        events, chain.put_back if chain is not None else frozenset()
    )
    results["meshes"] = _meshes(events)
    results["no-leaks"] = _no_leaks(events)
    schedule_kept, why_not = _schedule_kept(lineage, base_lineage)
    # Steps are counted against the fault-free run whatever the batch sizes: a loop bounded
    # by its steps commits as many after a recovery (a clean rerun shares a step bug).
    trained, base_trained = lineage, base_lineage
    if chain is not None and chain.followed and base_chain is not None and base_chain.followed:
        trained = [_record(d) for d in chain.trained]  # what was trained, not drawn
        base_trained = [_record(d) for d in base_chain.trained]
    drawn_only = unseen if trained is lineage else ""  # the chain, when followed, knows
    results["step-count"] = drawn_only or _step_count(
        trained, base_trained, completed, schedule_kept
    )
    yardstick, against = base_end, "the fault-free run"
    if not schedule_kept and base_lineage is not None:
        if clean is None:
            why_not += f"; no clean rerun to compare with ({clean_why_not or 'none was made'})"
        else:
            sizes, clean_sizes = batch_sizes(events), batch_sizes(clean)
            if sizes == clean_sizes and _last_end(clean) is not None:
                schedule_kept, yardstick = True, _last_end(clean)
                against = (
                    "a clean run that lost the same slices right after the snapshot it resumed from"
                )
            else:
                why_not += (
                    "; a clean run that lost the same slices right after the snapshot it "
                    f"resumed from trained another batch schedule ({len(clean_sizes)} batches, "
                    f"not {len(sizes)} of the same sizes)"
                )
    results["final-state"] = (
        _final_state(ends[-1] if ends else None, yardstick, completed, against)
        if schedule_kept
        else why_not
    )
    if not completed and "final-state" in results and isinstance(results["final-state"], list):
        results["final-state"] = "the run did not complete"

    verdict = LoopVerdict(
        violations=[],
        completed=completed,
        lineage=[],
        wasted_steps=sum(1 for e in events if e["kind"] == "batch") - len(lineage),
        recoveries=recoveries(events),
        error=error,
        batches=lineage,
    )
    for name in sorted(JUDGES, key=lambda n: n == "completed" and bool(_other_findings(results))):
        outcome = results[name]
        if isinstance(outcome, str):
            verdict.not_judged[name] = outcome
        else:
            verdict.judged.append(name)
            verdict.failed += [name] if outcome else []
            verdict.violations += outcome
            verdict.causes += [cause_of(name, text) for text in outcome]
            verdict.named |= {c for text in outcome for c in causes_named(name, text)}
    return verdict


# -- the judges ------------------------------------------------------------------------------
def _exactly_once(
    lineage: list[BatchRecord], base: list[BatchRecord] | None, completed: bool
) -> list[str] | str:
    """From what was drawn (the chain could not be followed): sample ids when every batch
    carries them (a loop that builds a fresh iterator over ``data[position:]`` restarts its
    positions at 0), else global data positions."""
    if not lineage:
        return (
            "the loop drew no batch the observer can see (from a grain iterator or DataLoader, "
            "or a generator of its own whose batches carry sample ids)"
        )
    by_ids = all(r.ids is not None for r in lineage)
    if not by_ids and any(r.position is None for r in lineage):
        return (
            "the loop's batches carry no sample ids and its iterator reports no global data "
            "position (give each record an id, or use grain's ElasticIterator)"
        )
    what = "sample ids" if by_ids else "data positions"

    def samples(records: list[BatchRecord]) -> list[int]:
        return [i for r in records for i in (list(r.ids or ()) if by_ids else r.positions)]

    problems: list[str] = []
    consumed = samples(lineage)
    counted = collections.Counter(consumed)
    duplicated = sorted(p for p, n in counted.items() if n > 1)
    want = samples(base) if base is not None and (not by_ids or all(r.ids for r in base)) else None
    if want is not None:
        skipped = sorted(set(want[: len(consumed)]) - set(consumed))
    else:
        skipped = [] if by_ids else sorted(set(range(max(consumed) + 1)) - set(consumed))
    if duplicated or skipped:
        at = _first_batch_with(lineage, set(duplicated) | set(skipped), counted, by_ids)
        parts = []
        if duplicated:
            parts.append(f"{what} {chain_judges.ranges(duplicated)} consumed twice or more")
        if skipped:
            parts.append(f"{what} {chain_judges.ranges(skipped)} skipped")
        problems.append(f"exactly-once violated at {at}: {'; '.join(parts)}")
    if want is not None and not problems:
        n = min(len(want), len(consumed))
        if consumed[:n] != want[:n]:
            i = next(i for i in range(n) if consumed[i] != want[i])
            problems.append(
                f"{what} order differs from the fault-free run at index {i}: got "
                f"{consumed[i : i + 4]}, the fault-free run {want[i : i + 4]}"
            )
    del completed
    return problems


def _other_findings(results: dict[str, list[str] | str]) -> bool:
    return any(isinstance(v, list) and v for k, v in results.items() if k != "completed")


def _meshes(events: Sequence[Event]) -> list[str] | str:
    """No attempt places data on a slice that was lost and that the manager had not
    (again) made active: a slice lost in the middle of an attempt is that attempt's fault,
    not its mesh's."""
    problems: list[str] = []
    down: dict[int, str] = {}
    active: set[int] | None = None
    slices: dict[int, list[int]] = {}
    reported: set[tuple[int, int]] = set()
    applied = False
    for e in events:
        kind = e["kind"]
        key = (e.get("run", 0), e.get("attempt", 0))
        if kind == "run_start":
            slices = {int(s): ids for s, ids in e["slices"].items()}
            active = None
        elif kind == "fault" and "touched" in e:
            fault = e["fault"]
            if fault["kind"] in _LOSS_KINDS:
                down[fault["slice"]] = e["text"]
            elif fault["kind"] == "repair":
                down.pop(fault["slice"], None)
        elif kind in ("attempt_start", "active_slices"):
            active = set(e["active_slices"] if "active_slices" in e else e.get("slices", []))
            for s in active:
                down.pop(s, None)
        elif kind == "mesh":
            applied = True
            dead = sorted(
                s for s in set(e["slices"]) & set(down) if active is None or s not in active
            )
            if dead and key not in reported:
                reported.add(key)
                devices = [d for s in dead for d in slices.get(s, [])]
                problems.append(
                    f"run {key[0]} attempt {key[1]} put data on a mesh holding slice "
                    f"{', '.join(map(str, dead))} (devices {devices}), lost by "
                    f"{down[dead[0]]} and not back: build each attempt's mesh from the "
                    "manager's active slices, not jax.devices() or a mesh (or sharding) made "
                    "before the loss"
                )
        elif kind == "attempt_ready":
            gone = [s for s in down if active is None or s not in active]
            dead_devices = {d for s in gone for d in slices.get(s, [])}
            on_dead = sorted(dead_devices & set(e["live"]["device_ids"]))
            if on_dead and key not in reported:
                reported.add(key)
                problems.append(
                    f"run {key[0]} attempt {key[1]}: live arrays have shards on lost devices "
                    f"{on_dead} when it drew its first batch"
                )
    if not applied:
        return "the loop placed no data on a named-sharding mesh"
    if len(problems) > 1:
        return [f"{problems[0]} (and {len(problems) - 1} more attempts)"]
    return problems


def _no_leaks(events: Sequence[Event]) -> list[str] | str:
    """No attempt keeps a failed attempt's device arrays alive.

    With the lineage seam every array is attributed to the attempt that made it (logical
    arrays, not per-device shards), and what failed attempts still hold when the run ends,
    after a collection, is the leak: what the current attempt holds (its restored state,
    however many names point at it) never counts. Without it, the count of live device
    arrays at each attempt's first batch may not grow from the first attempt's.
    """
    readies = [e for e in events if e["kind"] == "attempt_ready"]
    if len(readies) < 2:
        return "only one attempt ran"
    ends = [e for e in events if e["kind"] == "run_end" and "failed_attempts_alive" in e]
    if ends:
        for e in ends:
            kept = {k: n for k, n in e["failed_attempts_alive"].items() if n}
            if kept:
                which = _made_by(kept)
                return [
                    f"run {e['run']} ended with device arrays made by failed attempts still "
                    f"alive ({which}), after a garbage collection: something keeps the "
                    "failed attempt's arrays (a global, a list, a closure, a kept exception)"
                ]
        return []
    counts = [((e["run"], e["attempt"]), e["live"]["by_kind"].get("device", 0)) for e in readies]
    first = counts[0][1]
    for (run, attempt), n in counts[1:]:
        if n > first:
            return [
                f"live device arrays grew from {first} in the first attempt to {n} in run {run} "
                f"attempt {attempt}: something keeps the failed attempt's arrays alive"
            ]
    return []


def _made_by(kept: dict[str, int]) -> str:
    """{"1:2": 6} -> "6 from run 1 attempt 2"."""
    return ", ".join(
        f"{n} from run {k.split(':')[0]} attempt {k.split(':')[1]}" for k, n in sorted(kept.items())
    )


def _schedule_kept(lineage: list[BatchRecord], base: list[BatchRecord] | None) -> tuple[bool, str]:
    if base is None:
        return False, "no fault-free run of the same loop to compare with"
    sizes = [r.size for r in lineage]
    want = [r.size for r in base]
    for i, (got, expected) in enumerate(zip(sizes, want, strict=False)):
        if got != expected:
            return False, (
                f"the recovery changed the batch schedule (committed batch {i + 1} holds {got} "
                f"samples, the fault-free run's {expected}: a batch that scales with the "
                "slices), so the fault-free run saw different batches"
            )
    return True, ""


def _step_count(
    lineage: list[BatchRecord], base: list[BatchRecord] | None, completed: bool, kept: bool
) -> list[str] | str:
    if base is None:
        return "no fault-free run of the same loop to compare with"
    if not completed:
        return "the run did not complete"
    if not kept:
        got = sum(r.size or 0 for r in lineage)
        if got == sum(r.size or 0 for r in base):
            return "the loop is bounded by its data, not its steps, and the batch size changed"
    if len(lineage) != len(base):
        extra = len(lineage) - len(base)
        return [
            f"{len(lineage)} batches trained where the fault-free run trains {len(base)}: the "
            f"loop trained {_plural(abs(extra), 'step')} {'too many' if extra > 0 else 'too few'}"
        ]
    return []


def _final_state(
    end: Event | None,
    base_end: Event | None,
    completed: bool,
    against: str = "the fault-free run",
) -> list[str] | str:
    if not completed:
        return "the run did not complete"
    if end is None or not end.get("final_state"):
        return "the loop returned no state (return the final train state to have it compared)"
    if base_end is None or not base_end.get("final_state"):
        return f"{against} returned no state"
    got, want = end["final_state"], base_end["final_state"]
    if sorted(got) != sorted(want):
        return [f"final state leaves {sorted(got)} differ from those of {against} {sorted(want)}"]
    for path in sorted(got):
        a, b = _array(got[path]), _array(want[path])
        if a.shape != b.shape:
            return [f"leaf {path}: shape {a.shape} differs from {against}'s {b.shape}"]
        worst = _worst_outside_tolerance(a, b)
        if worst is not None:
            counter = ""
            if a.dtype.kind in "iu" and a.size == 1:
                counter = (
                    f": an integer counter at {int(a.ravel()[0])} where {against} has "
                    f"{int(b.ravel()[0])}, so it was re-initialised or not restored after the "
                    "recovery (is it in the snapshot?)"
                )
            return [
                f"final state differs from {against} at leaf {path}: max abs diff "
                f"{worst:.3g} (tolerance rtol={REPLAY_RTOL}, atol={REPLAY_ATOL}){counter}"
            ]
    return []


# -- helpers ---------------------------------------------------------------------------------
def _record(d: chain_checks.Draw) -> BatchRecord:
    return BatchRecord(d.run, d.attempt, d.number, d.position, d.size, d.ids, d.seq)


def _last_end(events: Sequence[Event]) -> Event | None:
    return next((e for e in reversed(events) if e["kind"] == "run_end"), None)


def _first_batch_with(
    lineage: list[BatchRecord],
    values: set[int],
    counted: collections.Counter[int],
    by_ids: bool = False,
) -> str:
    def samples(r: BatchRecord) -> list[int]:
        return list(r.ids or ()) if by_ids else r.positions

    seen: collections.Counter[int] = collections.Counter()
    for i, r in enumerate(lineage, 1):
        for p in samples(r):
            seen[p] += 1
            if p in values and (seen[p] > 1 or counted[p] == 0):
                return r.where(i)
    for i, r in enumerate(lineage, 1):
        first = min(samples(r), default=None)
        if first is not None and any(p < first for p in values):
            return r.where(i)
    return "the end"
