"""The interrupted run both runtime-row families share: the fake cluster it runs on, and how
long each fault took to recover from, judged against the recovery-time row's budget, and the
constants both families judge by.

Shared by the adapter's and the user loop's runtime rows, read from the oracle's timings.
"""

from __future__ import annotations

import statistics

from pathways_chaos.harness.acceptance.table import CheckResult, Finding
from pathways_chaos.harness.engine.recorder import Event
from pathways_chaos.harness.engine.topology import SliceTopology
from pathways_chaos.harness.errors import ChaosConfigError
from pathways_chaos.harness.judging import oracle

#: The loader is the bottleneck when the device waits on it at least as long as it computes.
MAX_INPUT_WAIT_RATIO = 1.0
#: Episode-clock seconds a recovery may take (pathwaysutils polls every 10 s).
RECOVERY_BUDGET_S = 120.0
#: The slice the interrupted run loses.
LOST_SLICE = 1


def recovery_findings(
    events: list[Event], budget_s: float, mode: str = ""
) -> tuple[list[Finding], list[str]]:
    """Each fault's recovery, from the oracle's timings: never resumed, over budget, or a note.

    Shared by the adapter's and the user loop's ``recovery-time`` rows.
    """
    rec = [r for r in oracle.recoveries(events) if r["kind"] != "repair"]
    findings: list[Finding] = []
    notes: list[str] = []
    if not rec:
        findings.append(Finding("interrupted run", "no fault was recorded"))
    for r in rec:
        if not r["recovered"]:
            findings.append(Finding("interrupted run", f"{r['fault']}: training never resumed"))
        elif r["recovery_s"] > budget_s:
            findings.append(
                Finding(
                    "interrupted run",
                    f"{r['fault']}: recovery took {r['recovery_s']:.1f} s, over the "
                    f"{budget_s:.0f} s budget",
                )
            )
        else:
            notes.append(
                f"recovered in {r['recovery_s']:.1f} s of episode time "
                f"({r['recovery_wall_s']:.2f} s wall)" + (f" in {mode} mode" if mode else "")
            )
    return findings, notes


def input_wait_row(
    waits: list[float], steps: list[float], what: str, findings: list[Finding]
) -> CheckResult:
    """The input-wait row from each step's input wait and compute time (their medians), for
    both families; ``findings`` (a failed run) stand before any judgement of the timings."""
    note = ""
    if waits and steps:
        wait, step = statistics.median(waits), statistics.median(steps)
        note = f"input wait {wait * 1e3:.2f} ms vs step {step * 1e3:.2f} ms (medians)"
        if not findings and wait >= MAX_INPUT_WAIT_RATIO * step:
            findings = [*findings, Finding(what, f"{note}: the device waits on the loader")]
    return CheckResult(
        "input-wait",
        "input wait time against step time",
        "prefetch asynchronously (grain read-ahead), or move input processing onto the "
        "accelerator hosts with colocated Python; size workers within the container's CPUs",
        tuple(findings),
        note,
    )


def runtime_topology(topology: SliceTopology | None) -> SliceTopology:
    """The fake cluster of the runtime rows (4x2 by default); they lose a slice, so >= 2."""
    topology = topology or SliceTopology.DEFAULT
    if topology.num_slices < 2:
        raise ChaosConfigError(
            f"the runtime checks lose a slice, so they need >= 2 fake slices, not "
            f"{topology}: pass --fake-slices 2 or more"
        )
    return topology
