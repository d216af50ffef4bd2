"""The restore-latest judge: an attempt that starts while a snapshot exists (or a run after a
preemption checkpoint) goes back to the newest one before it trains, by what the observer saw of
its restores, or (a loop that puts its state back from a host copy) by the data position its
first batch was drawn at."""

from __future__ import annotations

import os
from collections.abc import Sequence

from pathways_chaos.harness.engine.recorder import Event
from pathways_chaos.harness.judging.lineage import caught_slice_errors
from pathways_chaos.harness.judging.run_outcome import own_retry
from pathways_chaos.harness.judging.wording import plural as _plural


def restore_latest(events: Sequence[Event]) -> list[str] | str:
    """An attempt that starts while a snapshot exists (or a run after a preemption
    checkpoint) restores it before it trains."""
    problems: list[str] = []
    applied = False
    checkpoint_runs: set[int] = set()
    suspended: set[int] = set()
    latest: dict[tuple[int, int], int | None] = {}
    restored: set[tuple[int, int]] = set()
    trained: set[tuple[int, int]] = set()
    #: The data position each snapshot left, by run and step (a restore goes back to it).
    left_at: dict[tuple[int, int], int] = {}
    #: The newest step each checkpoint manager (by its directory) has written so far.
    newest_saved: dict[str, int] = {}
    #: The newest step a checkpointer saved by path wrote in each folder, and its path.
    newest_in_folder: dict[str, tuple[int, str]] = {}
    #: Attempts whose loop caught a slice-down error itself (a hand-written retry restores
    #: in the same attempt), with the seq the first such error was raised at.
    caught_at: dict[tuple[int, int], int] = {}
    for where, seq in caught_slice_errors(events):
        caught_at[where] = min(seq, caught_at.get(where, seq))
    early = _before_a_save_in_flight(events)
    for e in events:
        key = (e.get("run", 0), e.get("attempt", 0))
        caught = caught_at.get(key, e["seq"]) < e["seq"]
        if e["kind"] == "snapshot_save" and e.get("position") is not None:
            left_at[(key[0], e["step"])] = e["position"]
        if e["kind"] == "run_end" and e.get("status") == "suspended":
            suspended.add(e["run"])
        if e["kind"] == "attempt_start":
            latest[key] = e.get("snapshot_latest")
        elif e["kind"] == "restore_begin" and (key not in trained or caught):
            restored.add(key)
            applied = True
        elif e["kind"] == "restore_end" and (key not in trained or caught):
            newest = latest.get(key) if key not in trained else None
            if e.get("step") is not None and newest is not None and e["step"] < newest:
                problems.append(
                    f"run {key[0]} attempt {key[1]} restored the {e.get('source', 'snapshot')} "
                    f"of step {e['step']} although the snapshot of step {newest} was the latest "
                    f"completed: it trains {_plural(newest - e['step'], 'finished step')} again"
                )
            problems += early.get(e["seq"], [])
            problems += _older_checkpoint(e, key, newest_saved)
            problems += _older_in_folder(e, key, newest_in_folder)
        elif e["kind"] == "checkpoint_save":
            checkpoint_runs.add(key[0])
            manager, step, path = e.get("manager"), e.get("step"), e.get("path")
            if step is not None and not e.get("held"):  # written when it returned
                if manager:
                    newest_saved[manager] = max(step, newest_saved.get(manager, step))
                elif isinstance(path, str) and path:
                    folder = _folder(path)
                    if step > newest_in_folder.get(folder, (step - 1, ""))[0]:
                        newest_in_folder[folder] = (step, path)
        elif e["kind"] == "batch" and key not in trained:
            trained.add(key)
            if key not in restored:
                said = _unrestored_start(
                    e, key, latest.get(key), suspended, checkpoint_runs, left_at
                )
                if said is not None:
                    applied = True
                    problems += said
    if not applied:
        if any(v is not None for v in latest.values()):
            return (
                "the attempts that started while a snapshot existed each ended before they "
                "restored or drew a batch"
            )
        return own_retry(events) or "no attempt started while a snapshot or checkpoint existed"
    return problems


def _before_a_save_in_flight(events: Sequence[Event]) -> dict[int, list[str]]:
    """Restores (by seq) of an older snapshot while a newer save was in flight (held by
    ``slow_save``) and then completed; one dropped with its slice never counts."""
    completes = {
        (e.get("run", 0), e["step"]): e.get("t") for e in events if e["kind"] == "save_released"
    }
    in_flight: dict[int, set[int]] = {}
    out: dict[int, list[str]] = {}
    for e in events:
        run, step = e.get("run", 0), e.get("step")
        if e["kind"] == "save_held" and step is not None and (run, step) in completes:
            in_flight.setdefault(run, set()).add(step)
        elif e["kind"] in ("save_released", "save_dropped"):
            in_flight.get(run, set()).discard(step)
        elif e["kind"] == "restore_end" and step is not None and in_flight.get(run):
            flying = max(in_flight[run])
            if step < flying:
                out[e["seq"]] = [
                    f"run {run} attempt {e.get('attempt')} restored the snapshot of step {step} "
                    f"while the save of step {flying} was still in flight, and that save was "
                    f"not dropped (it completed at t={completes[(run, flying)]}): it trains "
                    f"{_plural(flying - step, 'finished step')} again (wait for the save in "
                    "flight before a restore: Snapshotter.join() before load, as the guide does)"
                ]
    return out


def _older_checkpoint(
    restore: Event, key: tuple[int, int], newest_saved: dict[str, int]
) -> list[str]:
    """A checkpoint manager's restore of an older step than the newest it had written."""
    manager, step = restore.get("manager"), restore.get("step")
    newest = newest_saved.get(manager) if isinstance(manager, str) else None
    if step is None or newest is None or step >= newest:
        return []
    top = max(newest_saved.items(), key=lambda item: item[1])
    elsewhere = f"; step {top[1]} was written by {top[0]}" if top[1] > newest else ""
    return [
        f"run {key[0]} attempt {key[1]} restored the checkpoint of step {step} although its "
        f"checkpoint manager ({manager}) had written step {newest}{elsewhere}: it trains "
        f"{_plural(newest - step, 'finished step')} again (restore the newest checkpoint "
        "written, not an older one)"
    ]


def _folder(path: str) -> str:
    return os.path.dirname(os.path.normpath(path))


def _older_in_folder(
    restore: Event, key: tuple[int, int], newest_in_folder: dict[str, tuple[int, str]]
) -> list[str]:
    """A restore by path (a ``Checkpointer`` or ``ocp.v1`` load, no manager) of an older step
    than a checkpoint the loop had already written beside it, in the same folder."""
    path, step = restore.get("path"), restore.get("step")
    if not isinstance(path, str) or not path or step is None or restore.get("manager"):
        return []
    newest = newest_in_folder.get(_folder(path))
    if newest is None or step >= newest[0]:
        return []
    return [
        f"run {key[0]} attempt {key[1]} restored the checkpoint of step {step} ({path}) "
        f"although step {newest[0]} had been written beside it ({newest[1]}): it trains "
        f"{_plural(newest[0] - step, 'finished step')} again (restore the newest checkpoint "
        "written, not an older one: compare steps as numbers, not names)"
    ]


def _unrestored_start(
    batch: Event,
    key: tuple[int, int],
    newest: int | None,
    suspended: set[int],
    checkpoint_runs: set[int],
    left_at: dict[tuple[int, int], int],
) -> list[str] | None:
    """An attempt's first batch with no restore the observer saw before it: what that says
    (``None``: nothing, the judge does not apply to it)."""
    run, attempt = key
    if attempt <= 1 and run - 1 in suspended and run - 1 not in checkpoint_runs:
        return [
            f"run {run} started over after the preemption notice: run {run - 1} "
            "was suspended without writing a checkpoint (on SIGTERM, save one to "
            "checkpoint_dir and restore it when the next run starts)"
        ]
    if newest is not None and batch.get("position"):
        # No restore the observer saw, yet the data went on past its start: the loop put its
        # state back another way (a host copy); the data position says which.
        went_to = [s for (r, s), at in left_at.items() if r == run and at == batch["position"]]
        if not went_to:
            return None
        if newest not in went_to and max(went_to) < newest:
            return [
                f"run {run} attempt {attempt} drew its first batch at data position "
                f"{batch['position']}, where the snapshot of step {max(went_to)} left the "
                f"data, although the snapshot of step {newest} was the latest completed: "
                "it went back to an older snapshot (put back without a Snapshotter "
                "load the observer sees), and trains "
                f"{_plural(newest - max(went_to), 'finished step')} again"
            ]
        return []
    if newest is not None:
        return [
            f"run {run} attempt {attempt} trained without restoring, though the "
            f"snapshot of step {newest} was the latest completed: it started over"
        ]
    if attempt <= 1 and run - 1 in checkpoint_runs:
        return [
            f"run {run} trained without restoring the checkpoint run {run - 1} "
            "wrote on its preemption notice: it started over"
        ]
    return None
