"""A short human summary of an episode, read from its event log only."""

from __future__ import annotations

from collections.abc import Sequence

from pathways_chaos.harness.engine.recorder import Event
from pathways_chaos.harness.judging.verdict import Verdict
from pathways_chaos.harness.reports import goodput


def timeline(events: Sequence[Event]) -> list[str]:
    """One line per event that matters; runs of steps fold into one line per attempt. Times
    are from the log's first event: 0 on the fake clock, and with ``--clock real`` (whose
    events carry the wall clock, comparable across processes) seconds into the episode."""
    lines: list[str] = []
    run: list[Event] = []
    zero = float(events[0].get("t") or 0.0) if events else 0.0

    def flush() -> None:
        if run:
            first, last = run[0], run[-1]
            size = len(first["ids"])
            lines.append(
                f"{first['t'] - zero:8.1f}s  steps {first['step']}-{last['step']} "
                f"(attempt {first['attempt']}, batch {size})"
            )
            run.clear()

    for e in events:
        kind = e["kind"]
        if kind == "step":
            if run and (run[-1]["attempt"] != e["attempt"] or len(run[-1]["ids"]) != len(e["ids"])):
                flush()
            run.append(e)
            continue
        text = _describe(e)
        if text is None:
            continue
        flush()
        lines.append(f"{e['t'] - zero:8.1f}s  {text}")
    flush()
    return lines


def summary(events: Sequence[Event], verdict: Verdict) -> str:
    out = ["timeline (episode clock):"]
    out += ["  " + line for line in timeline(events)]
    out.append("recovery per fault:")
    for r in verdict.recoveries:
        if r["recovery_s"] is None:
            how = "not recovered"
        else:
            how = (
                f"ready again after {r['recovery_s']:.1f}s clock, {r['recovery_wall_s']:.3f}s wall"
            )
        out.append(f"  {r['fault']}: {how}")
    if not verdict.recoveries:
        out.append("  (no faults)")
    steps = sum(1 for e in events if e["kind"] == "step")
    out.append(
        f"steps: {len(verdict.lineage)} committed, {verdict.wasted_steps} wasted "
        f"(replayed after a restore) of {steps} run"
    )
    out += goodput.tier_restore_report(events)
    word = verdict.word
    out.append("oracle: " + ("survived" if word == "SURVIVED" else word))
    out += [f"  - {v}" for v in verdict.violations]
    out += [f"  {line}" for line in verdict.not_judged_lines()]
    return "\n".join(out)


def _describe(e: Event) -> str | None:
    kind = e["kind"]
    if kind == "attempt_start":
        return f"attempt {e['attempt']} (run {e['run']}) on slices {e['active_slices']}"
    if kind == "mesh":
        recompile = e.get("recompile")  # a loop's mesh events do not say
        again = "" if recompile is None else ", compiled" if recompile else ", reused executables"
        return f"mesh {tuple(e['shape'])} on slices {e['slices']} ({e['reason']}{again})"
    if kind == "restore_end":
        return f"restored step {e['step']} from {e['source']}"
    if kind == "snapshot_save":
        return None
    if kind == "checkpoint_save":
        return f"checkpoint of step {e['step']} written to {e['path']}"
    if kind == "fault":
        return f"FAULT {e['text']}: {e['description']}"
    if kind == "error":
        return f"error in attempt {e['attempt']}: {e['message'][:100]}"
    if kind == "scale_up":
        return f"scale-up ({e['how']}): slices {e['joining']} rejoin after step {e['step']}"
    if kind == "suspend":
        return f"suspended after step {e['step']}"
    if kind == "run_end":
        return f"run {e['run']} {e['status']}" + (f": {e['error']}" if e.get("error") else "")
    return None
