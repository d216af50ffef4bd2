"""The HTML report: per test, a timeline picture a person reads at a glance, and the figures.

Self-contained (inline SVG and CSS, no script, nothing fetched), written from event logs only.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Sequence
from pathlib import Path

from pathways_chaos.harness.engine.owned_paths import write_atomic
from pathways_chaos.harness.engine.recorder import Event
from pathways_chaos.harness.judging.committed import committed_lineage
from pathways_chaos.harness.judging.oracle import recoveries
from pathways_chaos.harness.judging.verdict import JUDGE_FAILED, Verdict
from pathways_chaos.harness.reports.goodput import BUCKETS, Goodput, measure

WIDTH = 960
ROW = 18
LEFT = 90

COLOURS = {
    "active": "#2e7d32",
    "down": "#c62828",
    "idle": "#9e9e9e",
    "committed": "#2e7d32",
    "wasted": "#ef6c00",
    "snapshot": "#1565c0",
    "fault": "#c62828",
    "recovery": "#ffcdd2",
}


@dataclasses.dataclass
class EpisodeReport:
    test: str
    outcome: str  # passed / failed / skipped (not judged) / error (a judge raised)
    events: list[Event]
    verdict: Verdict
    logs: dict[str, str] = dataclasses.field(default_factory=dict)  # pod -> log text


def slice_spans(events: Sequence[Event]) -> dict[int, list[tuple[float, float, str]]]:
    """For each slice: (start, end, state) spans on the episode clock."""
    end = events[-1]["t"]
    slices: list[int] = []
    state: dict[int, tuple[float, str]] = {}
    spans: dict[int, list[tuple[float, float, str]]] = {}

    def move(s: int, t: float, new: str) -> None:
        start, old = state[s]
        if old != new:
            if t > start:
                spans[s].append((start, t, old))
            state[s] = (t, new)

    for e in events:
        kind, t = e["kind"], e["t"]
        if kind == "run_start" and not slices:
            slices = sorted(int(s) for s in e["slices"])
            for s in slices:
                spans[s] = []
                # A loop's run starts on every slice (the observer logs no active_slices there).
                active = e.get("active_slices", slices)
                state[s] = (t, "active" if s in active else "down")
        elif kind == "fault" and "slice" in e["fault"] and "touched" in e:
            s = e["fault"]["slice"]
            if s in state:
                move(s, t, "idle" if e["fault"]["kind"] == "repair" else "down")
        elif kind == "mesh":
            for s in slices:
                if s in e["slices"]:
                    move(s, t, "active")
                elif state[s][1] == "active":
                    move(s, t, "idle")
    for s in slices:
        start, old = state[s]
        spans[s].append((start, max(end, start), old))
    return spans


def timeline_svg(events: Sequence[Event]) -> str:
    spans = slice_spans(events)
    end = max(events[-1]["t"], 1e-9)
    lineage, _ = committed_lineage(events)
    committed = {r.seq for r in lineage}

    def x(t: float) -> float:
        return LEFT + (WIDTH - LEFT - 10) * t / end

    rows = len(spans) + 3
    height = rows * ROW + 40
    parts = [
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
        'aria-label="slices, steps, snapshots and faults over time">'
    ]
    # recovery spans behind everything
    for r in recoveries(events):
        if r["kind"] == "repair" or not r["recovered"]:
            continue  # a repair's span is the slice's own row
        start, stop = r["fault_t"], r["fault_t"] + r["recovery_s"]
        parts.append(
            f'<rect class="recovery" x="{x(start):.1f}" y="0" '
            f'width="{max(x(stop) - x(start), 2):.1f}" height="{rows * ROW}" '
            f'fill="{COLOURS["recovery"]}"><title>recovery after {html.escape(r["fault"])}: '
            f"{r['recovery_wall_s']:.3f}s wall</title></rect>"
        )
    for row, (s, items) in enumerate(sorted(spans.items())):
        y = row * ROW
        parts.append(f'<text x="4" y="{y + 13}" font-size="11">slice {s}</text>')
        for start, stop, st in items:
            parts.append(
                f'<rect class="slice-{st}" data-slice="{s}" x="{x(start):.1f}" y="{y + 3}" '
                f'width="{max(x(stop) - x(start), 1):.1f}" height="{ROW - 6}" '
                f'fill="{COLOURS[st]}"><title>slice {s} {st} {start:.1f}-{stop:.1f}s</title></rect>'
            )
    y = len(spans) * ROW
    parts.append(f'<text x="4" y="{y + 13}" font-size="11">steps</text>')
    for e in events:
        if e["kind"] == "step":
            kind = "committed" if e["seq"] in committed else "wasted"
            parts.append(
                f'<rect class="step step-{kind}" x="{x(e["t"]):.1f}" y="{y + 3}" width="2" '
                f'height="{ROW - 6}" fill="{COLOURS[kind]}"><title>step {e["step"]} '
                f"(attempt {e['attempt']}, {kind})</title></rect>"
            )
    y += ROW
    parts.append(f'<text x="4" y="{y + 13}" font-size="11">snapshots</text>')
    for e in events:
        if e["kind"] in ("snapshot_save", "checkpoint_save"):
            cx = x(e["t"])
            parts.append(
                f'<polygon class="snapshot" points="{cx},{y + 3} {cx + 5},{y + 9} {cx},{y + 15} '
                f'{cx - 5},{y + 9}" fill="{COLOURS["snapshot"]}"><title>{e["kind"]} of step '
                f"{e['step']}</title></polygon>"
            )
    y += ROW
    parts.append(f'<text x="4" y="{y + 13}" font-size="11">faults</text>')
    for e in events:
        if e["kind"] == "fault":
            fx = x(e["t"])
            parts.append(
                f'<line class="fault" x1="{fx:.1f}" y1="0" x2="{fx:.1f}" y2="{y + ROW}" '
                f'stroke="{COLOURS["fault"]}" stroke-width="2"><title>{html.escape(e["text"])}'
                "</title></line>"
                f'<text x="{fx + 3:.1f}" y="{y + 13}" font-size="10" '
                f'fill="{COLOURS["fault"]}">{html.escape(e["fault"]["kind"])}</text>'
            )
    axis_y = rows * ROW + 15
    for i in range(6):
        t = end * i / 5
        parts.append(
            f'<text x="{x(t):.1f}" y="{axis_y}" font-size="10" text-anchor="middle">{t:.0f}s</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def judges_section(v: Verdict) -> str:
    """Which judges passed, failed, could not judge (and why), and raised (with the traceback)."""
    failed = set(v.failed)
    passed = [name for name in v.judged if name not in failed]
    parts = [
        f"<p class='judges-passed'>judges passed: {html.escape(', '.join(passed) or 'none')}</p>"
    ]
    if v.failed:
        parts.append(
            f"<p class='judges-failed'>judges failed: {html.escape(', '.join(v.failed))}</p>"
        )
    if v.not_judged:
        items = "".join(
            f"<li><b>{html.escape(name)}</b>: {html.escape(why)}</li>"
            for name, why in v.not_judged.items()
        )
        parts.append(f"<p>not judged:</p><ul class='not-judged'>{items}</ul>")
    for name, text in v.judge_errors.items():
        head, _, trace = text.partition("\n")
        parts.append(
            f"<details class='judge-error' open><summary>{html.escape(JUDGE_FAILED)}: "
            f"{html.escape(name)} raised {html.escape(head)}</summary>"
            f"<pre>{html.escape(trace)}</pre></details>"
        )
    return "<div class='judges'>" + "".join(parts) + "</div>"


def episode_section(report: EpisodeReport, figures: Goodput) -> str:
    v = report.verdict
    status = "survived" if v.ok else "JUDGE FAILED" if v.judge_errors else "FAILED"
    rows = "".join(
        f"<tr><td>{html.escape(f.fault)}</td><td>{_s(f.detect_s)}</td><td>{_s(f.recover_s)}</td></tr>"
        for f in figures.faults
    )
    buckets = "".join(
        f"<tr><td>{k}</td><td>{BUCKETS[k]}</td><td>{figures.badput_s[k]:.3f}</td></tr>"
        for k in BUCKETS
    )
    violations = "".join(f"<li>{html.escape(x)}</li>" for x in v.violations)
    logs = "".join(
        f"<details class='pod-log'><summary>{html.escape(pod)}</summary>"
        f"<pre>{html.escape(text[-20000:])}</pre></details>"
        for pod, text in report.logs.items()
    )
    return (
        f'<section class="episode {report.outcome}" id="{html.escape(report.test)}">'
        f"<h2>{html.escape(report.test)} <span class='status'>{report.outcome}, "
        f"oracle {status}</span></h2>"
        f"<p class='figures'>goodput <b>{figures.goodput:.1%}</b> of {figures.total_s:.3f}s wall; "
        f"{figures.recompiles} compiles; {figures.wasted_steps} wasted steps</p>"
        f"{judges_section(v)}"
        f"{timeline_svg(report.events)}"
        "<table class='faults'><tr><th>fault</th><th>detect</th><th>recover</th></tr>"
        f"{rows}</table>"
        f"<table class='badput'><tr><th>badput</th><th>ml-goodput name</th><th>seconds</th></tr>"
        f"{buckets}</table>"
        + (f"<ul class='violations'>{violations}</ul>" if violations else "")
        + logs
        + "</section>"
    )


def write_report(path: str | Path, reports: Sequence[EpisodeReport]) -> Path:
    sections = [episode_section(r, measure(r.events)) for r in reports]
    legend = "".join(f"<span><i style='background:{c}'></i>{k}</span>" for k, c in COLOURS.items())
    passed = sum(r.outcome == "passed" for r in reports)
    others = "".join(
        f", {n} {label}"
        for label, n in (
            ("not judged", sum(r.outcome == "skipped" for r in reports)),
            ("with a judge that failed", sum(r.outcome == "error" for r in reports)),
        )
        if n
    )
    failed = sum(r.outcome == "failed" for r in reports)
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>pathways-chaos report</title>"
        f"<style>{_CSS}</style></head><body><h1>pathways-chaos report</h1>"
        f"<p class='summary'>{len(reports)} episodes, {passed} passed, "
        f"{failed} failed{others}</p><p class='legend'>{legend}</p>"
        + "".join(sections)
        + "</body></html>"
    )
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    # a symlink planted there since the session began is replaced, never written through
    write_atomic(out, page.encode("utf-8"), what="--chaos-report")
    return out


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}s"


_CSS = """
body{font:13px system-ui,sans-serif;margin:16px;color:#212121}
section{border:1px solid #ddd;padding:8px 12px;margin:12px 0}
section.failed{border-color:#c62828}
h2{font-size:15px;margin:4px 0}.status{font-weight:normal;color:#616161}
table{border-collapse:collapse;margin:6px 12px 6px 0;display:inline-table;vertical-align:top}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}
.legend span{margin-right:10px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:3px}
.violations{color:#c62828}
section.error{border-color:#6a1b9a}section.skipped{border-color:#ef6c00}
.judges p{margin:2px 0}.judges-failed,.judge-error{color:#c62828}.not-judged{color:#ef6c00}
"""
