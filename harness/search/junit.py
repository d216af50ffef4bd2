"""The merged search as JUnit XML: one test case per shard, so a CI page shows which shard
found what (the property, the shrunk schedule, the replay command) without opening the HTML."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathways_chaos.harness.search.merge import Merged


def render_junit(merged: Merged) -> str:
    suite = ET.Element("testsuite", name="pathways-chaos search")
    counts = {"tests": 0, "failures": 0, "errors": 0}
    by_index = {s.index: s for s in merged.shards}
    for index in range(merged.expected):
        case = ET.SubElement(
            suite, "testcase", classname="pathways-chaos.search", name=f"shard {index}"
        )
        counts["tests"] += 1
        shard = by_index.get(index)
        if shard is None:
            _mark(case, "error", "not judged: this shard wrote no files (its Pod never ran?)")
            counts["errors"] += 1
            continue
        case.set("time", f"{(shard.report or {}).get('wall_s', 0.0):.1f}")
        found = [f for f in merged.findings if f["shard"] == index]
        if found:
            text = "\n\n".join(
                f"{f['property']}: {f['schedule'] or '(no fault)'}\n"
                f"replay: {f.get('replay') or '-'}\n{f.get('message', '')}"
                for f in found
            )
            summary = ", ".join(f"{f['property']} ({f['schedule'] or 'no fault'})" for f in found)
            _mark(case, "failure", f"found {len(found)} failing schedule(s): {summary}", text)
            counts["failures"] += 1
        errors = [e for e in merged.errors if e.get("shard") == index]
        if errors or shard.report is None:
            why = (
                "; ".join(f"toolkit error in {e['property']}: {e['error']}" for e in errors)
                or "not judged to the end: the shard's Pod ended before its report"
            )
            _mark(case, "error", why)
            counts["errors"] += 1
    for a, b, seeds in merged.overlaps:
        case = ET.SubElement(
            suite, "testcase", classname="pathways-chaos.search", name=f"shards {a} and {b}"
        )
        _mark(case, "failure", f"both ran seeds {seeds}: two runs mixed in one folder?")
        counts["tests"] += 1
        counts["failures"] += 1
    for key, value in counts.items():
        suite.set(key, str(value))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def _mark(case: ET.Element, kind: str, message: str, text: str | None = None) -> None:
    element = ET.SubElement(case, kind, message=message)
    element.text = text or message
