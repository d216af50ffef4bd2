"""``pathways-chaos search merge DIR... --html out.html``: one report from every shard's files.

It reads only what the shards wrote (``shard-I-of-N.jsonl`` episodes, ``shard-I-of-N.json``
reports): schedules run per property, per fault kind and per event; the failures with their
shrunk schedule and replay command; every shard, with its seeds, and whether any two shards ran
the same seed or a shard is missing. Self-contained HTML (inline CSS, no script).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import html
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from pathways_chaos.harness.engine.command_errors import reported
from pathways_chaos.harness.engine.option_values import OneLineArgumentParser
from pathways_chaos.harness.engine.owned_paths import check_not_an_input, write_atomic
from pathways_chaos.harness.engine.untrusted_files import check_output_file, load_json
from pathways_chaos.harness.errors import ChaosConfigError
from pathways_chaos.harness.search.shard import FORMAT
from pathways_chaos.harness.search.shard_report import (
    check_one_run,
    checked_episode,
    checked_report,
)


@dataclasses.dataclass
class ShardFiles:
    index: int
    count: int
    report: dict[str, Any] | None
    episodes: list[dict[str, Any]]
    where: Path

    @property
    def seeds(self) -> set[int]:
        if self.report is not None:
            return set(self.report["seeds"])
        return {int(e["seed"]) for e in self.episodes}


@dataclasses.dataclass
class Merged:
    shards: list[ShardFiles]
    expected: int
    missing: list[int]
    unfinished: list[int]  # episodes but no report: the Pod died before the end
    overlaps: list[tuple[int, int, list[int]]]  # (shard, shard, seeds both ran)
    duplicates: list[int]  # an index found twice (two runs mixed?)
    by_property: dict[str, list[int]]  # property -> [schedules, failed, run while shrinking]
    by_fault_kind: dict[str, list[int]]
    by_event: dict[str, int]
    findings: list[dict[str, Any]]
    flaky: list[dict[str, Any]]
    errors: list[dict[str, Any]]
    schedules: int
    #: episodes the shard's budget cut short (its report's ``unfinished``): neither a pass nor
    #: a finding, said as "not judged"
    not_judged: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not (self.missing or self.unfinished or self.overlaps or self.duplicates)

    def summary(self) -> str:
        found = len(self.findings)
        lines = (
            f"pathways-chaos search: {self.schedules} schedules over "
            f"{len({s.index for s in self.shards})} of {self.expected} shards, "
            f"{found} failure{'s' * (found != 1)}"
        )
        if self.duplicates:
            lines += (
                f"; shard indexes found more than once (two runs mixed?): "
                f"{', '.join(map(str, self.duplicates))}"
            )
        if self.missing:
            lines += f"; shards missing: {', '.join(map(str, self.missing))}"
        if self.unfinished:
            lines += f"; shards that did not finish: {', '.join(map(str, self.unfinished))}"
        if self.overlaps:
            lines += f"; {len(self.overlaps)} pairs of shards ran the same seeds"
        if self.errors:
            lines += f"; {len(self.errors)} toolkit errors"
        if self.not_judged:
            lines += f"; {len(self.not_judged)} not judged (the budget ended their episodes)"
        return lines


#: What a message about a file that is not one of a search's says to do.
_SEARCH_FIX = "give the folders `pathways-chaos search --out` wrote"


def _read_json(path: Path) -> Any:
    """A shard's report, read as untrusted JSON (one line when it nests too deeply)."""
    try:
        return load_json(path.read_text(), path, what="search report", fix=_SEARCH_FIX)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ChaosConfigError(
            f"{path} is not a search report ({type(error).__name__}): give the folders "
            "`pathways-chaos search --out` wrote"
        ) from None


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    out = []
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise ChaosConfigError(f"{path} is not a search episode log (not text)") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(load_json(line, path, line=n, what="search episode log", fix=_SEARCH_FIX))
        except json.JSONDecodeError:
            if n == len(text.splitlines()):
                break  # a Pod killed mid-write: its last line is cut short
            raise ChaosConfigError(f"{path}:{n} is not a JSON line") from None
    if any(not isinstance(e, dict) or e.get("format") != FORMAT for e in out):
        raise ChaosConfigError(f"{path} is not a search episode log ({FORMAT})")
    return out


def read_shards(folders: list[Path]) -> list[ShardFiles]:
    """Every ``shard-I-of-N`` in the folders (a folder may hold several)."""
    found: list[ShardFiles] = []
    reports: list[tuple[Path, dict[str, Any]]] = []
    for folder in folders:
        if not folder.is_dir():
            raise ChaosConfigError(f"{folder} is not a folder: give the folders search --out wrote")
        names = sorted({p.name.split(".")[0] for p in folder.glob("shard-*-of-*.json*")})
        for name in names:
            parts = name.split("-")
            if len(parts) != 4 or not (parts[1].isdigit() and parts[3].isdigit()):
                continue
            report_path, log_path = folder / f"{name}.json", folder / f"{name}.jsonl"
            index, count = int(parts[1]), int(parts[3])
            report = _read_json(report_path) if report_path.exists() else None
            if report is not None:
                if not isinstance(report, dict) or report.get("format") != FORMAT:
                    raise ChaosConfigError(f"{report_path} is not a search report ({FORMAT})")
                report = checked_report(report, report_path, index, count)
                reports.append((report_path, report))
            episodes = _read_jsonl(log_path) if log_path.exists() else []
            episodes = [
                checked_episode(e, log_path, n, index, count) for n, e in enumerate(episodes, 1)
            ]
            found.append(ShardFiles(index, count, report, episodes, folder))
    if not found:
        shown = ", ".join(str(f) for f in folders)
        raise ChaosConfigError(f"no shard files (shard-I-of-N.json/.jsonl) in {shown}")
    check_one_run(reports)
    return found


def _budget_cuts(shard: ShardFiles) -> list[dict[str, Any]]:
    """The report's ``unfinished`` (a report written before it existed has none)."""
    cuts = (shard.report or {}).get("unfinished", [])
    if not isinstance(cuts, list) or not all(
        isinstance(c, dict) and isinstance(c.get("property"), str) for c in cuts
    ):
        raise ChaosConfigError(
            f"{shard.where}: shard {shard.index}'s report has a malformed 'unfinished' list: "
            "give the files `pathways-chaos search --out` wrote"
        )
    return cuts


def merge(folders: list[Path]) -> Merged:
    shards = sorted(read_shards(folders), key=lambda s: s.index)
    expected = max(s.count for s in shards)
    seen = collections.Counter(s.index for s in shards)
    by_property: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])
    by_kind: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    by_event: collections.Counter[str] = collections.Counter()
    findings: list[dict[str, Any]] = []
    flaky: list[dict[str, Any]] = []
    not_judged: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    schedules = 0
    for shard in shards:
        for e in shard.episodes:
            schedules += 1
            failed = int(not e["ok"])
            by_property[e["property"]][0] += 1
            by_property[e["property"]][1] += failed
            by_property[e["property"]][2] += int(bool(e.get("after_failure")))
            for kind in e["fault_kinds"] or ["(no fault)"]:
                by_kind[kind][0] += 1
                by_kind[kind][1] += failed
            by_event.update(e["features"])
        if shard.report is not None:
            findings += shard.report["findings"]
            flaky += [dict(f, shard=shard.index) for f in shard.report["flaky"]]
            errors += [dict(f, shard=shard.index) for f in shard.report["errors"]]
            not_judged += [dict(f, shard=shard.index) for f in _budget_cuts(shard)]
        else:  # no report: its failing episodes are all there is (unshrunk, perhaps)
            last: dict[str, dict[str, Any]] = {}
            for e in shard.episodes:
                if not e["ok"]:
                    last[e["property"]] = e
            for e in last.values():
                findings.append(
                    {
                        "property": e["property"],
                        "shard": shard.index,
                        "seed": e["seed"],
                        "schedule": e["schedule"],
                        "replay": e["replay"],
                        "message": e["violation"],
                        "found_in_database": e.get("from_database", False),
                        "unfinished": True,
                    }
                )
    overlaps = []
    for i, a in enumerate(shards):
        for b in shards[i + 1 :]:
            both = sorted(a.seeds & b.seeds)
            if both and a.index != b.index:
                overlaps.append((a.index, b.index, both[:10]))
    return Merged(
        shards=shards,
        expected=expected,
        missing=[i for i in range(expected) if i not in seen],
        unfinished=[s.index for s in shards if s.report is None],
        overlaps=overlaps,
        duplicates=sorted(i for i, n in seen.items() if n > 1),
        by_property=dict(by_property),
        by_fault_kind=dict(by_kind),
        by_event=dict(by_event),
        findings=findings,
        flaky=flaky,
        errors=errors,
        schedules=schedules,
        not_judged=not_judged,
    )


# -- the HTML ------------------------------------------------------------------------------------
CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;max-width:100%}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3} td.n{text-align:right}
.bad{color:#b71c1c;font-weight:bold} .ok{color:#1b5e20;font-weight:bold}
pre{background:#f7f7f7;padding:6px;white-space:pre-wrap;word-break:break-all;margin:0}
code{background:#f7f7f7;word-break:break-all}
summary{cursor:pointer}
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _table(head: list[str], rows: list[list[str]], table_id: str) -> str:
    out = [f'<table id="{table_id}"><tr>' + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for row in rows:
        out.append("<tr>" + "".join(row) + "</tr>")
    return "\n".join(out) + "</table>"


def _td(value: Any, numeric: bool = False) -> str:
    return f'<td class="n">{_e(value)}</td>' if numeric else f"<td>{_e(value)}</td>"


def render_html(merged: Merged) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<title>pathways-chaos search</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>pathways-chaos search</h1>",
        f"<p id='summary'>{_e(merged.summary())}</p>",
    ]
    verdict = (
        "<span class='bad'>FAILURES FOUND</span>"
        if merged.findings
        else "<span class='ok'>no failure found</span>"
    )
    parts.append(f"<p>{verdict}</p>")

    _failures_html(merged, parts)
    _shards_html(merged, parts)
    _coverage_html(merged, parts)
    _counts_html(merged, parts)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _failures_html(merged: Merged, parts: list[str]) -> None:
    """Each failure: its shrunk schedule, replay command and message."""
    parts.append("<h2>Failures</h2>")
    if merged.findings:
        rows = []
        for f in merged.findings:
            how = "replayed from the example database" if f.get("found_in_database") else "found"
            if f.get("unfinished"):
                how += " (shard did not finish: maybe not shrunk)"
            replay = f"<td><pre>{_e(f['replay'])}</pre></td>" if f.get("replay") else "<td>-</td>"
            rows.append(
                [
                    _td(f["property"]),
                    _td(f["shard"], True),
                    _td(f["seed"], True),
                    f"<td><code>{_e(f['schedule'] or '(no fault)')}</code></td>",
                    replay,
                    _td(how),
                    f"<td><details><summary>message</summary><pre>{_e(f.get('message', ''))}"
                    "</pre></details></td>",
                ]
            )
        parts.append(
            _table(
                ["property", "shard", "seed", "shrunk schedule", "replay", "how", "message"],
                rows,
                "failures",
            )
        )
    else:
        parts.append("<p>None.</p>")


def _shards_html(merged: Merged, parts: list[str]) -> None:
    """Every shard, and the missing ones."""
    parts.append("<h2>Shards</h2>")
    rows = []
    for s in merged.shards:
        r = s.report or {}
        seeds = sorted(s.seeds)
        span = f"{seeds[0]}..{seeds[-1]} ({len(seeds)})" if seeds else "none"
        state = "finished" if s.report is not None else "did not finish"
        rows.append(
            [
                _td(s.index, True),
                _td(", ".join(r.get("properties", sorted({e["property"] for e in s.episodes})))),
                _td(span),
                _td(str(r.get("seed_range", "?"))),
                _td(len(s.episodes), True),
                _td(len(r.get("findings", [])), True),
                _td(r.get("wall_s", "?"), True),
                _td(r.get("pod") or r.get("host", "?")),
                _td(state),
            ]
        )
    for i in merged.missing:
        rows.append(
            [_td(i, True), "<td colspan='8' class='bad'>missing: no files from this shard</td>"]
        )
    parts.append(
        _table(
            [
                "shard",
                "properties",
                "seeds run",
                "seed range",
                "schedules",
                "failures",
                "wall s",
                "pod / host",
                "state",
            ],
            rows,
            "shards",
        )
    )


def _coverage_html(merged: Merged, parts: list[str]) -> None:
    """Whether two shards ran the same seed."""
    parts.append("<h2>Coverage across shards</h2>")
    if merged.overlaps:
        items = "".join(
            f"<li>shards {a} and {b} both ran seeds {_e(both)}</li>"
            for a, b, both in merged.overlaps
        )
        parts.append(f"<p class='bad' id='coverage'>Seeds run twice:</p><ul>{items}</ul>")
    elif not merged.duplicates:
        total = sum(len(s.seeds) for s in merged.shards)
        parts.append(
            f"<p class='ok' id='coverage'>No two shards ran the same seed ({total} seeds "
            f"over {len(merged.shards)} shards).</p>"
        )
    if merged.duplicates:
        parts.append(
            f"<p class='bad'>Shard indexes found more than once (two runs mixed?): "
            f"{_e(merged.duplicates)}</p>"
        )


def _counts_html(merged: Merged, parts: list[str]) -> None:
    """Schedules per property, fault kind and event; flaky and errors."""
    parts.append("<h2>Schedules per property</h2>")
    rows = [
        [_td(p), _td(n, True), _td(bad, True), _td(shrinking, True)]
        for p, (n, bad, shrinking) in sorted(merged.by_property.items())
    ]
    head = ["property", "schedules", "failed", "of them run while shrinking a failure"]
    parts.append(_table(head, rows, "by-property"))

    parts.append("<h2>Schedules per fault kind</h2>")
    rows = [
        [_td(k), _td(n, True), _td(bad, True)]
        for k, (n, bad) in sorted(merged.by_fault_kind.items())
    ]
    parts.append(_table(["fault kind", "schedules with it", "failed"], rows, "by-fault-kind"))

    parts.append("<h2>Schedules per event</h2>")
    rows = [[_td(k), _td(n, True)] for k, n in sorted(merged.by_event.items())]
    parts.append(_table(["event in the episode", "schedules"], rows, "by-event"))

    if merged.flaky or merged.errors:
        parts.append("<h2>Flaky and toolkit errors</h2><ul>")
        for f in merged.flaky:
            what = f.get("property", "loop")
            parts.append(f"<li>flaky ({_e(what)}, shard {f['shard']}): {_e(f)}</li>")
        for f in merged.errors:
            parts.append(
                f"<li class='bad'>toolkit error ({_e(f['property'])}, shard {f['shard']}): "
                f"{_e(f['error'])}</li>"
            )
        parts.append("</ul>")
    if merged.not_judged:
        parts.append("<h2>Not judged</h2><ul>")
        for c in merged.not_judged:
            parts.append(
                f"<li>{_e(c['property'])}, shard {c['shard']}: not judged, because the budget "
                f"ended its episode (raise --budget): {_e(c.get('message', ''))}</li>"
            )
        parts.append("</ul>")


def input_files(folders: list[Path]) -> list[Path]:
    """Every file the merge reads: each shard's report and episode log, whatever its name."""
    return [p for f in folders if f.is_dir() for p in sorted(f.glob("shard-*-of-*.json*"))]


def _check_outputs(outputs: dict[str, Path | None], folders: list[Path]) -> None:
    """The report files are never one of the merge's own inputs, nor each other."""
    taken = input_files(folders)
    for flag, path in outputs.items():
        if path is not None:
            check_not_an_input(path, taken, what=flag)
            check_output_file(path, what=flag)
            taken.append(path)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog="pathways-chaos search merge",
        description="one HTML report from the shards' files; exit 1 when a failure was found, "
        "a shard is missing or two shards ran the same seeds",
    )
    parser.add_argument("folders", nargs="+", type=Path, metavar="DIR")
    parser.add_argument("--html", type=Path, required=True, metavar="PATH")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="figures as JSON")
    parser.add_argument(
        "--junit", type=Path, default=None, metavar="PATH", help="one test case per shard"
    )
    return parser


def merge_main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    return reported("pathways-chaos search merge", lambda: _merge_and_write(args))


def _merge_and_write(args: argparse.Namespace) -> int:
    if args.html.is_dir():
        raise ChaosConfigError(f"--html {args.html} is a folder: name a file")
    _check_outputs({"--html": args.html, "--json": args.json, "--junit": args.junit}, args.folders)
    merged = merge(args.folders)
    write_atomic(args.html, render_html(merged).encode(), what="--html")
    if args.json is not None:
        data = (json.dumps(to_json(merged), indent=2) + "\n").encode()
        write_atomic(args.json, data, what="--json")
    if args.junit is not None:
        write_atomic(args.junit, render_junit(merged).encode(), what="--junit")
    print(merged.summary())
    for finding in merged.findings:
        print(
            f"  shard {finding['shard']}, {finding['property']}: "
            f"{finding['schedule'] or '(no fault)'}"
        )
        if finding.get("replay"):
            print(f"    replay: {finding['replay']}")
    for cut in merged.not_judged:
        print(
            f"  not judged: shard {cut['shard']}, {cut['property']}, because the budget ended "
            f"its episode (raise --budget): {cut.get('message', '')}"
        )
    print(f"report: {args.html}")
    return 1 if merged.findings or merged.errors or not merged.complete else 0


def to_json(merged: Merged) -> dict[str, Any]:
    return {
        "made_by": "pathways-chaos search merge",
        "schedules": merged.schedules,
        "expected_shards": merged.expected,
        "shards": [s.index for s in merged.shards],
        "missing": merged.missing,
        "unfinished": merged.unfinished,
        "overlaps": merged.overlaps,
        "by_property": merged.by_property,
        "by_fault_kind": merged.by_fault_kind,
        "by_event": merged.by_event,
        "findings": merged.findings,
        "flaky": merged.flaky,
        "errors": merged.errors,
        "not_judged": merged.not_judged,
    }


# -- the JUnit XML: one test case per shard, so a CI page shows which shard found what --------
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
        cut = [c for c in merged.not_judged if c["shard"] == index]
        if cut and not found:
            what = ", ".join(str(c["property"]) for c in cut)
            _mark(case, "skipped", f"not judged: {what}, because the budget ended its episode")
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
