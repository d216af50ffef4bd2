"""A mixture: a loop that trains on batches from several grain iterators in turn (tasks, data
sources). A sample id and a data position then belong to one iterator, so the judges that name
samples by id alone, or pair a snapshot with one position, cannot judge it, and say so."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Collection, Sequence

from pathways_chaos.harness.engine.recorder import Event


@dataclasses.dataclass(frozen=True)
class Mixture:
    """How many iterators one attempt trained from in turn (1: no mixture), and whether their
    sample ids overlap (the same id from two of them)."""

    sources: int = 1
    ids_overlap: bool = False


def mixture(events: Sequence[Event], trained: Collection[tuple[int, int, int]] | None) -> Mixture:
    """The mixture of the batches ``trained`` (``(run, attempt, batch)``; ``None``: every drawn
    batch) holds: two iterators count when the attempt draws from one again after the other,
    not when it replaces an iterator by a new one (a rebuild after a scale-up)."""
    draws: dict[tuple[int, int], list[Event]] = collections.defaultdict(list)
    for e in events:
        if e["kind"] == "batch" and (
            trained is None or (e["run"], e["attempt"], e["batch"]) in trained
        ):
            draws[(e["run"], e["attempt"])].append(e)
    sources, overlap = 1, False
    for batches in draws.values():
        order = [int(e.get("source", 0)) for e in batches]
        back = any(s in order[:i] and s != order[i - 1] for i, s in enumerate(order) if i)
        if not back:
            continue
        sources = max(sources, len(set(order)))
        owner: dict[int, int] = {}
        for e in batches:
            for i in e.get("ids") or ():
                if owner.setdefault(i, int(e.get("source", 0))) != int(e.get("source", 0)):
                    overlap = True
    return Mixture(sources, overlap)
