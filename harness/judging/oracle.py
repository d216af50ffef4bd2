"""What "survived" means, decided from the event log alone plus a one-device replay.

The committed lineage (``judging.committed``) is rebuilt from the log: the last attempt's
steps, back through the restore that started it to the attempt that saved that snapshot, and so
on. Every check names the first step, sample id or leaf that breaks it, and the run and attempt
it happened in.

Each check is a function of the event log alone (``check_*``), so other judges (the loop
oracle for users' own loops) reuse them one by one. The replay (``judging.replay``) runs a
fault-free, one-device pass of the same trainer class over the committed batches; only when the
trainer cannot be rebuilt does it fall back to the reference model's step, and every replay
message says which.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from pathways_chaos.harness.engine.recorder import Event
from pathways_chaos.harness.judging.committed import StepRecord, committed_lineage, run_start, who
from pathways_chaos.harness.judging.panel import Judge, convene
from pathways_chaos.harness.judging.replay import Replayed, check_replay
from pathways_chaos.harness.judging.verdict import Verdict, judge_error


@dataclasses.dataclass(frozen=True)
class TrainerHistory:
    """What the trainer's judges read: the log, its committed steps, and whether it completed."""

    events: Sequence[Event]
    lineage: list[StepRecord]
    completed: bool


#: The reference trainer's judges, in the order the verdict lists them.
JUDGES: tuple[Judge[TrainerHistory], ...] = (
    Judge("exactly-once", lambda h: check_exactly_once(h.events, h.lineage, h.completed)),
    Judge("snapshot-round-trip", lambda h: check_snapshot_round_trips(h.events)),
    Judge("mesh-rebuild", lambda h: check_meshes(h.events)),
    Judge("scale-up-joins", lambda h: check_scale_up_joins(h.events)),
    Judge("batch-sizes", lambda h: check_batch_sizes(h.events)),
    Judge("progress", lambda h: check_progress(h.events)),
    Judge("restore-newest", lambda h: check_restore_newest(h.events)),
    Judge("no-leaks", lambda h: check_no_leaks(h.events)),
    Judge("no-pinned-host-leaks", lambda h: check_no_pinned_host_leaks(h.events)),
)
#: The judge a trainer's pass needs (its replay is a caller's choice).
CENTRAL_JUDGES = ("exactly-once",)


def check(
    events: Sequence[Event],
    *,
    replay: bool = True,
    expect_completed: bool = True,
    trainer: Any = None,
    replayed: Replayed | Callable[[], Replayed] | None = None,
) -> Verdict:
    """Runs every oracle check over a log; ``trainer`` (a class) overrides the log's for replay,
    ``replayed`` gives (or makes, when asked) a replay run in the trainer's own process."""
    verdict = Verdict(central=CENTRAL_JUDGES)
    try:
        lineage, lineage_problems = committed_lineage(events)
    except Exception as failure:  # every check below reads the lineage: say so, once
        lineage, lineage_problems = [], []
        verdict.judge_errors["lineage"] = judge_error(failure)
    verdict.violations += lineage_problems
    ends = [e for e in events if e["kind"] == "run_end"]
    completed = bool(ends) and ends[-1]["status"] == "completed"
    error = next((e.get("error") for e in reversed(ends) if e["status"] == "failed"), None)
    if expect_completed and not completed:
        verdict.violations.append(f"run did not complete: {error or 'no run_end in the log'}")
    judges = list(JUDGES)
    if replay and completed:

        def replay_check(h: TrainerHistory) -> list[str] | str:
            elsewhere = replayed() if callable(replayed) else replayed
            return check_replay(h.events, h.lineage, trainer, elsewhere)

        judges.insert(1, Judge("replay", replay_check))
    convene(judges, TrainerHistory(events, lineage, completed), verdict)
    steps = [e for e in events if e["kind"] == "step"]
    verdict.completed, verdict.error, verdict.lineage = completed, error, lineage
    verdict.wasted_steps = len(steps) - len(lineage)
    verdict.recoveries = recoveries(events)
    return verdict


def assert_survived(events: Sequence[Event], *, replay: bool = True) -> Verdict:
    verdict = check(events, replay=replay)
    verdict.raise_if_failed()
    return verdict


# -- 1. exactly once -----------------------------------------------------------------------
def check_exactly_once(
    events: Sequence[Event], lineage: Sequence[StepRecord], completed: bool
) -> list[str]:
    from pathways_chaos.harness.reference.data import SyntheticData

    start = run_start(events)
    if start is None:
        return []
    data = SyntheticData(**start["config"]["data"])
    consumed = [i for r in lineage for i in r.ids]
    expected = data.order(len(consumed))
    problems = []
    counted, wanted = collections.Counter(consumed), collections.Counter(expected)
    duplicated = sorted(i for i, n in counted.items() if n > 1)
    missing = sorted((wanted - counted).elements())
    if duplicated or missing:
        where, ran_in = _first_step_with(lineage, set(duplicated), set(missing), expected, events)
        problems.append(
            f"exactly-once violated from {where}: duplicated sample ids {duplicated[:20]}"
            f"{' ...' if len(duplicated) > 20 else ''}; missing sample ids {missing[:20]}"
            f"{' ...' if len(missing) > 20 else ''}{ran_in}"
        )
    elif consumed != expected:
        for r in lineage:
            offset = sum(len(x.ids) for x in lineage if x.step < r.step)
            if list(r.ids) != expected[offset : offset + len(r.ids)]:
                problems.append(
                    f"sample order differs from the fault-free order at step {r.step}: "
                    f"got ids {list(r.ids)[:8]}, expected {expected[offset : offset + 8]}"
                )
                break
    final_step = start["config"]["final_step"]
    if completed and len(lineage) != final_step:
        problems.append(f"{len(lineage)} committed steps, expected {final_step}")
    return problems


def _first_step_with(
    lineage: Sequence[StepRecord],
    duplicated: set[int],
    missing: set[int],
    expected: list[int],
    events: Sequence[Event],
) -> tuple[str, str]:
    """The first committed step that eats a duplicate, or whose place a missing id had, and
    the run and attempt it ran in."""
    seen: collections.Counter[int] = collections.Counter()
    first_dup = None
    for r in lineage:
        for i in r.ids:
            seen[i] += 1
            if i in duplicated and seen[i] > 1 and first_dup is None:
                first_dup = r
    offset, first_gap = 0, None
    for r in lineage:
        if missing & set(expected[offset : offset + len(r.ids)]):
            first_gap = r
            break
        offset += len(r.ids)
    found = [r for r in (first_dup, first_gap) if r is not None]
    if not found:
        return ("the first step" if not lineage else f"after step {lineage[-1].step}"), ""
    r = min(found, key=lambda x: x.step)
    return f"step {r.step}", f" (step {r.step} ran in {who(events, r.run, r.attempt)})"


# -- 3. snapshot round-trip ----------------------------------------------------------------
def check_snapshot_round_trips(events: Sequence[Event]) -> list[str]:
    problems = []
    saves = [e for e in events if e["kind"] in ("snapshot_save", "checkpoint_save")]
    for e in events:
        if e["kind"] != "restore_end":
            continue
        kind = "checkpoint_save" if e["source"] == "checkpoint" else "snapshot_save"
        saved = [s for s in saves if s["kind"] == kind and s["step"] == e["step"]]
        saved = [s for s in saved if s["seq"] < e["seq"]]
        if not saved:
            continue  # reported by the lineage
        want, got = saved[-1]["digest"], e["digest"]
        for leaf in sorted(set(want) | set(got)):
            if want.get(leaf) != got.get(leaf):
                problems.append(
                    f"restore of step {e['step']} in {who(events, e['run'], e['attempt'])} is "
                    "not bitwise the "
                    f"saved state: leaf {leaf} differs"
                )
                break
    return problems


# -- 4. mesh rebuild -----------------------------------------------------------------------
def check_meshes(events: Sequence[Event]) -> list[str]:
    problems: list[str] = []
    slices: dict[int, list[int]] = {}
    down: set[int] = set()
    active: list[int] | None = None
    for e in events:
        kind = e["kind"]
        if kind == "run_start":
            slices = {int(s): ids for s, ids in e["slices"].items()}
        elif kind == "attempt_start":
            active = list(e["active_slices"])
        elif kind == "scale_up" and active is not None and e["how"] == "in_loop":
            active = sorted(set(active) | set(e["joining"]))
        elif kind == "fault":
            fault = e["fault"]
            if "repair_after_polls" in fault and "touched" in e:
                down.add(fault["slice"])
            elif fault["kind"] == "repair":
                down.discard(fault["slice"])
        elif kind == "mesh" and active is not None:
            want = [slices[s] for s in sorted(active)]
            if e["device_ids"] != want:
                problems.append(
                    f"attempt {e['attempt']} mesh holds devices {e['device_ids']}, not the active "
                    f"slices {sorted(active)} in slice order {want}"
                )
            per_slice = len(next(iter(slices.values()))) if slices else 0
            if e["shape"] != [len(active), per_slice]:
                problems.append(
                    f"attempt {e['attempt']} mesh shape {e['shape']} is not "
                    f"(active={len(active)}, per_slice={per_slice})"
                )
        elif kind == "attempt_ready":
            # Slices a fault took down stay dead until repaired; a rejoined slice is live.
            dead = {d for s in down - set(active or []) for d in slices.get(s, [])}
            on_dead = sorted(dead & set(e["live"]["device_ids"]))
            if on_dead:
                problems.append(
                    f"attempt {e['attempt']}: live arrays have shards on dead devices {on_dead}"
                )
        if kind == "attempt_ready" and active is not None:
            down -= set(active)
    return problems


# -- 5. progress and waste -----------------------------------------------------------------
def check_progress(events: Sequence[Event]) -> list[str]:
    """A restore goes back to the newest snapshot saved before it, and resumes right after it."""
    problems = []
    last_saved: int | None = None
    restored: dict[tuple[int, int], int] = {}
    for e in events:
        key = (e.get("run", 0), e.get("attempt", 0))
        if e["kind"] in ("snapshot_save", "checkpoint_save"):
            last_saved = e["step"]
        elif e["kind"] == "restore_end":
            restored[key] = e["step"]
            if last_saved is not None and e["step"] > last_saved:
                problems.append(
                    f"{who(events, *key)} restored step {e['step']}, newer than any snapshot saved"
                )
        elif e["kind"] == "attempt_ready" and key in restored and e.get("start_step") is not None:
            want = restored.pop(key) + 1
            if e["start_step"] != want:
                problems.append(
                    f"{who(events, *key)} resumed at step {e['start_step']} after restoring step "
                    f"{want - 1}: it must resume at step {want}"
                )
    return problems


# -- 7. a restore takes the newest snapshot ---------------------------------------------------
def check_restore_newest(events: Sequence[Event]) -> list[str]:
    """Each restore comes from the newest snapshot complete at the failure, or in flight then.

    Complete: a ``snapshot_complete`` (or the save gate's ``save_released``) before the
    restore. In flight: a ``save_held`` not dropped (its slice lost) before the restore; a
    trainer must wait for it. An attempt that starts from step 0 while a snapshot exists
    violates it too, and so does a run after a preemption that does not restore the checkpoint
    its predecessor wrote on the notice.
    """
    problems: list[str] = []
    complete: dict[int, set[int]] = collections.defaultdict(set)
    held: dict[int, dict[int, Event]] = collections.defaultdict(dict)
    failure: dict[int, str] = {}
    last_step: dict[tuple[int, int], int] = {}
    restored: set[tuple[int, int]] = set()
    #: The checkpoint each run wrote on its preemption notice, by the run that must resume it.
    preempted: dict[int, int] = {}
    saved_on_notice: dict[int, int] = {}
    for e in events:
        kind, run = e["kind"], e.get("run", 0)
        if kind == "checkpoint_save":
            saved_on_notice[run] = e["step"]
        elif kind == "suspend" and run in saved_on_notice:
            preempted[run + 1] = saved_on_notice[run]
        if kind == "attempt_ready" and e["attempt"] == 1 and run in preempted:
            saved = preempted.pop(run)
            if (run, 1) not in restored:
                problems.append(
                    f"run {run} started over from step {e.get('start_step')} with no restore "
                    f"after the preemption: run {run - 1} saved checkpoint step {saved} on its "
                    "notice (on GKE the next run is a new container: only what was written to "
                    "disk survives)"
                )
        if kind == "step":
            last_step[(run, e["attempt"])] = e["step"]
        elif kind in ("snapshot_complete", "save_released"):
            complete[run].add(e["step"])
            held[run].pop(e["step"], None)
        elif kind == "save_held":
            held[run][e["step"]] = e
        elif kind == "save_dropped":
            held[run].pop(e["step"], None)
        elif kind == "error" or (kind == "scale_up" and e.get("how") == "signal"):
            at = last_step.get((run, e["attempt"]))
            what = e.get("type", "a scale-up signal") if kind == "error" else "a scale-up signal"
            failure[run] = f"{what} after step {at} in attempt {e['attempt']}"
        elif kind == "restore_end":
            restored.add((run, e["attempt"]))
            if e["source"] != "snapshot":
                continue
            want, how = _newest(complete[run], held[run])
            if want is not None and e["step"] < want:
                problems.append(
                    f"{who(events, run, e['attempt'])} restored snapshot step {e['step']}, but "
                    f"snapshot step {want} was {how} at the failure "
                    f"({failure.get(run, 'unknown')}): a restore must wait for the save in "
                    f"flight and take the newest snapshot"
                )
        elif kind == "attempt_ready" and e.get("reason") == "attempt" and e["attempt"] > 1:
            if (run, e["attempt"]) in restored:
                continue
            want, how = _newest(complete[run], held[run])
            if want is not None:
                problems.append(
                    f"{who(events, run, e['attempt'])} started again from step "
                    f"{e.get('start_step')} with no restore, but snapshot step {want} was {how} "
                    f"at the failure ({failure.get(run, 'unknown')})"
                )
    return problems


def _newest(complete: set[int], held: dict[int, Event]) -> tuple[int | None, str]:
    best_complete = max(complete, default=None)
    best_held = max(held, default=None)
    if best_held is not None and (best_complete is None or best_held > best_complete):
        since = held[best_held].get("since")
        return best_held, f"in flight (held since t={since}, on no lost slice)"
    return best_complete, "complete"


# -- 8. a scale-up joins every slice ---------------------------------------------------------
def check_scale_up_joins(events: Sequence[Event]) -> list[str]:
    """After an in-loop scale-up the next step runs on a mesh holding every slice that joined,
    and every step runs on the attempt's active slices (``mesh_slices`` of the step events)."""
    problems: list[str] = []
    active: dict[tuple[int, int], set[int]] = {}
    joined: dict[tuple[int, int], tuple[set[int], int]] = {}
    reported: set[tuple[int, int]] = set()
    for e in events:
        kind = e["kind"]
        key = (e.get("run", 0), e.get("attempt", 0))
        if kind == "attempt_start":
            active[key] = set(e["active_slices"])
        elif kind == "scale_up" and e.get("how") == "in_loop":
            active[key] = active.get(key, set()) | set(e["joining"])
            joined[key] = (set(e["joining"]), e["step"])
        elif kind == "step" and "mesh_slices" in e and key not in reported:
            on = set(e["mesh_slices"])
            if key in joined:
                joining, after = joined.pop(key)
                if not joining <= on:
                    reported.add(key)
                    problems.append(
                        f"{who(events, *key)}: slices {sorted(joining - on)} joined by an in-loop "
                        f"scale-up after step {after}, but step {e['step']} ran on a mesh of "
                        f"slices {sorted(on)}: the mesh was not rebuilt with the joining slices"
                    )
                    continue
            if key in active and on != active[key]:
                reported.add(key)
                problems.append(
                    f"{who(events, *key)}: step {e['step']} ran on a mesh of slices {sorted(on)}, "
                    f"not the active slices {sorted(active[key])}"
                )
    return problems


# -- 9. the batch follows the mesh -----------------------------------------------------------
def check_batch_sizes(events: Sequence[Event]) -> list[str]:
    """Each step's global batch is sized for its mesh, and what it trained is what it consumed.

    ``batch='scaled'``: global_batch x active/total slices; ``'fixed'``: global_batch.
    """
    start = run_start(events)
    if start is None or "batch" not in start.get("config", {}):
        return []
    config = start["config"]
    total = len(start.get("slices", {})) or 1
    problems: list[str] = []
    reported: set[tuple[int, int]] = set()
    for e in events:
        if e["kind"] != "step" or "mesh_slices" not in e:
            continue
        key = (e.get("run", 0), e.get("attempt", 0))
        if key in reported:
            continue
        n = len(e["mesh_slices"])
        want = (
            config["global_batch"]
            if config["batch"] == "fixed"
            else config["global_batch"] * n // total
        )
        ids = list(e["ids"])
        span = f"ids {ids[0]}..{ids[-1]}" if ids else "no ids"
        if len(ids) != want:
            reported.add(key)
            why = (
                f"= {config['global_batch']} x {n}/{total} slices"
                if config["batch"] == "scaled"
                else "batch='fixed'"
            )
            sized_for = (
                f"; {len(ids)} is the batch for {len(ids) * total // config['global_batch']} slices"
                if config["batch"] == "scaled" and len(ids) * total % config["global_batch"] == 0
                else ""
            )
            problems.append(
                f"{who(events, *key)}: step {e['step']} consumed a global batch of {len(ids)} "
                f"({span}) on a mesh of {n} slices {e['mesh_slices']}, which wants {want} "
                f"({why}){sized_for}: the batch was not resized with the mesh"
            )
        elif e.get("trained") is not None and e["trained"] != len(ids):
            reported.add(key)
            problems.append(
                f"{who(events, *key)}: step {e['step']} consumed {len(ids)} samples ({span}) "
                f"but trained on {e['trained']}: consumed and trained samples must be the same"
            )
    return problems


# -- 6. no leaks ---------------------------------------------------------------------------
def check_no_leaks(events: Sequence[Event]) -> list[str]:
    """Device arrays alive when an attempt is ready must not grow from attempt to attempt.

    Counted at the start of each retry attempt, not at an in-loop scale-up, where the last
    step's batch is still (legitimately) in scope. The census counts the whole process, so
    arrays an earlier episode left behind may be freed during this one: each attempt is held
    to the fewest seen at an earlier attempt, not to the first attempt's count.
    """
    counts = [
        (e.get("run", 0), e["attempt"], e["live"]["by_kind"].get("device", 0))
        for e in events
        if e["kind"] == "attempt_ready" and e.get("reason") == "attempt"
    ]
    if not counts:
        return []
    base_run, base_attempt, base = counts[0]
    for run, attempt, n in counts[1:]:
        if n > base:
            where = (
                "the first attempt"
                if (base_run, base_attempt) == counts[0][:2]
                else (who(events, base_run, base_attempt))
            )
            return [
                f"live device arrays grew from {base} in {where} to {n} in "
                f"{who(events, run, attempt)}: something keeps the failed attempt's arrays alive"
            ]
        if n < base:
            base_run, base_attempt, base = run, attempt, n
    return []


def check_no_pinned_host_leaks(events: Sequence[Event]) -> list[str]:
    """Pinned-host arrays (a Snapshotter's snapshots) alive at a run's end were alive at its start.

    A run that ends (completed or suspended) has let go of its Snapshotter; one that keeps it
    keeps its last snapshot, one pinned-host tree per replica, for the rest of the process.
    Logs without the counts (older logs, other trainers) are not judged.
    """
    start: dict[int, int] = {}
    for e in events:
        if e["kind"] == "run_start" and "pinned_host" in e:
            start[e["run"]] = e["pinned_host"]
        elif e["kind"] == "run_end" and e["status"] != "failed" and e["run"] in start:
            n = e.get("pinned_host")
            if n is not None and n > start[e["run"]]:
                return [
                    f"pinned-host arrays grew from {start[e['run']]} at the start of run "
                    f"{e['run']} to {n} at its end: a Snapshotter (or a host copy) outlives the "
                    "run; release it with harness.engine.snapshotter_release.release_snapshotter"
                ]
    return []


# -- recovery timings ----------------------------------------------------------------------
def recoveries(events: Sequence[Event]) -> list[dict[str, Any]]:
    """For each fault: when the trainer saw it, and when training was ready again.

    A fault that raised is recovered when the next attempt is ready; a repair, when the
    repaired slice is back in the mesh.
    """
    out = []
    for i, e in enumerate(events):
        if e["kind"] != "fault":
            continue
        later = events[i + 1 :]
        seen = next((x for x in later if x["kind"] == "error"), None)
        if e["fault"]["kind"] == "repair":
            back = e["fault"]["slice"]
            ready = next((x for x in later if x["kind"] == "mesh" and back in x["slices"]), None)
        else:
            ready = next((x for x in later if x["kind"] == "attempt_ready"), None)
        out.append(
            {
                "fault": e["text"],
                "kind": e["fault"]["kind"],
                "fault_t": e["t"],
                "detected": seen is not None,
                "recovered": ready is not None,
                "detect_wall_s": None if seen is None else round(seen["wall"] - e["wall"], 6),
                "recovery_s": None if ready is None else round(ready["t"] - e["t"], 6),
                "recovery_wall_s": None if ready is None else round(ready["wall"] - e["wall"], 6),
            }
        )
    return out
