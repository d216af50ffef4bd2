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
import functools
from collections.abc import Callable, Sequence

from pathways_chaos.harness.engine.recorder import Event
from pathways_chaos.harness.engine.subject_events import subject_history
from pathways_chaos.harness.judging import chain_judges, loop_meshes
from pathways_chaos.harness.judging import lineage as chain_checks
from pathways_chaos.harness.judging.data_sources import Mixture, mixture
from pathways_chaos.harness.judging.final_values import CHANGED, compare_final_states
from pathways_chaos.harness.judging.loop_causes import causes_named
from pathways_chaos.harness.judging.loop_lineage import (
    BatchRecord,
    batch_sizes,
    batches_per_step,
    committed_batches,
    restored_unseen,
    samples_per_step,
)
from pathways_chaos.harness.judging.oracle import recoveries
from pathways_chaos.harness.judging.panel import Finding, Judge, convene
from pathways_chaos.harness.judging.process_exit import process_exit as _process_exit
from pathways_chaos.harness.judging.restore_latest import restore_latest
from pathways_chaos.harness.judging.resume_step import resume_step
from pathways_chaos.harness.judging.run_outcome import completed as run_completed
from pathways_chaos.harness.judging.run_outcome import (
    did_something,
    faults_fired,
    must_end_in_error,
    own_retry,
)
from pathways_chaos.harness.judging.subject_judges import SUBJECT_JUDGES
from pathways_chaos.harness.judging.verdict import Verdict, judge_error
from pathways_chaos.harness.judging.wording import plural as _plural

#: The judges a pass needs: the faults happened, every sample was trained exactly once, the
#: final state is the fault-free run's. Without any of them a pass judged nothing that matters.
CENTRAL_JUDGES = ("faults-fired", "exactly-once", "final-state")


@dataclasses.dataclass(frozen=True)
class Reruns:
    """The runs a resize recovery is measured against (``judging.yardsticks``): each run's
    log, or why there is none."""

    clean: Sequence[Event] | None = None
    clean_why_not: str = ""
    probe: Sequence[Event] | None = None
    probe_why_not: str = ""


class LoopHistory:
    """One loop episode's log and what the judges read of it, each view made once, when a
    judge first asks: the committed batches, the chain of trained steps, the fault-free run's
    (``baseline``) and the clean rerun's (``clean``) to compare with. A view that raises makes
    every judge that reads it "not judged: the judge failed", and no other."""

    def __init__(
        self,
        events: Sequence[Event],
        baseline: Sequence[Event] | None = None,
        reruns: Reruns | None = None,
    ) -> None:
        self.events, self.baseline = events, baseline
        reruns = reruns or Reruns()
        self.clean, self.clean_why_not = reruns.clean, reruns.clean_why_not
        self.probe, self.probe_why_not = reruns.probe, reruns.probe_why_not
        self.ends = [e for e in events if e["kind"] == "run_end"]
        self.completed = bool(self.ends) and self.ends[-1]["status"] == "completed"
        failed = next((e for e in reversed(self.ends) if e["status"] == "failed"), None)
        self.failed_end = failed
        self.error = None if failed is None else failed.get("error")

    @functools.cached_property
    def subject(self) -> list[Event]:
        """What the subject reported of itself, as a log of its own; empty: nothing."""
        return subject_history(self.events)

    @functools.cached_property
    def committed(self) -> tuple[list[BatchRecord], list[str]]:
        return committed_batches(self.events)

    @functools.cached_property
    def base_lineage(self) -> list[BatchRecord] | None:
        return committed_batches(self.baseline)[0] if self.baseline else None

    @functools.cached_property
    def schedule_kept(self) -> tuple[bool, str]:
        """Whether the committed batches hold the fault-free run's batch sizes, or why not."""
        return _schedule_kept(self.committed[0], self.base_lineage)

    @functools.cached_property
    def probe_found(self) -> list[str] | str:
        """The restore probe's final state against the fault-free run's: the differences, or
        why they cannot be compared (read by restore-keeps-state and by final-state's rounding
        test, once)."""
        if self.base_lineage is None:
            return "no fault-free run of the same loop to compare with"
        if self.probe is None:
            return self.probe_why_not or "no restore probe was made"
        if not _schedule_kept(committed_batches(self.probe)[0], self.base_lineage)[0]:
            return (
                "the restore probe (a retry that lost no slice) trained another batch schedule "
                "than the fault-free run"
            )
        found = compare_final_states(_last_end(self.probe), _last_end(self.baseline or ()), True)
        return f"the restore probe: {found}" if isinstance(found, str) else found

    @functools.cached_property
    def chain(self) -> chain_checks.Chain | None:
        return chain_checks.follow(self.events) if self.completed else None

    @functools.cached_property
    def followed(self) -> chain_checks.Chain | None:
        """The chain, when it could be followed from the end back to the first batch."""
        return self.chain if self.chain is not None and self.chain.followed else None

    @functools.cached_property
    def base_followed(self) -> chain_checks.Chain | None:
        base = chain_checks.follow(self.baseline) if self.baseline else None
        return base if base is not None and base.followed else None

    @functools.cached_property
    def unseen(self) -> str:
        """Why the batches a restored state holds are not known from the draws, or ''."""
        return restored_unseen(self.events)

    @functools.cached_property
    def mixture(self) -> Mixture:
        """The data sources the trained batches came from (``judging.data_sources``)."""
        trained = None
        if self.followed is not None:
            trained = {(d.run, d.attempt, d.number) for d in self.followed.trained}
        return mixture(self.events, trained)

    @property
    def broken(self) -> str:
        """Why the chain judges cannot follow the trained steps."""
        if self.chain is None:
            return "the run did not complete"
        return f"the chain of trained steps breaks: {self.chain.why_not}"


def _exactly_once_judge(h: LoopHistory) -> Finding:
    if h.mixture.sources > 1 and h.mixture.ids_overlap:
        return (
            "the loop trains on batches from several grain iterators (a mixture of data "
            "sources) whose sample ids overlap, so an id does not name one sample (give each "
            "source's records ids of their own, e.g. an offset per source)"
        )
    if h.followed is not None:
        mixed = h.mixture.sources > 1
        return chain_judges.trained_once_in_order(h.followed, h.base_followed, mixed)
    if h.unseen:  # which batches its model holds is not known from the draws
        return h.unseen
    lineage, problems = h.committed
    once = _exactly_once(lineage, h.base_lineage, h.completed)
    return (problems or once) if isinstance(once, str) else problems + once


def _chain_judge(
    judge: Callable[[chain_checks.Chain], Finding],
) -> Callable[[LoopHistory], Finding]:
    def on(h: LoopHistory) -> Finding:
        return judge(h.followed) if h.followed is not None else h.broken

    return on


def _snapshot_pairs_judge(h: LoopHistory) -> Finding:
    if h.mixture.sources > 1:
        return (
            "the loop trains on batches from several grain iterators (a mixture of data "
            "sources): a data position belongs to one of them, and a snapshot's model is "
            "paired with the position of a single iterator only"
        )
    return _chain_judge(chain_judges.snapshots_consistent)(h)


def _completed_judge(h: LoopHistory) -> Finding:
    found = run_completed(h.events, h.ends, h.failed_end)
    if isinstance(found, str):  # how it ended cannot be told
        return found
    return found + (did_something(h.events, h.ends[-1]) if h.completed else [])


def _step_count_judge(h: LoopHistory) -> Finding:
    """Steps are counted against the fault-free run whatever the batch sizes: a loop bounded
    by its steps commits as many after a recovery (a clean rerun shares a step bug)."""
    lineage = h.committed[0]
    kept = h.schedule_kept[0]
    if h.followed is not None and h.base_followed is not None:  # what was trained, not drawn
        trained = [_record(d) for d in h.followed.trained]
        return _step_count(
            trained, [_record(d) for d in h.base_followed.trained], h.completed, kept
        )
    if h.unseen:  # the chain, when followed, knows
        return h.unseen
    return _step_count(lineage, h.base_lineage, h.completed, kept)


#: The yardstick of the final state when the fault-free run cannot be one.
CLEAN_RUN = "a clean run that lost the same slices right after the snapshot it resumed from"


def _final_state_judge(h: LoopHistory) -> Finding:
    """Against the fault-free run; when the recovery changed the batch schedule, against a
    clean run that lost the same slices right after the snapshot it resumed from."""
    end = h.ends[-1] if h.ends else None
    kept, why_not = h.schedule_kept
    if kept:
        found = compare_final_states(end, _last_end(h.baseline or ()), h.completed)
        return [] if isinstance(found, list) and found and _rounding_alone(h, end) else found
    if h.base_lineage is None:
        return why_not
    clean = _clean_end(h)
    if isinstance(clean, str):
        return f"{why_not}; {clean}"
    return compare_final_states(end, clean, h.completed, CLEAN_RUN)


def _rounding_alone(h: LoopHistory, end: Event | None) -> bool:
    """Whether a state that differs from the fault-free run's after a lost slice changed the
    mesh differs by the new mesh's rounding alone: fewer slices sum the same batch in another
    order, and a low-precision step (bf16 compute, even with fp32 parameters or an fp32 master
    copy) carries that into every later step. So it is when the clean run (the same losses at
    the snapshot, every step on the same mesh) ends in the very same state, which rules out
    work thrown away leaking in, and the restore probe (a retry there on the fault-free
    meshes) ends in the fault-free run's, which rules out state the snapshot lacks."""
    if h.probe is None:
        return False
    clean = _clean_end(h)
    if not isinstance(clean, dict):
        return False
    return compare_final_states(end, clean, h.completed, CLEAN_RUN) == [] and h.probe_found == []


def _clean_end(h: LoopHistory) -> Event | str:
    """The clean rerun's last ``run_end`` when it trained the same batch sizes, or why not."""
    if h.clean is None:
        return f"no clean rerun to compare with ({h.clean_why_not or 'none was made'})"
    sizes, clean_sizes = batch_sizes(h.events), batch_sizes(h.clean)
    clean_end = _last_end(h.clean)
    if sizes != clean_sizes or clean_end is None:
        return (
            f"{CLEAN_RUN} trained another batch schedule ({len(clean_sizes)} batches, not "
            f"{len(sizes)} of the same sizes)"
        )
    return clean_end


def _restore_keeps_state_judge(h: LoopHistory) -> Finding:
    """The restore probe (``judging.yardsticks``): a retry that lost no slice, restoring the
    snapshot the episode resumed from, ends where the fault-free run does."""
    if h.base_lineage is not None and h.schedule_kept[0]:
        return (
            "the recovery kept the fault-free batch schedule, so final-state compares the "
            "state with the fault-free run itself"
        )
    found = h.probe_found
    if isinstance(found, str):
        return found
    restored = next((e for e in h.probe or () if e["kind"] == "restore_end"), None)
    where = "" if restored is None else f" right after the snapshot of step {restored['step']}"
    return [
        text
        if CHANGED in text
        else f"after a retry that lost no slice (DATA_LOSS raised{where}, every slice kept), the "
        f"{text[0].lower()}{text[1:]}: the snapshot does not hold all the state the training "
        "depends on (a PRNG key, a learning-rate or step counter kept outside it?)"
        for text in found
    ]


#: Every judge, in the order the verdict lists them: causes before the effects they lead to
#: (a swallowed error or a snapshot that pairs the wrong position before the samples it made
#: skip; a crash, the end of many a cause, listed after any other finding).
LOOP_JUDGES: tuple[Judge[LoopHistory], ...] = (
    Judge("process-exit", lambda h: _process_exit(h.events)),
    Judge("faults-fired", lambda h: faults_fired(h.events)),
    Judge("completed", _completed_judge),
    Judge(
        "errors-handled",
        lambda h: chain_judges.errors_handled(
            h.events, h.chain.put_back if h.chain is not None else frozenset()
        ),
    ),
    Judge("snapshot-pairs", _snapshot_pairs_judge),
    Judge("restore-latest", lambda h: restore_latest(h.events)),
    Judge(
        "resume-step",
        lambda h: resume_step(
            h.events,
            h.chain,
            batches_per_step(h.events, h.baseline),
            mixture=h.mixture.sources > 1,
            samples_per_step=samples_per_step(h.events, h.baseline),
        ),
    ),
    Judge("restore-used", _chain_judge(chain_judges.restores_used)),
    Judge("restore-shapes", lambda h: chain_judges.restored_shapes(h.events)),
    Judge("meshes", lambda h: loop_meshes.judge(h.events)),
    Judge(
        "scale-up",
        lambda h: (
            chain_judges.rejoined_slices_used(h.followed, h.events)
            if h.followed is not None
            else h.broken
        ),
    ),
    Judge("exactly-once", _exactly_once_judge),
    Judge("no-leaks", lambda h: _no_leaks(h.events)),
    Judge("restore-keeps-state", _restore_keeps_state_judge),
    Judge("step-count", _step_count_judge),
    Judge("final-state", _final_state_judge),
)
#: The judges' names, in the order the verdict lists them.
JUDGES = tuple(judge.name for judge in LOOP_JUDGES)


def judge_loop(
    events: Sequence[Event],
    baseline: Sequence[Event] | None = None,
    reruns: Reruns | None = None,
) -> Verdict:
    """Judges a loop episode; ``baseline`` is the log of a fault-free run of the same loop,
    ``clean`` that of a run with the same losses made right after the snapshot the episode
    resumed from (``harness/judging/clean_rerun.py``): the yardstick of the final state when
    the recovery changed the batch schedule (resize mode with a batch that scales); ``probe``
    that of a retry there that lost no slice (``judging.yardsticks``)."""
    h = LoopHistory(events, baseline, reruns)
    # Given an error it must not retry (or one no retry outlasts), what the episode judges is
    # that the run ends with it.
    propagate = must_end_in_error(events)
    central = ("completed",) if propagate else CENTRAL_JUDGES
    verdict = Verdict(central=central, completed=h.completed, error=h.error)
    verdict.recoveries = recoveries(events)
    judges = LOOP_JUDGES + (_SUBJECT_JUDGES if h.subject else ())
    if propagate:  # a run that went on past it: the cause, what other judges see follows
        judges = tuple(sorted(judges, key=lambda j: j.name != "completed"))
    last = () if propagate else ("completed",)
    convene(judges, h, verdict, last_if_others=last, causes=causes_named)
    try:
        verdict.batches = h.committed[0]
        verdict.wasted_steps = sum(1 for e in events if e["kind"] == "batch") - len(verdict.batches)
    except Exception as failure:  # already said by each judge that reads it
        verdict.judge_errors.setdefault("lineage", judge_error(failure))
    return verdict


def _over_subject(judge: Judge[Sequence[Event]]) -> Judge[LoopHistory]:
    return Judge(judge.name, lambda h: judge.judge(h.subject))


#: The judges of what the subject reported of itself, heard when it reported anything.
_SUBJECT_JUDGES = tuple(_over_subject(j) for j in SUBJECT_JUDGES)


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
    want = samples(base) if base is not None and (not by_ids or all(r.ids for r in base)) else None
    duplicated = chain_judges.more_than_fault_free(
        counted, None if want is None else collections.Counter(want)
    )
    if isinstance(duplicated, str):
        return duplicated
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


def _no_leaks(events: Sequence[Event]) -> list[str] | str:
    """No attempt keeps a failed attempt's device arrays alive.

    With the lineage seam every array is attributed to the attempt that made it (logical
    arrays, not per-device shards), and what failed attempts still hold when the run ends,
    after a collection, is the leak: what the current attempt holds (its restored state,
    however many names point at it) never counts. Without it, the count of live device
    arrays at each attempt's first batch may not grow from the first attempt's.
    """
    readies = [e for e in events if e["kind"] == "attempt_ready"]
    started = {
        (e.get("run", 0), e.get("attempt", 0)) for e in events if e["kind"] == "attempt_start"
    }
    if len(started) < 2 and len(readies) < 2:
        return own_retry(events) or "only one attempt ran"
    ends = [e for e in events if e["kind"] == "run_end" and "failed_attempts_alive" in e]
    if not ends and len(readies) < 2:
        return (
            f"only one of the {len(started)} attempts drew a batch, and without the lineage "
            "seam the live arrays are counted at each attempt's first batch"
        )
    for e in readies:  # while a later attempt trains, before the loop lets go at its end
        kept = {k: n for k, n in (e.get("failed_attempts_alive") or {}).items() if n}
        if kept:
            return [
                f"run {e['run']} attempt {e['attempt']} began training with device arrays "
                f"made by failed attempts still alive ({_made_by(kept)}), after a garbage "
                "collection: something keeps the failed attempt's arrays while the next one "
                "trains (a list or dict of states, an attribute of the trainer, a closure, a "
                "kept exception)"
            ]
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
            return (
                f"the loop trained as many samples as the fault-free run in {len(lineage)} "
                f"batches, not {len(base)}: its batches changed size with the slices, so its "
                "steps are not counted by its batches"
            )
    if len(lineage) != len(base):
        extra = len(lineage) - len(base)
        return [
            f"{len(lineage)} batches trained where the fault-free run trains {len(base)}: the "
            f"loop trained {_plural(abs(extra), 'step')} {'too many' if extra > 0 else 'too few'}"
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
