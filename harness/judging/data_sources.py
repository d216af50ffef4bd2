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
    batch) holds. Two iterators of one attempt count as two sources when the attempt draws from
    one again after the other, or when the later one does not go on where the earlier one
    stopped (a warm-up iterator, then the main one); not when it does (an iterator rebuilt after
    a scale-up and set to the old one's position)."""
    draws: dict[tuple[int, int], list[Event]] = collections.defaultdict(list)
    for e in events:
        if e["kind"] == "batch" and (
            trained is None or (e["run"], e["attempt"], e["batch"]) in trained
        ):
            draws[(e["run"], e["attempt"])].append(e)
    sources, overlap = 1, False
    for batches in draws.values():
        if not _several(batches):
            continue
        sources = max(sources, len({_source(e) for e in batches}))
        owner: dict[int, int] = {}
        for e in batches:
            for i in e.get("ids") or ():
                if owner.setdefault(i, _source(e)) != _source(e):
                    overlap = True
    return Mixture(sources, overlap)


def _source(e: Event) -> int:
    return int(e.get("source", 0))


def _several(batches: list[Event]) -> bool:
    """Whether one attempt's batches came from more than one data source."""
    seen: set[int] = set()
    for before, e in zip([None, *batches], batches, strict=False):
        source = _source(e)
        if before is not None and source != _source(before):
            if source in seen:
                return True  # back to an earlier iterator: drawn in turn
            at, size, next_at = before.get("position"), before.get("size"), e.get("position")
            if at is not None and size is not None and next_at is not None and at + size != next_at:
                return True  # a new iterator that does not continue the last one's data
        seen.add(source)
    return False
