"""The committed lineage of a reference-trainer log: the step executions the final state is
made of, back through each restore to the attempt that saved it. Every judge of that log (the
oracle's checks, the replay) reads it from here."""

from __future__ import annotations

import collections
import dataclasses
import itertools
from collections.abc import Sequence

from pathways_chaos.harness.engine.recorder import Event


@dataclasses.dataclass(frozen=True)
class StepRecord:
    run: int
    attempt: int
    step: int
    ids: tuple[int, ...]
    seq: int
    loss: float | None = None
    mesh_slices: tuple[int, ...] | None = None


def committed_lineage(events: Sequence[Event]) -> tuple[list[StepRecord], list[str]]:
    """The step executions that the final state is made of, in step order."""
    problems: list[str] = []
    by_attempt: dict[tuple[int, int], list[StepRecord]] = collections.defaultdict(list)
    restores: dict[tuple[int, int], Event] = {}
    saves: list[Event] = []
    for e in events:
        key = (e.get("run", 0), e.get("attempt", 0))
        if e["kind"] == "step":
            by_attempt[key].append(
                StepRecord(
                    key[0],
                    key[1],
                    e["step"],
                    tuple(e["ids"]),
                    e["seq"],
                    e.get("loss"),
                    tuple(e["mesh_slices"]) if e.get("mesh_slices") else None,
                )
            )
        elif e["kind"] == "restore_end":
            restores[key] = e
        elif e["kind"] in ("snapshot_save", "checkpoint_save"):
            saves.append(e)
    if not by_attempt:
        return [], problems
    key = max(by_attempt, key=lambda k: by_attempt[k][-1].seq)
    segments: list[list[StepRecord]] = []
    upto: int | None = None  # the last step of this attempt the lineage keeps
    seq_limit = None
    while True:
        records = by_attempt.get(key, [])
        if seq_limit is not None:
            records = [r for r in records if r.seq < seq_limit]
        if upto is not None:
            records = [r for r in records if r.step <= upto]
        segments.append(records)
        restore = restores.get(key)
        if restore is None:
            break
        source = "checkpoint_save" if restore["source"] == "checkpoint" else "snapshot_save"
        earlier = [s for s in saves if s["kind"] == source and s["step"] == restore["step"]]
        earlier = [s for s in earlier if s["seq"] < restore["seq"]]
        if not earlier:
            problems.append(
                f"{who(events, *key)} restored step {restore['step']} that no attempt saved"
            )
            break
        save = earlier[-1]
        key, upto, seq_limit = (save["run"], save["attempt"]), restore["step"], save["seq"]
    lineage = [r for seg in reversed(segments) for r in seg]
    for prev, nxt in itertools.pairwise(lineage):
        if nxt.step != prev.step + 1:
            what = "repeated" if nxt.step <= prev.step else "skipped"
            problems.append(
                f"committed steps are not consecutive ({what}): step {prev.step} "
                f"({who(events, prev.run, prev.attempt)}) is followed by step {nxt.step} "
                f"({who(events, nxt.run, nxt.attempt)})"
            )
            break
    if lineage and lineage[0].step != 0:
        problems.append(f"committed steps start at step {lineage[0].step}, not 0")
    return lineage, problems


def who(events: Sequence[Event], run: int, attempt: int) -> str:
    """ "attempt N", or "run R, attempt N" when the log holds more than one run."""
    runs = {e["run"] for e in events if e["kind"] == "run_start"}
    return f"run {run}, attempt {attempt}" if len(runs) > 1 else f"attempt {attempt}"


def run_start(events: Sequence[Event]) -> Event | None:
    """The first run's ``run_start`` event: the trainer and config the log was made with."""
    return next((e for e in events if e["kind"] == "run_start"), None)
