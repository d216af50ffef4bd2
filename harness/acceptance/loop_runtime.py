"""Runtime checks on the team's own loop (``--chaos-loop``), unchanged, on the fake cluster.

Three runs, made when a check needs them: **fault-free**, **interrupted** (a slice lost right
after the loop's second snapshot, back after two health polls, so a pause-and-resume loop
recovers too) and **preempted** (a preemption notice, when the loop handles SIGTERM). The loop
runs as it will in production: its own ``Manager``, ``elastic_retry``, Snapshotter, iterator
and restore code, watched by the black-box observer, judged by the loop oracle. So
``interruption PASS`` means *their* recovery code recovered. The adapter
(``--acceptance-adapter``) is an optional extra, for what the loop's run cannot show.
"""

from __future__ import annotations

import functools
import itertools
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pathways_chaos.harness.acceptance.recovery_time import (
    LOST_SLICE,
    RECOVERY_BUDGET_S,
    input_wait_row,
    recovery_findings,
    runtime_topology,
)
from pathways_chaos.harness.acceptance.runtime import ADAPTER_RUNTIME_CHECKS
from pathways_chaos.harness.acceptance.table import CheckResult, Finding
from pathways_chaos.harness.engine.topology import SliceTopology
from pathways_chaos.harness.episodes.loop_episode import loop_name
from pathways_chaos.harness.episodes.result import EpisodeResult
from pathways_chaos.harness.judging import loop_oracle
from pathways_chaos.harness.judging.verdict import Verdict


class LoopRuns:
    """The runs of one loop the checks read, made lazily, once each."""

    def __init__(
        self,
        loop: Callable[..., Any] | str,
        topology: SliceTopology | None = None,
        workdir: str | Path | None = None,
        adapter_runs: Any = None,
        recovery_budget_s: float = RECOVERY_BUDGET_S,
    ) -> None:
        topology = runtime_topology(topology)
        self.loop = loop  # a spec is imported only by the runs' child processes
        self.name = loop if isinstance(loop, str) else loop_name(loop)
        self.topology = topology
        self.adapter_runs = adapter_runs  # RuntimeRuns of --acceptance-adapter, or None
        self.recovery_budget_s = recovery_budget_s
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="acceptance-loop-")
        self.workdir = Path(workdir or self._tmp.name)  # type: ignore[union-attr]

    @functools.cached_property
    def fault_free(self) -> EpisodeResult:
        return self._episode("fault-free", "")

    @functools.cached_property
    def fault_batch(self) -> int:
        """Right after the loop's second snapshot (its first, or mid-run, if it saves less)."""
        events = self.fault_free.events
        saves = [e["batch"] for e in _after_saves(events)]
        batches = sum(1 for e in events if e["kind"] == "batch")
        if len(saves) >= 2:
            return saves[1] + 1
        if saves:
            return saves[0] + 1
        return max(1, batches // 2)

    @property
    def interruption(self) -> str:
        return f"data_loss@batch={self.fault_batch}:slice={LOST_SLICE}:repair_after_polls=2"

    @functools.cached_property
    def interrupted(self) -> EpisodeResult:
        return self._episode("interrupted", self.interruption)

    @functools.cached_property
    def preempted(self) -> EpisodeResult:
        return self._episode("preempted", f"preemption@batch={self.fault_batch}")

    @functools.cached_property
    def interrupted_verdict(self) -> Verdict:
        return loop_oracle.judge_loop(self.interrupted.events, self.fault_free.events)

    def _episode(self, name: str, schedule: str) -> EpisodeResult:
        from pathways_chaos.harness.play import play_loop

        # Each run is a child process on a fake of this shape: the wall and fake-clock deadlines
        # end a loop that waits for what never comes (more slices than the fake has) there.
        outcome = play_loop(
            self.loop,
            schedule,
            topology=self.topology,
            log_path=self.workdir / f"loop-{name}.jsonl",
            checkpoint_dir=self.workdir / f"checkpoints-{name}",
            digests=True,  # the restore rows compare each restore with its save
        )
        result: EpisodeResult = outcome.result
        return result

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()


# -- the checks ----------------------------------------------------------------------------
def check_data_order(runs: LoopRuns) -> CheckResult:
    verdict = loop_oracle.judge_loop(runs.fault_free.events)
    findings = [Finding("fault-free run", v) for v in verdict.violations]
    crashed = failed_run("fault-free run", runs.fault_free)
    if crashed and not any(
        "crashed" in f.message or "did not complete" in f.message for f in findings
    ):
        findings.insert(0, Finding("fault-free run", crashed[0]))
    lineage = verdict.batches
    note = (
        f"{len(lineage)} batches, data positions 0..{_last_position(lineage)} each once, in order"
    )
    fix = (
        "read the global dataset from the one controller (grain ElasticIterator, NoSharding), "
        "not a per-host shard chosen by process index or a fixed host count"
    )
    if crashed and not verdict.batches:  # it never trained: its data order is not the cause
        fix = "make the loop run fault-free first: fix the crash named above, at its line"
    result = CheckResult(
        "data-order",
        "the loop's fault-free run consumes each data position once, in order",
        fix,
        tuple(findings),
        note,
    )
    if "exactly-once" in verdict.not_judged and not crashed:
        return _not_observable(result, verdict.not_judged["exactly-once"], runs)
    return result


def check_snapshot_restore(runs: LoopRuns) -> CheckResult:
    result = CheckResult(
        "snapshot-restore",
        "the loop's restore of its in-memory snapshot gives back the saved state and data position",
        "save the iterator's get_state() with the model in every snapshot and set_state() it "
        "after load; the state must be replicated along the replica axis",
    )
    return _restore_row(runs, runs.interrupted, "snapshot", result)


def check_checkpoint_restore(runs: LoopRuns) -> CheckResult:
    result = CheckResult(
        "checkpoint-restore",
        "after a preemption notice the loop checkpoints, and the next run restores it",
        "on SIGTERM, save the state and iterator position with Orbax to the checkpoint "
        "directory and return; on start, restore the latest checkpoint and resume at its "
        "step + 1",
    )
    fault = next((e for e in runs.preempted.events if e["kind"] == "fault"), None)
    if fault is not None and "raised" in fault:
        return _skip(result, f"the loop installs no SIGTERM handler ({fault['raised']})")
    return _restore_row(runs, runs.preempted, "checkpoint", result)


def check_compile_time(runs: LoopRuns) -> CheckResult:
    events = runs.fault_free.events
    intervals = _batch_intervals(events)
    steady = steady_recompiles(events)
    crashed = failed_run("fault-free run", runs.fault_free)
    findings: list[Finding] = []
    note = ""
    if len(intervals) >= 3:
        first, rest = intervals[0], statistics.median(intervals[2:])
        note = (
            f"compile ~{max(first - rest, 0):.3f} s (first step {first:.3f} s); steady state "
            f"{rest * 1e3:.2f} ms/step (median of {len(intervals) - 2})"
        )
    if not findings and steady:
        name, recompiles = next(iter(steady.items()))
        where = ", ".join(str(e["batches_in_attempt"]) for e in recompiles[:3])
        more = "" if len(recompiles) <= 3 else ", ..."
        count = sum(len(v) for v in steady.values())
        findings.append(
            Finding(
                "fault-free run",
                f"{count} XLA recompiles in steady state: {name} compiled again on the mesh it "
                f"already ran on, after batch {where}{more}: the step recompiles. {note}",
            )
        )
    result = CheckResult(
        "compile-time",
        "compile time apart from steady-state step time, and no steady-state recompiles",
        "keep batch shapes and dtypes fixed (pad or bucket), pass Python values as static "
        "arguments once, so each mesh compiles the step exactly once",
        tuple(findings),
        note,
    )
    if crashed:  # a timing of a crashed run says nothing: data-order reports the crash
        return _blocked(result, "data-order", crashed[0])
    return result


def steady_recompiles(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The compiles, by function name, of a function that already ran on the same mesh of the
    same attempt at two earlier batches: new shapes, dtypes, static values or shardings for a
    function in steady state.

    A warm-up (``.lower().compile()`` before the first step, or eager ops on a prefetched batch)
    and the first call of each jitted function (an eval step first called at step 5) compile
    something that has not run at an earlier batch: not counted. JAX compiles right before it
    runs, so a compile belongs to the next execution the lineage seam records. The second
    call may compile once more while the inputs settle from the initial state's shardings and
    weak types to the step's own outputs (seen on a Flax Workload); from the third on it
    counts. Without executions in the log (no lineage), every compile from the attempt's
    third batch on counts.
    """
    compiles = [e for e in events if e["kind"] == "compile" and e.get("attempt", 0) > 0]
    if not any(e["kind"] == "exec" for e in events):
        late = [e for e in compiles if e["batches_in_attempt"] >= 3]
        return {"the step": late} if late else {}
    found: dict[str, list[dict[str, Any]]] = {}
    ran_at: dict[tuple[int, str], set[int]] = {}  # (mesh number, function) -> batches in hand
    mesh = batches = 0
    pending: list[dict[str, Any]] = []
    for e in events:
        kind = e["kind"]
        if kind in ("attempt_start", "mesh"):
            mesh += 1
            batches = 0 if kind == "attempt_start" else batches
        elif kind == "batch":
            batches += 1
        elif kind == "compile":
            pending.append(e)
        elif kind == "exec":
            key = (mesh, str(e.get("name", "?")))
            ran = ran_at.setdefault(key, set())
            late = [
                c
                for c in pending
                if c in compiles and len({b for b in ran if b < c["batches_in_attempt"]}) >= 2
            ]
            ran.add(batches)
            if late:
                found.setdefault(key[1], []).extend(late)
            pending.clear()
    return found


def check_input_wait(runs: LoopRuns) -> CheckResult:
    events = runs.fault_free.events
    batches = [e for e in events if e["kind"] == "batch"]
    intervals = _batch_intervals(events)
    crashed = failed_run("fault-free run", runs.fault_free)
    enough = len(batches) >= 3
    result = input_wait_row(
        [e["input_s"] for e in batches[1:]] if enough else [],
        [max(i - b["input_s"], 0.0) for i, b in zip(intervals[1:], batches[2:], strict=False)]
        if enough
        else [],
        "fault-free run",
        [],
    )
    if crashed:
        return _blocked(result, "data-order", crashed[0])
    return result


#: The fix an interruption row gives, chosen by the cause the verdict names.
FIX_BY_CAUSE = {
    "crash": "read the line the crash names: the loop's own code raised there during recovery",
    "deadline": "the run waited for what never came: give elastic_retry a minimum_slice_count "
    "this cluster can meet and a timeout",
    "sample-trained-twice": "restore the data iterator's state from the snapshot "
    "(iterator.set_state(saved['iterator'])) so no batch is trained twice",
    "iterator-not-restored": "save the iterator's get_state() with the model in every "
    "snapshot and set_state() it after the restore",
    "batch-not-trained": "train every batch you draw: a batch drawn for shapes or a warm-up and "
    "then dropped is lost data",
    "sample-skipped": "restore the iterator to the snapshot's own position, not one after it",
    "order-changed": "seed the data order from the dataset, not the attempt, so a recovery "
    "sees the same order",
    "started-over": "restore the latest snapshot at the start of every attempt (keep one "
    "Snapshotter for the whole job)",
    "restore-not-latest": "restore the newest snapshot or checkpoint, not an older one",
    "preemption-lost": "on SIGTERM, save the state and iterator with Orbax to the checkpoint "
    "directory; restore it when the next run starts",
    "step-not-restored": "resume at the restored snapshot's step + 1, not a counter of its own",
    "snapshot-mismatch": "save the iterator state taken right after the batch the saved model "
    "was trained on, in the same snapshot",
    "leaf-reinitialised": "restore every leaf of the train state (optimizer state and counters "
    "included) from the snapshot",
    "leaf-shape-changed": "replicate every state leaf along the replica axis and restore into "
    "the saved shapes",
    "error-swallowed": "let slice-down errors out of the step (no except Exception around it): "
    "elastic_retry must see them",
    "dead-slice-in-mesh": "rebuild the mesh from the manager's active slices each attempt, not "
    "jax.devices()",
    "stale-mesh": "after a scale-up, rebuild the mesh, the step and the shardings and move the "
    "state onto them",
    "leak": "do not keep device arrays of a failed attempt in globals, caches or callbacks",
    "step-count": "stop at the same step count the fault-free run reaches",
    "wrong-final-state": "restore the whole train state and the data position from the "
    "snapshot; keep host-side counters (learning-rate schedules) in the state",
}
GENERIC_FIX = (
    "rebuild the mesh from the manager's active slices each attempt, restore the latest "
    "snapshot (model, step and iterator) and resume at its step + 1"
)


def check_interruption(runs: LoopRuns) -> CheckResult:
    verdict = runs.interrupted_verdict
    # The cause first (a wrong mesh, a wrong resume step), then the crash it led to.
    pairs = sorted(
        zip(verdict.violations, verdict.causes, strict=False),
        key=lambda p: p[0].startswith("the loop crashed"),
    )
    findings = [Finding("interrupted run", v) for v, _ in pairs]
    fixes = list(dict.fromkeys(FIX_BY_CAUSE[c] for _, c in pairs if c in FIX_BY_CAUSE))
    skipped = "; ".join(f"{k}: {v}" for k, v in verdict.not_judged.items())
    result = CheckResult(
        "interruption",
        f"the loop ({runs.name}) survives a slice lost after batch {runs.fault_batch}: its own "
        "elastic_retry and restore code recover, judged by the oracle",
        "; ".join(fixes) or GENERIC_FIX,
        tuple(findings),
        f"{runs.interruption}: completed, {len(verdict.batches)} committed batches; judged "
        f"{', '.join(verdict.judged)}" + (f"; not judged {skipped}" if skipped else ""),
    )
    if runs.interrupted.unfired and not findings:
        # The fault never happened: nothing about recovery can be said, least of all a FAIL.
        return _not_observable(result, "; ".join(runs.interrupted.unfired), runs)
    if not findings and not any(
        e["kind"] == "error" and e["slice_down"] for e in runs.interrupted.events
    ):
        return _with(result, [Finding("interrupted run", "the lost slice was never noticed")], "")
    return result


def check_recovery_time(runs: LoopRuns) -> CheckResult:
    result = CheckResult(
        "recovery-time",
        "recovery time after a lost slice is measured and within budget",
        "resize to continue on the survivors instead of waiting for the slice; keep restore "
        "cheap (in-memory snapshot); keep the compilation cache (--gcs_scratch_location)",
    )
    if not runs.interrupted_verdict.ok:
        return _blocked(result, "interruption", "the loop did not recover")
    findings, notes = recovery_findings(runs.interrupted.events, runs.recovery_budget_s)
    return _with(result, findings, "; ".join(notes) or "no fault recorded")


def check_live_arrays(runs: LoopRuns) -> CheckResult:
    result = CheckResult(
        "live-arrays",
        "live device arrays do not grow from attempt to attempt",
        "do not keep device arrays of a failed attempt in globals, caches or callbacks; let "
        "them go out of scope so JAX frees them before the next attempt",
    )
    verdict = runs.interrupted_verdict
    if not verdict.completed:
        return _blocked(result, "interruption", "the loop did not recover")
    problems = [v for v, c in zip(verdict.violations, verdict.causes, strict=False) if c == "leak"]
    counts = [
        e["live"]["by_kind"].get("device", 0)
        for e in runs.interrupted.events
        if e["kind"] == "attempt_ready"
    ]
    if "no-leaks" in verdict.not_judged:
        return _skip(result, verdict.not_judged["no-leaks"])
    return _with(
        result,
        [Finding("interrupted run", p) for p in problems],
        f"live device arrays per attempt: {counts}",
    )


LOOP_RUNTIME_CHECKS: dict[str, Callable[[LoopRuns], CheckResult]] = {
    "data-order": check_data_order,
    "snapshot-restore": check_snapshot_restore,
    "checkpoint-restore": check_checkpoint_restore,
    "compile-time": check_compile_time,
    "input-wait": check_input_wait,
    "interruption": check_interruption,
    "recovery-time": check_recovery_time,
    "live-arrays": check_live_arrays,
}


# -- helpers -------------------------------------------------------------------------------
def _restore_row(
    runs: LoopRuns, result: EpisodeResult, source: str, row: CheckResult
) -> CheckResult:
    events = result.events
    restores = [e for e in events if e["kind"] == "restore_end" and e["source"] == source]
    if not restores:
        if source == "snapshot" and not runs.interrupted_verdict.completed:
            return _blocked(row, "interruption", "the loop crashed before it restored")
        why = failed_run(f"{source} run", result)
        return _with(
            row,
            [
                Finding(
                    f"{source} restore",
                    f"no restore from a {source} happened{'; ' + why[0] if why else ''}",
                )
            ],
            "",
        )
    saves = [e for e in events if e["kind"] in ("snapshot_save", "checkpoint_save")]
    findings: list[Finding] = []
    for r in restores:
        saved = [
            s
            for s in saves
            if s["seq"] < r["seq"] and s.get("step") == r["step"] and not s.get("skipped")
        ]
        if not saved:
            findings.append(Finding(f"{source} restore", f"restored step {r['step']}, never saved"))
            continue
        want = saved[-1]
        differs = sorted(
            k
            for k in set(want["digest"]) | set(r["digest"])
            if want["digest"].get(k) != r["digest"].get(k)
        )
        if differs:
            findings.append(
                Finding(
                    f"{source} restore",
                    f"restore of step {r['step']} is not bitwise the saved state: leaf "
                    f"{differs[0]} differs",
                )
            )
    verdict = loop_oracle.judge_loop(events, runs.fault_free.events)
    findings += [
        Finding(f"{source} restore", v)
        for v in verdict.violations
        if "data iterator" in v or "step counter" in v or "exactly-once" in v
    ]
    if not findings:
        findings += [Finding(f"{source} run", f) for f in failed_run(f"{source} run", result)]
    steps = sorted({r["step"] for r in restores if r["step"] is not None})
    return _with(
        row,
        findings,
        f"{source} of step {', '.join(map(str, steps))} restored bitwise; the data position "
        "and step resumed right after it",
    )


def _after_saves(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each completed save, with the episode batch count it came after."""
    out, batch = [], 0
    for e in events:
        if e["kind"] == "batch":
            batch = e["batch"]
        elif e["kind"] == "snapshot_save" and not e.get("skipped"):
            out.append({**e, "batch": batch})
    return out


def _batch_intervals(events: list[dict[str, Any]]) -> list[float]:
    walls = [e["wall"] for e in events if e["kind"] in ("batch", "run_end")]
    return [b - a for a, b in itertools.pairwise(walls)]


def _last_position(lineage: list[loop_oracle.BatchRecord]) -> int | str:
    positions = [p for r in lineage for p in r.positions]
    return positions[-1] if positions else "?"


def failed_run(what: str, result: EpisodeResult) -> list[str]:
    if result.completed:
        return []
    end: dict[str, Any] = next((e for e in reversed(result.events) if e["kind"] == "run_end"), {})
    error = end.get("error") or "no run_end"
    where = end.get("where")
    return [f"{what} did not complete: {error}" + (f" (raised at {where})" if where else "")]


def _with(row: CheckResult, findings: list[Finding], note: str) -> CheckResult:
    import dataclasses

    return dataclasses.replace(row, findings=tuple(findings), note=note)


def _blocked(row: CheckResult, depends_on: str, why: str) -> CheckResult:
    import dataclasses

    return dataclasses.replace(row, findings=(), depends_on=depends_on, note=why)


def _skip(row: CheckResult, why: str) -> CheckResult:
    import dataclasses

    return dataclasses.replace(row, findings=(), skipped=why)


def _not_observable(row: CheckResult, why: str, runs: LoopRuns) -> CheckResult:
    """What the loop's run cannot show, the adapter (when given) still can."""
    if runs.adapter_runs is not None:
        return ADAPTER_RUNTIME_CHECKS[row.check](runs.adapter_runs)
    return _skip(row, f"{why}; pass --acceptance-adapter to check it through an adapter")
