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
    stopped (a warm-up iterator, then the main one); not when it does, nor when it was set to a
    saved position before its first batch (an iterator rebuilt after a scale-up: where it was
    set is the resume judges' to check)."""
    draws: dict[tuple[int, int], list[Event]] = collections.defaultdict(list)
    for e in events:
        if e["kind"] == "iterator_set_state" or (
            e["kind"] == "batch"
            and (trained is None or (e["run"], e["attempt"], e["batch"]) in trained)
        ):
            draws[(e["run"], e["attempt"])].append(e)
    sources, overlap = 1, False
    for stream in draws.values():
        if not _several(stream):
            continue
        batches = [e for e in stream if e["kind"] == "batch"]
        sources = max(sources, len({_source(e) for e in batches}))
        owner: dict[int, int] = {}
        for e in batches:
            for i in e.get("ids") or ():
                if owner.setdefault(i, _source(e)) != _source(e):
                    overlap = True
    return Mixture(sources, overlap)


def _source(e: Event) -> int:
    return int(e.get("source", 0))


def _several(stream: list[Event]) -> bool:
    """Whether one attempt's batches (among its ``iterator_set_state`` events) came from more
    than one data source."""
    seen: set[int] = set()
    before: Event | None = None
    set_since = False  # an iterator was set to a saved position since the last batch
    for e in stream:
        if e["kind"] != "batch":
            set_since = True
            continue
        source = _source(e)
        if before is not None and source != _source(before):
            if source in seen:
                return True  # back to an earlier iterator: drawn in turn
            at, size, next_at = before.get("position"), before.get("size"), e.get("position")
            if set_since or at is None or size is None or next_at is None:
                pass  # set to a saved position (a rebuild), or not known: one source
            elif at + size != next_at:
                return True  # a new iterator that does not continue the last one's data
        seen.add(source)
        before, set_since = e, False
    return False
