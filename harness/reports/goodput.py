"""Goodput and badput of an episode, from its event log, in ml-goodput-measurement's buckets.

Productive time is the wall time of the steps the final state is made of; everything else is
badput, split the way ml-goodput-measurement names it (``BadputType``), so figures from a fake
run and from a real one read the same.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from typing import Any

from pathways_chaos.harness.engine.recorder import Event
from pathways_chaos.harness.judging.committed import committed_lineage
from pathways_chaos.harness.judging.oracle import recoveries

#: Our bucket -> ml-goodput-measurement's BadputType name.
BUCKETS = {
    "initialization": "TPU_INITIALIZATION",
    "slice_down": "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION",
    "reinitialization": "TRAINING_PREP",
    "restore": "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME",
    "snapshot_save": "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME",
    "recompile": "PROGRAM_STARTUP",
    "replayed_steps": "WASTED_PROGRESS_FROM_DISRUPTION",
    "scale_up": "CUSTOM_BADPUT_EVENTS",
    "other": "OTHER",
}


@dataclasses.dataclass
class FaultTiming:
    fault: str
    detect_s: float | None  # fault -> the trainer's error
    recover_s: float | None  # fault -> the next attempt (or rejoined mesh) is ready


@dataclasses.dataclass
class Goodput:
    total_s: float
    productive_s: float
    badput_s: dict[str, float]
    faults: list[FaultTiming]
    recompiles: int
    wasted_steps: int

    @property
    def goodput(self) -> float:
        return self.productive_s / self.total_s if self.total_s > 0 else 0.0

    def properties(self) -> list[tuple[str, Any]]:
        """Figures as (name, value) pairs for JUnit XML properties."""
        out: list[tuple[str, Any]] = [
            ("chaos_goodput", round(self.goodput, 4)),
            ("chaos_total_s", round(self.total_s, 4)),
            ("chaos_recompiles", self.recompiles),
            ("chaos_wasted_steps", self.wasted_steps),
        ]
        out += [(f"chaos_badput_{k}_s", round(v, 4)) for k, v in self.badput_s.items()]
        for i, f in enumerate(self.faults):
            out.append((f"chaos_fault_{i}", f.fault))
            out.append((f"chaos_fault_{i}_detect_s", _round(f.detect_s)))
            out.append((f"chaos_fault_{i}_recover_s", _round(f.recover_s)))
        return out


def measure(events: Sequence[Event]) -> Goodput:
    """Splits the episode's wall time into productive time and badput buckets."""
    lineage, _ = committed_lineage(events)
    committed = {r.seq for r in lineage}
    bad = dict.fromkeys(BUCKETS, 0.0)
    productive = 0.0
    start = next((e["wall"] for e in events if e["kind"] == "episode_start"), events[0]["wall"])
    end = events[-1]["wall"]

    durations = _step_durations(events)
    typical = statistics.median(durations.values()) if durations else 0.0
    recompiled_attempts: set[tuple[int, int, int]] = set()
    mesh_count = 0
    first_ready = True
    prev: Event | None = None
    for e in events:
        kind = e["kind"]
        if kind == "mesh":
            mesh_count += 1
            if e["recompile"]:
                recompiled_attempts.add((e["run"], e["attempt"], mesh_count))
        if prev is not None:
            gap = e["wall"] - prev["wall"]
            if kind == "step":
                key = (e["run"], e["attempt"], mesh_count)
                if key in recompiled_attempts:  # the first step on a new mesh compiles
                    recompiled_attempts.discard(key)
                    bad["recompile"] += max(gap - typical, 0.0)
                    gap = min(gap, typical)
                if e["seq"] in committed:
                    productive += gap
                else:
                    bad["replayed_steps"] += gap
            elif kind == "snapshot_save":
                bad["snapshot_save"] += gap
            elif kind == "attempt_ready" and first_ready:
                bad["initialization"] += e["wall"] - start
                first_ready = False
            elif kind == "restore_end":
                bad["restore"] += gap
            elif kind == "attempt_start" and prev["kind"] in ("error", "fault", "scale_up"):
                bad["slice_down" if prev["kind"] != "scale_up" else "scale_up"] += gap
            elif kind in ("mesh", "restore_begin", "attempt_ready") and not first_ready:
                bucket = "scale_up" if e.get("reason") == "scale_up" else "reinitialization"
                bad[bucket] += gap
            elif kind == "attempt_start" and prev["kind"] in ("attempt_ready", "step"):
                bad["reinitialization"] += gap
            else:
                bad["other"] += gap
        prev = e
    total = end - start
    bad["other"] = max(total - productive - sum(v for k, v in bad.items() if k != "other"), 0.0)
    steps = sum(1 for e in events if e["kind"] == "step")
    return Goodput(
        total_s=total,
        productive_s=productive,
        badput_s=bad,
        faults=fault_timings(events),
        recompiles=sum(1 for e in events if e["kind"] == "mesh" and e["recompile"]),
        wasted_steps=steps - len(lineage),
    )


def fault_timings(events: Sequence[Event]) -> list[FaultTiming]:
    """Wall-clock detection and recovery per fault (the oracle decides what recovered means)."""
    return [
        FaultTiming(r["fault"], r["detect_wall_s"], r["recovery_wall_s"])
        for r in recoveries(events)
    ]


def _step_durations(events: Sequence[Event]) -> dict[int, float]:
    out = {}
    prev = None
    for e in events:
        if e["kind"] == "step" and prev is not None and prev["kind"] in ("step", "snapshot_save"):
            out[e["seq"]] = e["wall"] - prev["wall"]
        prev = e
    return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def tier_restore_report(events: Sequence[Event]) -> list[str]:
    """Multi-Tier Checkpointing: which tier each restart restored from, and what it cost.

    Empty for an episode without MTC. Kept apart from ``measure`` (issue 15): the figures come
    from ``harness.mtc.judging.tier_restores``, one line per restart.
    """
    if not any(e["kind"] == "mtc_restore_plan" for e in events):
        return []
    from pathways_chaos.harness.mtc.judging import tier_restores

    lines = ["restores (Multi-Tier Checkpointing):"]
    for r in tier_restores(events):
        what = (
            f"step {r.restored_step} from {r.tier}"
            if r.restored_step is not None
            else "nothing to restore: started over"
        )
        restore = "" if r.restore_s is None else f", restore {r.restore_s:.3f}s"
        recovery = "" if r.recovery_s is None else f", back in {r.recovery_s:.3f}s wall"
        lines.append(
            f"  attempt {r.attempt} after {r.fault or 'an error'}: {what}; "
            f"{r.steps_lost} steps lost{restore}{recovery}"
        )
    return lines
