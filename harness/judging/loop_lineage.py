"""The committed batches of a user loop's black-box log: the batches the final state is made of,
back through each restore to the batches drawn before the save it restored."""

from __future__ import annotations

import collections
import dataclasses
import itertools
from collections.abc import Callable, Sequence
from fractions import Fraction

from pathways_chaos.harness.engine.recorder import Event
from pathways_chaos.harness.judging import lineage as chain_checks


@dataclasses.dataclass(frozen=True)
class BatchRecord:
    run: int
    attempt: int
    batch: int  # drawn in the episode, from 1
    position: int | None
    size: int | None
    ids: tuple[int, ...] | None
    seq: int

    @property
    def positions(self) -> list[int]:
        if self.position is None or self.size is None:
            return []
        return list(range(self.position, self.position + self.size))

    def where(self, index: int) -> str:
        return (
            f"committed batch {index} (run {self.run} attempt {self.attempt}, batch #{self.batch})"
        )


def batch_sizes(events: Sequence[Event]) -> list[int | None]:
    """The sizes of the batches the final state was trained on, in order."""
    chain = chain_checks.follow(events)
    if chain.followed:
        return [d.size for d in chain.trained]
    return [r.size for r in committed_batches(events)[0]]


def committed_batches(events: Sequence[Event] | None) -> tuple[list[BatchRecord], list[str]]:
    """The batches the final state is made of, in the order they were trained on."""
    if not events:
        return [], []
    problems: list[str] = []
    by_attempt: dict[tuple[int, int], list[BatchRecord]] = collections.defaultdict(list)
    restores: dict[tuple[int, int], Event] = {}
    saves: list[Event] = []
    for e in events:
        key = (e.get("run", 0), e.get("attempt", 0))
        if e["kind"] == "batch":
            ids = tuple(e["ids"]) if e.get("ids") is not None else None
            by_attempt[key].append(
                BatchRecord(key[0], key[1], e["batch"], e["position"], e["size"], ids, e["seq"])
            )
        elif e["kind"] == "restore_end" and key not in by_attempt:
            restores[key] = e  # a restore before the attempt's first batch starts it
        elif e["kind"] in ("snapshot_save", "checkpoint_save") and not e.get("skipped"):
            saves.append(e)
    if not by_attempt:
        return [], problems
    key = max(by_attempt, key=lambda k: by_attempt[k][-1].seq)
    segments: list[list[BatchRecord]] = []
    seq_limit: int | None = None
    seen = set()
    while key not in seen:
        seen.add(key)
        records = by_attempt.get(key, [])
        if seq_limit is not None:
            records = [r for r in records if r.seq < seq_limit]
        segments.append(records)
        restore = restores.get(key)
        if restore is None:
            break
        kind = "checkpoint_save" if restore["source"] == "checkpoint" else "snapshot_save"
        earlier = [
            s
            for s in saves
            if s["kind"] == kind and s["step"] == restore["step"] and s["seq"] < restore["seq"]
        ]
        if not earlier:
            problems.append(
                f"run {key[0]} attempt {key[1]} restored step {restore['step']} that no attempt "
                "saved"
            )
            break
        save = earlier[-1]
        key, seq_limit = (save["run"], save["attempt"]), save["seq"]
    return [r for seg in reversed(segments) for r in seg], problems


def restored_unseen(events: Sequence[Event]) -> str:
    """An attempt after the first that restored nothing the observer saw, yet drew its first
    batch past the data's start: it put its state back another way (a host copy), so which
    batches its model holds is not known from the draws; "" when no attempt did."""
    restored: set[tuple[int, int]] = set()
    drew: set[tuple[int, int]] = set()
    first = True
    for e in events:
        key = (e.get("run", 0), e.get("attempt", 0))
        if e["kind"] == "restore_end":
            restored.add(key)
        elif e["kind"] == "batch" and key not in drew:
            drew.add(key)
            if not first and key not in restored and e.get("position"):
                return (
                    f"run {key[0]} attempt {key[1]} drew its first batch at data position "
                    f"{e['position']} with no restore the observer saw (its state was put back "
                    "another way, such as a host copy), so the batches its model holds are not "
                    "known"
                )
            first = False
    return ""


def batches_per_step(events: Sequence[Event], baseline: Sequence[Event] | None = None) -> Fraction:
    """How many batches make one step of the loop's counter (2 for a loop that accumulates
    two micro-batches per optimizer step; 1/24 for one whose step labels count its 24 samples
    a batch), learned from attempts that restored nothing (the fault-free run's, the
    episode's own): each pair of saves there advances the step by their batches over the
    ratio. 1 when no such pair, or the pairs disagree (then steps are counted as batches, as
    most loops do)."""
    ratios = _unit_ratios(events, baseline, lambda e, drawn: e.get("batches_in_attempt"))
    return ratios.pop() if len(ratios) == 1 else Fraction(1)


def samples_per_step(
    events: Sequence[Event], baseline: Sequence[Event] | None = None
) -> Fraction | None:
    """How many samples make one step of the loop's counter, learned as ``batches_per_step``
    is: for a loop whose global batch stays fixed while its micro-batches per step change with
    the slices. None when no such pair of saves, or the pairs disagree."""
    ratios = _unit_ratios(events, baseline, lambda e, drawn: drawn)
    return ratios.pop() if len(ratios) == 1 else None


def _unit_ratios(
    events: Sequence[Event],
    baseline: Sequence[Event] | None,
    count_at: Callable[[Event, int], object],
) -> set[Fraction]:
    """Count per step between the saves of each attempt that restored nothing (``count_at``: a
    save's count of batches, or of the samples drawn so far in its attempt)."""
    saves: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
    restored: set[tuple[int, int, int]] = set()
    drawn: dict[tuple[int, int, int], int] = {}
    for source, e in [*((0, b) for b in baseline or ()), *((1, x) for x in events)]:
        key = (source, e.get("run", 0), e.get("attempt", 0))
        if e["kind"] == "restore_end":
            restored.add(key)
        elif e["kind"] == "batch" and isinstance(e.get("size"), int):
            drawn[key] = drawn.get(key, 0) + e["size"]
        elif e["kind"] in ("snapshot_save", "checkpoint_save") and key not in restored:
            step, count = e.get("step"), count_at(e, drawn.get(key, 0))
            if isinstance(step, int) and isinstance(count, int):
                saves.setdefault(key, []).append((step, count))
    ratios: set[Fraction] = set()
    for attempt in saves.values():
        pairs = _step_pairs(attempt)
        ratios |= {Fraction(n1 - n0, s1 - s0) for (s0, n0), (s1, n1) in pairs if n1 > n0}
    return ratios


def _step_pairs(saves: list[tuple[int, int]]) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Pairs of saves (step, count) whose steps grew. A loop that saves every micro-batch under
    its optimizer step saves each step several times (0, 1, 1, 2, 2 at batches 1-5): each step
    is then taken at its first save, and the attempt's first step left out, as it may have
    begun before its first save (batch 0 was not saved); pairs of consecutive saves had the
    steps advance one per batch."""
    saves = list(dict.fromkeys(saves))  # a snapshot and a checkpoint of one step: one save
    steps = [step for step, _ in saves]
    if len(set(steps)) == len(steps):
        return [(a, b) for a, b in itertools.pairwise(saves) if b[0] > a[0]]
    firsts: list[tuple[int, int]] = []
    for step, count in saves:
        if not firsts or step > firsts[-1][0]:
            firsts.append((step, count))
    return list(itertools.pairwise(firsts[1:]))
