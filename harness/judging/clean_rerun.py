"""The yardstick for a resize recovery: the same losses, made cleanly where the loop resumed.

In replica-resize mode with a batch that scales with the slices, a recovery changes the batch
schedule, so the fault-free run trained other batches and its final state says nothing. What a
correct recovery must equal is a run that lost the same slices *right after* the snapshot it
resumed from: no work thrown away, the same batches on the same meshes afterwards. This
module writes that schedule from the faulted run's log (each loss moved to ``save=K``, the
save the run restored, counted as the clean run will count it); the judge compares the final
states only if the clean run really trained the same batch schedule, and says why not otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

from pathways_chaos.faults.model import FaultSpecError, parse_schedule
from pathways_chaos.harness.engine.recorder import Event
from pathways_chaos.harness.judging.lineage import saved_for
from pathways_chaos.harness.judging.run_outcome import own_retry

#: Fault kinds a clean rerun can move to a save trigger (losses) or keep as they were.
MOVABLE = frozenset({"data_loss", "deadline_exceeded", "not_found", "internal", "slice_loss"})
KEPT = frozenset({"repair"})
SAVE_KINDS = ("snapshot_save",)
#: What a loop's ``save=N`` trigger counts: a save on any Orbax path, a checkpoint manager's
#: too. The clean rerun's ``save=K`` counts the same, or it lands on another save.
SAVE_EVENTS = ("snapshot_save", "checkpoint_save")


def clean_schedule(events: Sequence[Event]) -> tuple[str | None, str]:
    """``(schedule, "")`` for the clean rerun, or ``(None, why it cannot be written)``."""
    faults = _losses(events)
    if not faults:
        return None, "no fault fired"
    for f in faults:
        kind = f["fault"]["kind"]
        if kind not in MOVABLE | KEPT:
            return None, f"the schedule holds a {kind} fault, which a clean rerun cannot place"
    segments = _segments(events)
    if segments is None:
        return None, "the run's restores do not lead back to saves it made"
    clean_saves: list[Event] = []
    for key, limit in segments:
        clean_saves += [
            e
            for e in events
            if e["kind"] in SAVE_EVENTS
            and (e["run"], e["attempt"]) == key
            and (limit is None or e["seq"] <= limit)
        ]
    out: list[str] = []
    stood: dict[str, float] = {}  # the faulted run's clock, as far as the stalls there took it
    first_loss: dict[str, Event] = {}  # the first loss placed at each trigger
    start = next((e for e in events if e["kind"] == "episode_start"), None)
    fake_clock = start is not None and start.get("clock") == "fake"
    restores = _chain_restores(events, segments)
    for f in faults:
        if f["fault"]["kind"] in KEPT:
            out.append(_kept_after_the_same_work(f, events, segments))
            continue
        where = _where_to_lose(f, events, restores, clean_saves, segments)
        if isinstance(where, str):
            return None, where
        trigger, stood_at, recovery = where
        name, _, rest = f["text"].partition("@")
        _, _, params = rest.partition(":")
        repair: list[str] = []
        if fake_clock:
            since = stood.setdefault(trigger, float(stood_at.get("t", 0.0)))
            at = _clock_at_loss(events, f, recovery, first_loss.setdefault(trigger, f))
            out += _stall(since, at, trigger)
            stood[trigger] = max(since, at)
            params, repair = _back_when_it_came_back(events, f, params, at, trigger)
        out.append(f"{name}@{trigger}" + (f":{params}" if params else ""))
        out += repair
    text = ",".join(out)
    try:
        parse_schedule(text)
    except FaultSpecError as error:  # a stall longer than any the fake plays (a day)
        return None, f"the clean rerun's schedule cannot be played ({error})"
    return text, ""


def _where_to_lose(
    loss: Event,
    events: Sequence[Event],
    restores: list[tuple[Event, Event]],
    clean_saves: list[Event],
    segments: list[tuple[tuple[int, int], int | None]],
) -> tuple[str, Event, Event] | str:
    """Where the clean run loses what ``loss`` lost: ``(trigger, the event whose clock it
    starts from, the event the faulted run's recovery began with)``, or why it cannot. Right
    after the save the run resumed from; before the first batch, when the run began again
    from nothing (lost before its first save)."""
    restore = next((r for r in restores if r[0]["seq"] <= loss["seq"] < r[1]["seq"]), None)
    if restore is not None:
        save = restore[0]
        k = next((i for i, s in enumerate(clean_saves, 1) if s["seq"] == save["seq"]), None)
        if k is None:
            return f"the save the run resumed from after {loss['text']} is not on its chain"
        return f"save={k}", save, restore[1]
    key = segments[0][0]
    began = next(
        (e for e in events if e["kind"] == "attempt_start" and (e["run"], e["attempt"]) == key),
        None,
    )
    fresh = not any(e["kind"] == "restore_end" and (e["run"], e["attempt"]) == key for e in events)
    first = next((e for e in events if e["kind"] == "batch"), None)
    if (
        began is not None
        and fresh
        and not restores
        and first is not None
        and first["seq"] < loss["seq"] < began["seq"]
    ):
        return "batch=1", first, began
    why = own_retry(events)
    return why or f"the loss {loss['text']} led to no restore the final state comes from"


def _losses(events: Sequence[Event]) -> list[Event]:
    """The faults that fired, a flapping slice's each loss as a loss of its own: the first
    where the fault fired, the next ones where the fake logged them (``slice_lost``), each
    back after the flapping fault's polls (which ``_back_when_it_came_back`` then times)."""
    out: list[Event] = []
    polls: dict[int, int] = {}
    for e in events:
        if e["kind"] == "fault" and "raised" not in e:
            fault = e["fault"]
            if fault["kind"] != "flapping":
                out.append(e)
                continue
            index = int(fault["slice"])
            polls[index] = int(fault.get("repair_after_polls", 1))
            out.append(_as_loss(e, index, polls[index]))
        elif e["kind"] == "slice_lost" and e.get("how") == "flapping":
            index = int(e["slice"])
            out.append(_as_loss(e, index, polls.get(index, 1)))
    return out


def _as_loss(event: Event, slice_index: int, polls: int) -> Event:
    text = f"data_loss@flap:slice={slice_index}:repair_after_polls={polls}"
    return {**event, "fault": {"kind": "data_loss", "slice": slice_index}, "text": text}


def _stall(since: float, at: float, trigger: str) -> list[str]:
    """On the fake clock, the time the faulted run spent from ``since`` (the save, or the
    loss placed at ``trigger`` before this one) to ``at`` (this loss: the work it threw away),
    passed at ``trigger`` before the loss: the clean run then stands where the faulted run's
    clock stood, and the elastic monitor, which polls on that clock, sees a slice come back
    after the same batches as it did (three batches early, it did not)."""
    lag = round(at - since, 6)
    return [f"stall@{trigger}:seconds={lag!r}"] if lag > 0 else []


def _back_when_it_came_back(
    events: Sequence[Event], loss: Event, params: str, at: float, trigger: str
) -> tuple[str, list[str]]:
    """A loss's ``repair_after_polls`` counts health polls, and a recovery that a second loss
    broke polls more than the clean run's one recovery does: the slice would come back after
    other batches. The clean run gives it back to the polls from the faulted run's clock time
    on instead (the clocks stand together from the restore on), or never, if it never came
    back; the polls are kept when it came back before the clean run loses it."""
    parts = params.split(":") if params else []
    if not any(p.startswith("repair_after_polls=") for p in parts):
        return params, []
    slice_index = loss["fault"].get("slice")
    back = next(
        (
            e
            for e in events
            if e["kind"] == "slice_repaired"
            and e["seq"] > loss["seq"]
            and e.get("slice") == slice_index
        ),
        None,
    )
    if back is not None and float(back.get("t", 0.0)) <= at:
        return params, []
    kept = ":".join(p for p in parts if not p.startswith("repair_after_polls="))
    if back is None:
        return kept, []
    after = round(float(back["t"]) - at, 6)
    return kept, [f"repair@{trigger}:slice={slice_index}:after_seconds={after!r}"]


def _clock_at_loss(events: Sequence[Event], loss: Event, restore: Event, first: Event) -> float:
    """Where the clean run's clock should stand when it loses this slice: where the faulted
    run's stood, but no later than its restore less the time the first loss at this save took
    to surface as an error. The clean run pays that surfacing again after its last loss, so a
    loss that broke a restore (the faulted run's clock already past the first error) must not
    also be waited for: the clean run would restore one step late, and the monitor, polling
    on the clock, would give the slices back after other batches."""
    t = float(loss.get("t", 0.0))
    error = next(
        (e for e in events if e["kind"] == "slice_error" and e["seq"] > first["seq"]), None
    )
    begun = next(
        (
            e
            for e in events
            if e["kind"] == "restore_begin"
            and (e["run"], e["attempt"]) == (restore["run"], restore["attempt"])
        ),
        restore,
    )
    if error is None:
        return t
    surfacing = float(error.get("t", 0.0)) - float(first.get("t", 0.0))
    return min(t, float(begun.get("t", 0.0)) - surfacing)


def _kept_after_the_same_work(
    fault: Event, events: Sequence[Event], segments: list[tuple[tuple[int, int], int | None]]
) -> str:
    """A repair on a ``batch=`` trigger fires in the clean run after as many of the chain's
    batches as it did in the faulted run (which also drew the batches a failure threw away);
    any other trigger as it was written."""
    name, _, rest = str(fault["text"]).partition("@")
    trigger, _, params = rest.partition(":")
    if not trigger.startswith("batch="):
        return str(fault["text"])
    chain = {key: limit for key, limit in segments}
    before = sum(
        1
        for e in events
        if e["kind"] == "batch"
        and e["seq"] < fault["seq"]
        and (e["run"], e["attempt"]) in chain
        and (chain[(e["run"], e["attempt"])] is None or e["seq"] <= chain[(e["run"], e["attempt"])])
    )
    if before < 1:
        return str(fault["text"])
    return f"{name}@batch={before}" + (f":{params}" if params else "")


def _segments(events: Sequence[Event]) -> list[tuple[tuple[int, int], int | None]] | None:
    """The attempts the final state's batches came from, first to last, each with the seq of
    the save the next one restored (``None`` for the last attempt)."""
    attempts = [(e["run"], e["attempt"]) for e in events if e["kind"] == "batch"]
    if not attempts:
        return None
    key = attempts[-1]
    out: list[tuple[tuple[int, int], int | None]] = [(key, None)]
    seen = {key}
    while True:
        restore = _snapshot_restore(events, key)
        if restore is None:
            break
        save = _restored_save(events, restore)
        if save is None:
            return None
        if (save["run"], save["attempt"]) == key:
            break  # the attempt restored what it had itself saved (a first snapshot): it begins
        key = (save["run"], save["attempt"])
        if key in seen:
            return None
        seen.add(key)
        out.insert(0, (key, save["seq"]))
    return out


def _restored_save(events: Sequence[Event], restore: Event) -> Event | None:
    saves = [e for e in events if e["kind"] in SAVE_KINDS and not e.get("skipped")]
    return saved_for(saves, restore)


def _snapshot_restore(events: Sequence[Event], key: tuple[int, int]) -> Event | None:
    """The attempt's restore of an in-memory snapshot, if it made one."""
    return next(
        (
            e
            for e in events
            if e["kind"] == "restore_end"
            and e.get("source") == "snapshot"
            and (e["run"], e["attempt"]) == key
        ),
        None,
    )


def _chain_restores(
    events: Sequence[Event], segments: list[tuple[tuple[int, int], int | None]]
) -> list[tuple[Event, Event]]:
    """(save, restore) pairs along the chain: the losses between them caused the restore."""
    pairs = []
    for key, _ in segments[1:]:
        restore = _snapshot_restore(events, key)
        assert restore is not None  # _segments found it
        save = _restored_save(events, restore)
        assert save is not None
        pairs.append((save, restore))
    return pairs


def restore_probe(clean: str) -> str | None:
    """The restore probe's schedule for a clean rerun's: a slice-down error raised at the
    save the first loss was moved to, with no slice lost (``judging.yardsticks``); None when
    it moved no loss."""
    for item in clean.split(","):
        name, _, rest = item.partition("@")
        if name in MOVABLE:
            trigger = rest.partition(":")[0]
            return f"raise_error@{trigger}:code=DATA_LOSS"
    return None
