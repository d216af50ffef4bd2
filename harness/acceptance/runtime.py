"""Runtime checks: a small run of the team's adapter, plain and on the fake cluster.

Four runs, each made only when a check needs it and then shared: a **baseline** (the adapter's
code in a plain loop on one device, no elastic machinery), a **migrated** run (the guide's
elastic loop on the fake cluster, no fault), an **interrupted** run (a slice lost after a
snapshot, in the recovery mode the adapter declares) and a **preempted** run (a preemption
notice: Orbax checkpoint, new run, restore). The fake clock makes the waits free: the whole set
takes a few seconds on 2 cores.
"""

from __future__ import annotations

import functools
import shutil
import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pathways_chaos.harness.acceptance.adapter import TrainingAdapter
from pathways_chaos.harness.acceptance.adapter_child import AdapterBySpec, AdapterFacts
from pathways_chaos.harness.acceptance.loop import (
    AdapterTrainer,
    PlainRun,
    plain_run,
    trainer_config,
)
from pathways_chaos.harness.acceptance.recovery_time import (
    LOST_SLICE,
    RECOVERY_BUDGET_S,
    input_wait_row,
    recovery_findings,
    runtime_topology,
)
from pathways_chaos.harness.acceptance.table import CheckResult, Finding
from pathways_chaos.harness.engine.recorder import Event
from pathways_chaos.harness.engine.topology import SliceTopology
from pathways_chaos.harness.episodes.result import EpisodeResult
from pathways_chaos.harness.judging import committed, oracle, replay


class RuntimeRuns:
    """The runs the checks read, made lazily, once per adapter."""

    def __init__(
        self,
        adapter: TrainingAdapter | AdapterFacts,
        topology: SliceTopology | None = None,
        workdir: str | Path | None = None,
        recovery_budget_s: float = RECOVERY_BUDGET_S,
    ) -> None:
        topology = runtime_topology(topology)
        self.adapter = adapter
        self.topology = topology
        self.recovery_budget_s = recovery_budget_s
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="acceptance-")
        self.workdir = Path(workdir or self._tmp.name)  # type: ignore[union-attr]
        self.fault_step = 2 * adapter.snapshot_interval + 1  # right after the second snapshot
        self.preempt_step = adapter.snapshot_interval + 1

    @property
    def interruption(self) -> str:
        if self.adapter.recovery_mode == "pause_resume":
            return f"data_loss@step={self.fault_step}:slice={LOST_SLICE}:repair_after_polls=2"
        return f"data_loss@step={self.fault_step}:slice={LOST_SLICE}"

    @functools.cached_property
    def baseline(self) -> PlainRun:
        if isinstance(self.adapter, AdapterFacts):  # made by the adapter's own child
            return self.adapter.plain_run()
        return plain_run(self.adapter)

    def expected_order(self, count: int) -> list[int] | None:
        """The first ``count`` ids the adapter declares a correct job consumes (None: none)."""
        if isinstance(self.adapter, AdapterFacts):
            return None if self.adapter.expected is None else self.adapter.expected[:count]
        if self.adapter.expected_ids is None:
            return None
        return [int(i) for i in self.adapter.expected_ids(count)]

    @functools.cached_property
    def migrated(self) -> EpisodeResult:
        return self._episode("migrated", "")

    @functools.cached_property
    def interrupted(self) -> EpisodeResult:
        return self._episode("interrupted", self.interruption)

    @functools.cached_property
    def preempted(self) -> EpisodeResult:
        checkpoints = self.workdir / "checkpoints"
        shutil.rmtree(checkpoints, ignore_errors=True)  # a stale one would be resumed from
        return self._episode(
            "preempted", f"preemption@step={self.preempt_step}", checkpoint_dir=str(checkpoints)
        )

    def _episode(self, name: str, schedule: str, **overrides: Any) -> EpisodeResult:
        from pathways_chaos.harness.play import play

        return play(
            schedule,
            config=trainer_config(self.adapter, **overrides),
            topology=self.topology,
            trainer=AdapterTrainer.factory(
                # the team's adapter is loaded by the episode's child from its spec, never here
                AdapterBySpec(self.adapter.source)
                if isinstance(self.adapter, AdapterFacts)
                else self.adapter
            ),
            log_path=self.workdir / f"{name}.jsonl",
            replay=False,  # the runtime checks judge against the adapter's own baseline
            expect_completed=False,
            # in a child, even an adapter the package ships (its spec starts pathways_chaos.)
            isolate=True if isinstance(self.adapter, AdapterFacts) else None,
        ).result

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()


# -- the checks ----------------------------------------------------------------------------
def check_data_order(runs: RuntimeRuns) -> CheckResult:
    """Validate the data before the throughput: same ids, same order, same result."""
    a = runs.adapter
    baseline = runs.baseline
    findings: list[Finding] = []
    want = runs.expected_order(sum(len(ids) for ids in baseline.ids))
    if want is not None:
        findings += _first_difference("baseline run", _chunk(want, baseline.ids), baseline.ids)
    findings += _episode_failed("migrated run", runs.migrated)
    if not findings:
        findings += _first_difference("migrated run", baseline.ids, _lineage_ids(runs.migrated))
    if not findings:
        findings += _state_differs("migrated run", runs.migrated, baseline)
    against = "the declared order" if want is not None else "the baseline run"
    return CheckResult(
        "data-order",
        "baseline and migrated runs consume the same sample ids in the same order",
        "read the global dataset from the one controller (grain NoSharding / ElasticIterator), "
        "not a per-host shard chosen by process index or a fixed host count",
        tuple(findings),
        f"{a.steps} steps x {a.global_batch} samples match {against}, final state matches",
    )


def check_snapshot_restore(runs: RuntimeRuns) -> CheckResult:
    return _restore_check(
        runs,
        runs.interrupted,
        "snapshot",
        "snapshot-restore",
        "restoring an in-memory snapshot gives back the saved state and data position",
        "save the iterator's get_state() with the model in every snapshot and set_state() it "
        "after load; the state must be replicated along the replica axis",
    )


def check_checkpoint_restore(runs: RuntimeRuns) -> CheckResult:
    return _restore_check(
        runs,
        runs.preempted,
        "checkpoint",
        "checkpoint-restore",
        "restoring the checkpoint written on a preemption gives back the state and data position",
        "checkpoint the iterator state (a plain pytree) with the model and set_state() it on "
        "restore; resume at the saved step + 1",
    )


def check_compile_time(runs: RuntimeRuns) -> CheckResult:
    steps = _steps(runs.migrated)
    findings = _episode_failed("migrated run", runs.migrated)
    end = _run_end(runs.migrated)
    meshes = sum(1 for e in runs.migrated.events if e["kind"] == "mesh" and e["recompile"])
    compiles = int(end.get("compiles", 0)) if end else 0
    note = ""
    if len(steps) >= 3:
        first, steady = steps[0]["step_s"], statistics.median(s["step_s"] for s in steps[2:])
        note = (
            f"compile ~{max(first - steady, 0):.3f} s (first step {first:.3f} s); steady state "
            f"{steady * 1e3:.2f} ms/step (median of {len(steps) - 2})"
        )
    if not findings and compiles > meshes:
        findings.append(
            Finding(
                "migrated run",
                f"train_step compiled {compiles} times for {meshes} mesh"
                f"{'es' if meshes != 1 else ''}: it recompiles in steady state. {note}",
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
    return _not_judged_if_failed(result, runs.migrated, "data-order", "the migrated run")


def check_input_wait(runs: RuntimeRuns) -> CheckResult:
    steps = _steps(runs.migrated)[1:]
    result = input_wait_row(
        [s["input_s"] for s in steps],
        [s["step_s"] for s in steps],
        "migrated run",
        _episode_failed("migrated run", runs.migrated),
    )
    return _not_judged_if_failed(result, runs.migrated, "data-order", "the migrated run")


def check_interruption(runs: RuntimeRuns) -> CheckResult:
    result = runs.interrupted
    events = result.events
    lineage, problems = committed.committed_lineage(events)
    problems += oracle.check_meshes(events) + oracle.check_progress(events)
    # The oracle names the cause (a wrong mesh, a wrong resume step); a failed run follows.
    findings = [Finding("oracle", p) for p in problems]
    findings += _episode_failed(f"{runs.adapter.recovery_mode} run", result)
    if not findings:
        findings += _first_difference("interrupted run", runs.baseline.ids, _lineage_ids(result))
    if not findings:
        findings += _state_differs("interrupted run", result, runs.baseline)
    if not findings and not any(e["kind"] == "error" and e["slice_down"] for e in events):
        findings.append(Finding("interrupted run", "the lost slice was never noticed"))
    return CheckResult(
        "interruption",
        f"a slice lost at step {runs.fault_step} in {runs.adapter.recovery_mode} mode passes "
        "the oracle",
        "rebuild the mesh from the active slices each attempt, restore the snapshot (model and "
        "iterator) and resume at its step + 1",
        tuple(findings),
        f"{runs.interruption}: completed, {len(lineage)} committed steps match the baseline",
    )


def check_recovery_time(runs: RuntimeRuns) -> CheckResult:
    events = runs.interrupted.events
    findings, notes = recovery_findings(events, runs.recovery_budget_s, runs.adapter.recovery_mode)
    rec = [r for r in oracle.recoveries(events) if r["kind"] != "repair"]
    result = CheckResult(
        "recovery-time",
        "recovery time after a lost slice is measured and within budget",
        "resize to continue on the survivors instead of waiting for the slice; keep restore "
        "cheap (in-memory snapshot); keep the compilation cache (--gcs_scratch_location)",
        tuple(findings),
        "; ".join(notes),
    )
    if rec and any(not r["recovered"] for r in rec):
        return result.blocked_by("interruption", "training never resumed after the lost slice")
    return result


def check_live_arrays(runs: RuntimeRuns) -> CheckResult:
    events = runs.interrupted.events
    ready = [e for e in events if e["kind"] == "attempt_ready" and e.get("reason") == "attempt"]
    findings = [Finding("interrupted run", p) for p in oracle.check_no_leaks(events)]
    no_retry = len(ready) < 2 and not findings
    counts = [e["live"]["by_kind"].get("device", 0) for e in ready]
    result = CheckResult(
        "live-arrays",
        "live device arrays do not grow from attempt to attempt",
        "do not keep device arrays of a failed attempt in globals, caches or callbacks; let "
        "them go out of scope so JAX frees them before the next attempt",
        tuple(findings),
        f"live device arrays per attempt: {counts}",
    )
    if no_retry:  # nothing to compare: the interruption row says why no retry happened
        return result.blocked_by(
            "interruption", f"{len(ready)} attempt(s) got ready, no retry to compare against"
        )
    return result


#: The rows on the adapter's runs; ``runtime_checks.RUNTIME_CHECKS`` is what the suite runs.
ADAPTER_RUNTIME_CHECKS: dict[str, Callable[[RuntimeRuns], CheckResult]] = {
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
def _not_judged_if_failed(
    result: CheckResult, episode: EpisodeResult, row: str, what: str
) -> CheckResult:
    """A measurement of a run that did not complete is not judged: ``row`` reports the run."""
    if result.findings and not episode.completed:
        return result.blocked_by(row, f"{what} did not complete")
    return result


def _restore_check(
    runs: RuntimeRuns, result: EpisodeResult, source: str, check: str, title: str, fix: str
) -> CheckResult:
    events = result.events
    restores = [e for e in events if e["kind"] == "restore_end" and e["source"] == source]
    findings = [Finding(f"{source} restore", p) for p in oracle.check_snapshot_round_trips(events)]
    if not restores:
        where = next(
            (e for e in events if e["kind"] == "run_end" and e["status"] == "failed"), None
        )
        why = f": {where['error']}" if where else ""
        findings.append(Finding(f"{source} restore", f"no restore from a {source} happened{why}"))
    for r in restores:
        after = _first_step_after(events, r)
        if after is None:
            continue
        step, ids = after
        want = runs.baseline.ids[step] if step < len(runs.baseline.ids) else None
        if step != r["step"] + 1:
            findings.append(
                Finding(f"{source} restore", f"restored step {r['step']} but resumed at {step}")
            )
        elif want is not None and ids != want:
            findings.append(
                Finding(
                    f"{source} restore",
                    f"after restoring step {r['step']}, step {step} consumed ids {ids[:6]} but "
                    f"the baseline's step {step} consumed {want[:6]}: the data position was not "
                    "restored",
                )
            )
    if not findings:
        findings += _episode_failed(f"{source} run", result)
    if not findings:
        findings += _state_differs(f"run restored from a {source}", result, runs.baseline)
    steps = sorted({r["step"] for r in restores})
    row = CheckResult(
        check,
        title,
        fix,
        tuple(findings),
        f"{source} of step {', '.join(map(str, steps))} restored bitwise; data position and "
        "final state match the baseline",
    )
    if source == "snapshot" and not restores and not result.completed:
        # The run never got to a retry: the interruption row says why, not a restore habit.
        return row.blocked_by("interruption", "no restore happened, the interrupted run failed")
    return row


def _steps(result: EpisodeResult) -> list[Event]:
    return [e for e in result.events if e["kind"] == "step" and "step_s" in e]


def _run_end(result: EpisodeResult) -> Event | None:
    return next((e for e in reversed(result.events) if e["kind"] == "run_end"), None)


def _lineage_ids(result: EpisodeResult) -> list[list[int]]:
    lineage, _ = committed.committed_lineage(result.events)
    return [list(r.ids) for r in lineage]


def _episode_failed(what: str, result: EpisodeResult) -> list[Finding]:
    from pathways_chaos.harness.judging.process_exit import process_exit

    ended = process_exit(result.events)  # a process its iterator or step left running
    said = [] if isinstance(ended, str) else ended
    left = [Finding(what, x.replace("the loop", "the adapter's code", 1)) for x in said]
    if result.completed:
        return left
    end = _run_end(result) or {}
    error = end.get("error") or (
        f"{type(result.error).__name__}: {result.error}" if result.error else "no run_end"
    )
    if end.get("cause"):
        error = f"{error} (cause: {end['cause']})"
    return [Finding(what, f"did not complete: {' '.join(str(error).split())[:240]}"), *left]


def _first_difference(
    what: str, want: Sequence[Sequence[int]], got: Sequence[Sequence[int]]
) -> list[Finding]:
    for step, (w, g) in enumerate(zip(want, got, strict=False)):
        if list(w) != list(g):
            return [
                Finding(
                    what,
                    f"step {step} consumed ids {list(g)[:6]}{'...' if len(g) > 6 else ''}, "
                    f"expected {list(w)[:6]}{'...' if len(w) > 6 else ''}",
                )
            ]
    if len(want) != len(got):
        return [Finding(what, f"{len(got)} committed steps, expected {len(want)}")]
    return []


def _state_differs(what: str, result: EpisodeResult, baseline: PlainRun) -> list[Finding]:
    end = _run_end(result)
    if end is None or "final_state" not in end:
        return [Finding(what, "no final state in the log")]
    problems = replay.compare_state(end["final_state"], baseline.state)
    return [Finding(what, p.replace("a one-device replay", "the baseline")) for p in problems]


def _first_step_after(events: Sequence[Event], restore: Event) -> tuple[int, list[int]] | None:
    key = (restore["run"], restore["attempt"])
    for e in events:
        if e["seq"] > restore["seq"] and e["kind"] == "step" and (e["run"], e["attempt"]) == key:
            return int(e["step"]), list(e["ids"])
    return None


def _chunk(flat: Sequence[int], like: Sequence[Sequence[int]]) -> list[list[int]]:
    out, i = [], 0
    for ids in like:
        out.append(list(flat[i : i + len(ids)]))
        i += len(ids)
    return out
