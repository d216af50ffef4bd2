"""What "survived" means, decided from the event log alone plus a one-device replay.

The committed lineage is rebuilt from the log: the last attempt's steps, back through the
restore that started it to the attempt that saved that snapshot, and so on. Every check names
the first step, sample id or leaf that breaks it.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from pathways_chaos.harness.engine.recorder import Event
from pathways_chaos.harness.errors import ChaosError

#: Replay tolerance. The fake-cluster run reduces each step's gradient over a batch sharded
#: across up to 64 CPU devices, the replay on one: float32 sums in a different order differ
#: by a few ulps per step, and 100 SGD-with-momentum steps of a contracting MLP keep that
#: well under 1e-5 relative. A wrong batch, a skipped or repeated step moves params by >1e-3.
REPLAY_RTOL = 2e-5
REPLAY_ATOL = 2e-6


class OracleViolation(ChaosError, AssertionError):
    """The run did not survive; the message lists every violated check."""


@dataclasses.dataclass(frozen=True)
class StepRecord:
    run: int
    attempt: int
    step: int
    ids: tuple[int, ...]
    seq: int


@dataclasses.dataclass
class Verdict:
    violations: list[str]
    completed: bool
    lineage: list[StepRecord]
    wasted_steps: int
    recoveries: list[dict[str, Any]]
    error: str | None

    @property
    def ok(self) -> bool:
        return not self.violations

    def raise_if_failed(self) -> None:
        if self.violations:
            raise OracleViolation("; ".join(self.violations))


def check(
    events: Sequence[Event], *, replay: bool = True, expect_completed: bool = True
) -> Verdict:
    """Runs oracle checks 1-6 over a log."""
    violations: list[str] = []
    lineage, lineage_problems = committed_lineage(events)
    violations += lineage_problems
    ends = [e for e in events if e["kind"] == "run_end"]
    completed = bool(ends) and ends[-1]["status"] == "completed"
    error = next((e.get("error") for e in reversed(ends) if e["status"] == "failed"), None)
    if expect_completed and not completed:
        violations.append(f"run did not complete: {error or 'no run_end in the log'}")

    violations += check_exactly_once(events, lineage, completed)
    if replay and completed:
        violations += check_replay(events, lineage)
    violations += check_snapshot_round_trips(events)
    violations += check_meshes(events)
    violations += check_progress(events)
    violations += check_no_leaks(events)
    violations += check_no_pinned_host_leaks(events)
    steps = [e for e in events if e["kind"] == "step"]
    return Verdict(
        violations=violations,
        completed=completed,
        lineage=lineage,
        wasted_steps=len(steps) - len(lineage),
        recoveries=recoveries(events),
        error=error,
    )


def assert_survived(events: Sequence[Event], *, replay: bool = True) -> Verdict:
    verdict = check(events, replay=replay)
    verdict.raise_if_failed()
    return verdict


# -- the lineage ---------------------------------------------------------------------------
def committed_lineage(events: Sequence[Event]) -> tuple[list[StepRecord], list[str]]:
    """The step executions that the final state is made of, in step order."""
    problems: list[str] = []
    by_attempt: dict[tuple[int, int], list[StepRecord]] = collections.defaultdict(list)
    restores: dict[tuple[int, int], Event] = {}
    saves: list[Event] = []
    for e in events:
        key = (e.get("run", 0), e.get("attempt", 0))
        if e["kind"] == "step":
            by_attempt[key].append(StepRecord(key[0], key[1], e["step"], tuple(e["ids"]), e["seq"]))
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
                f"attempt {key[1]} restored step {restore['step']} that no attempt saved"
            )
            break
        save = earlier[-1]
        key, upto, seq_limit = (save["run"], save["attempt"]), restore["step"], save["seq"]
    lineage = [r for seg in reversed(segments) for r in seg]
    for prev, nxt in itertools.pairwise(lineage):
        if nxt.step != prev.step + 1:
            problems.append(
                f"committed steps are not consecutive: step {prev.step} is followed by "
                f"step {nxt.step} (attempt {nxt.attempt})"
            )
            break
    if lineage and lineage[0].step != 0:
        problems.append(f"committed steps start at step {lineage[0].step}, not 0")
    return lineage, problems


# -- 1. exactly once -----------------------------------------------------------------------
def check_exactly_once(
    events: Sequence[Event], lineage: Sequence[StepRecord], completed: bool
) -> list[str]:
    from pathways_chaos.harness.reference.data import SyntheticData

    start = _run_start(events)
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
        where = _first_step_with(lineage, set(duplicated) | set(missing), counted)
        problems.append(
            f"exactly-once violated from step {where}: duplicated sample ids {duplicated[:20]}"
            f"{' ...' if len(duplicated) > 20 else ''}; missing sample ids {missing[:20]}"
            f"{' ...' if len(missing) > 20 else ''}"
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
    lineage: Sequence[StepRecord], ids: set[int], counted: collections.Counter[int]
) -> int | str:
    seen: collections.Counter[int] = collections.Counter()
    for r in lineage:
        for i in r.ids:
            seen[i] += 1
            if i in ids and seen[i] > 1:
                return r.step
    for r in lineage:
        if ids & set(r.ids):
            return r.step
    return "the end" if lineage else "step 0"


# -- 2. replay equality --------------------------------------------------------------------
def check_replay(events: Sequence[Event], lineage: Sequence[StepRecord]) -> list[str]:
    """Replays the committed batches on one device, with no faults, and compares."""
    final = next((e for e in reversed(events) if e["kind"] == "run_end"), None)
    start = _run_start(events)
    if final is None or start is None or "final_state" not in final:
        return ["replay impossible: the log has no final state"]
    replayed = replay_state(start["config"], lineage)
    return compare_state(final["final_state"], replayed)


def replay_state(config: dict[str, Any], lineage: Sequence[StepRecord]) -> dict[str, np.ndarray]:
    import functools

    import jax

    from pathways_chaos.harness.reference import model
    from pathways_chaos.harness.reference.data import SyntheticData

    data = SyntheticData(**config["data"])
    device = jax.devices("cpu")[0]
    step = jax.jit(functools.partial(model.train_step, lr=config["lr"], beta=config["beta"]))
    with jax.default_device(device):
        state = model.init_state(config["seed"])
        for record in lineage:
            batch = data.batch(list(record.ids))
            state, _ = step(state, batch["x"], batch["y"])
        flat = jax.tree_util.tree_flatten_with_path(jax.device_get(state))[0]
    return {jax.tree_util.keystr(p): np.asarray(v) for p, v in flat}


def compare_state(final: dict[str, Any], replayed: dict[str, np.ndarray]) -> list[str]:
    if sorted(final) != sorted(replayed):
        return [f"final state leaves {sorted(final)} differ from the replay's {sorted(replayed)}"]
    for path in sorted(final):
        got = np.asarray(final[path]["values"], dtype=final[path]["dtype"]).reshape(
            final[path]["shape"]
        )
        want = replayed[path]
        if got.shape != want.shape:
            return [f"leaf {path}: shape {got.shape} differs from the replay's {want.shape}"]
        if not np.allclose(got, want, rtol=REPLAY_RTOL, atol=REPLAY_ATOL):
            worst = float(np.max(np.abs(got - want)))
            return [
                f"final state differs from a one-device replay of the committed batches at leaf "
                f"{path}: max abs diff {worst:.3g} "
                f"(tolerance rtol={REPLAY_RTOL}, atol={REPLAY_ATOL})"
            ]
    return []


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
                    f"restore of step {e['step']} in attempt {e['attempt']} is not bitwise the "
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
                    f"attempt {key[1]} restored step {e['step']}, newer than any snapshot saved"
                )
        elif e["kind"] == "attempt_ready" and key in restored and e.get("start_step") is not None:
            want = restored.pop(key) + 1
            if e["start_step"] != want:
                problems.append(
                    f"attempt {key[1]} resumed at step {e['start_step']} after restoring step "
                    f"{want - 1}: it must resume at step {want}"
                )
    return problems


# -- 6. no leaks ---------------------------------------------------------------------------
def check_no_leaks(events: Sequence[Event]) -> list[str]:
    """Device arrays alive when an attempt is ready must not grow from attempt to attempt.

    Counted at the start of each retry attempt, not at an in-loop scale-up, where the last
    step's batch is still (legitimately) in scope.
    """
    counts = [
        (e["attempt"], e["live"]["by_kind"].get("device", 0))
        for e in events
        if e["kind"] == "attempt_ready" and e.get("reason") == "attempt"
    ]
    if not counts:
        return []
    first = counts[0][1]
    for attempt, n in counts[1:]:
        if n > first:
            return [
                f"live device arrays grew from {first} in the first attempt to {n} in attempt "
                f"{attempt}: something keeps the failed attempt's arrays alive"
            ]
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


def _run_start(events: Sequence[Event]) -> Event | None:
    return next((e for e in events if e["kind"] == "run_start"), None)
