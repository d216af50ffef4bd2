"""Survey the catalogue: play every loop fault-free and under its schedules, and put the CURRENT
judge's verdict next to this catalogue's own evidence (which never reads the judge).

    .venv/bin/python tests/harness/judging/loop_catalogue/survey.py \
        [--json out.json] [--markdown out.md]
                                                    [--only NAME ...] [--kind KIND]
    .venv/bin/python tests/harness/judging/loop_catalogue/survey.py --from-json out.json  # render

Own evidence: does the run complete; does its final state equal the fault-free run's (a loop with
a fixed batch must, a scaled batch changes the schedule on a resize); is the loop's own tally of
trained ids consistent (count n and id sum n(n-1)/2); and what the few loops that keep a trace
(``TRACE``, ``ATTEMPTS``, ``STARTS``, ``RESTORED_FROM``, ``SWALLOWED``, ``HISTORY``) recorded.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import re
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]

# What a failure message must mention to count as naming the real cause (lower case).
CAUSE_WORDS: dict[str, tuple[str, ...]] = {
    "batch-not-trained": ("not trained", "never trained", "discarded", "dropped", "drawn and"),
    "snapshot-mismatch": (
        "mismatch",
        "disagree",
        "do not match",
        "does not match",
        "ahead of",
        "behind",
    ),
    "leaf-reinitialised": (
        "reinitialis",
        "reinitializ",
        "re-initiali",
        "initial value",
        "was not restored",
    ),
    "leaf-shape-changed": ("shape",),
    "step-not-restored": ("step counter",),
    "iterator-not-restored": ("iterator",),
    "order-changed": ("order",),
    "sample-trained-twice": ("twice",),
    "sample-skipped": ("skipped",),
    "error-swallowed": ("swallow", "caught", "ignored"),
    "stale-mesh": ("stale", "old mesh", "mesh"),
    "dead-slice-in-mesh": ("mesh holding slice", "dead slice", "lost slice"),
    "restore-not-latest": ("not the latest", "older snapshot", "not from the latest"),
    "started-over": ("started over", "start over"),
    "leak": ("live device arrays", "leak", "alive"),
    "preemption-lost": ("preempt", "checkpoint", "started over"),
    "crash": ("crashed",),
    "wrong-final-state": ("final state differs",),
}


def _catalogue() -> Any:
    name = "loop_catalogue_catalogue"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "catalogue.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# -- own evidence -----------------------------------------------------------------------------
def _compare(a: Any, b: Any) -> tuple[bool | None, str]:
    """(equal within float noise?, text); None when either side is missing."""
    import jax
    import numpy as np

    if a is None or b is None:
        return None, "no final state"
    # Compare by key paths, not tree definitions: each load of a loop file makes new classes.
    pa, la = zip(*jax.tree_util.tree_leaves_with_path(a), strict=True)
    pb, lb = zip(*jax.tree_util.tree_leaves_with_path(b), strict=True)
    if [jax.tree_util.keystr(k) for k in pa] != [jax.tree_util.keystr(k) for k in pb]:
        return False, "tree structure differs"
    worst = 0.0
    for x, y in zip(la, lb, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape:
            return False, f"shape {x.shape} vs fault-free {y.shape}"
        worst = max(
            worst, float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)), initial=0.0))
        )
        if not np.allclose(x, y, rtol=1e-5, atol=1e-6):
            return False, f"max abs diff {worst:.3g}"
    return True, f"max abs diff {worst:.3g}"


def _tally(state: Any) -> tuple[bool | None, str]:
    """The loop's own [samples trained, sum of their ids] leaf, if it keeps one."""
    import jax
    import numpy as np

    found = [
        np.asarray(leaf)
        for path, leaf in jax.tree_util.tree_leaves_with_path(state)
        if np.asarray(leaf).dtype == np.int32
        and np.asarray(leaf).shape == (2,)
        and ("seen" in jax.tree_util.keystr(path) or jax.tree_util.keystr(path) == "[2]")
    ]
    if not found:
        return None, ""
    n, total = (int(v) for v in found[0])
    ok = total == n * (n - 1) // 2
    return ok, f"tally {n} samples, id sum {total} ({'=' if ok else '!='} {n * (n - 1) // 2})"


def _traces(module: dict[str, Any]) -> dict[str, Any]:
    import jax

    out: dict[str, Any] = {}
    for name in ("TRACE", "ATTEMPTS", "STARTS", "RESTORED_FROM"):
        if name in module:
            out[name] = list(module[name])
    if "SWALLOWED" in module:
        out["SWALLOWED"] = len(module["SWALLOWED"])
    if "HISTORY" in module:
        last = max((n for n, _ in module["HISTORY"]), default=0)
        out["HISTORY_live_earlier_attempts"] = sum(
            1
            for n, tree in module["HISTORY"]
            if n < last
            for a in jax.tree.leaves(tree)
            if not a.is_deleted()
        )
    return out


def _bug_shown(loop: Any, run: dict[str, Any], base: dict[str, Any]) -> tuple[bool, str]:
    """This catalogue's own verdict: did the loop's bug happen in this run?"""
    t = run["traces"]
    name = loop.name
    if name == "step_errors_swallowed":
        return t.get("SWALLOWED", 0) > 0, f"{t.get('SWALLOWED', 0)} errors swallowed"
    if name == "scale_up_keeps_mesh":
        stale = [pair for pair in t.get("TRACE", []) if pair[0] != pair[1]]
        return bool(
            stale
        ), f"{len(stale)} steps on a mesh of fewer slices than the manager's active ones"
    if name == "mesh_from_jax_devices":
        short = [a for a in t.get("ATTEMPTS", []) if a < 4]
        return bool(
            short
        ), f"attempts' active slice counts {t.get('ATTEMPTS')} (mesh always 4 slices)"
    if name == "warm_start_checkpoint_first":
        older = [
            (r, latest)
            for r, latest in t.get("RESTORED_FROM", [])
            if latest is not None and r < latest
        ]
        return bool(older), f"restored (step, latest snapshot): {t.get('RESTORED_FROM')}"
    if name == "attempt_history_kept":
        kept = t.get("HISTORY_live_earlier_attempts", 0)
        return kept > 0, f"{kept} device arrays of failed attempts still alive after the run"
    if "STARTS" in t:
        over = 0 in t["STARTS"][1:]
        return over, f"attempt start steps {t['STARTS']}"
    if run["tally_ok"] is False:
        return True, run["tally"]
    if not run["completed"]:
        return True, f"did not complete: {run['error']}"
    if loop.batch == "scaled" and run.get("twin_equal") is not None:
        return not run[
            "twin_equal"
        ], f"vs the correct twin under the same faults: {run['twin_diff']}"
    if loop.batch == "scaled":
        return False, "scaled batch: final state not comparable with the fault-free run"
    return run["final_equal"] is False, f"final state vs fault-free: {run['final_diff']}"


# -- playing ----------------------------------------------------------------------------------
def _play(spec: str, schedule: str, baseline: Any) -> tuple[Any, dict[str, Any], Any]:
    from pathways_chaos.harness.episodes.loop_episode import load_loop
    from pathways_chaos.harness.play import play_loop

    fn = load_loop(spec)
    folder = tempfile.mkdtemp(prefix="loop-catalogue-")
    try:
        start = time.perf_counter()
        out = play_loop(fn, schedule, baseline=baseline, checkpoint_dir=folder)
        seconds = time.perf_counter() - start
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    results = list(out.result.results or [])
    final = results[-1] if results else None
    return out, {"seconds": round(seconds, 2), "traces": _traces(fn.__globals__)}, final


def _verdict(out: Any) -> dict[str, Any]:
    text = out.verdict.summary()
    lines = [line.strip() for line in text.splitlines()]
    failed = [line[len("FAILED: ") :] for line in lines if line.startswith("FAILED:")]
    not_judged = [line[len("not judged: ") :] for line in lines if line.startswith("not judged:")]
    return {"ok": bool(out.verdict.ok), "failed": failed, "not_judged": not_judged}


def survey_loop(loop: Any) -> dict[str, Any]:
    cat = _catalogue()
    base_out, base, base_final = _play(loop.spec, "", None)
    base.update(completed=bool(base_out.result.completed), error=_err(base_out), final=None)
    schedules = (
        list(cat.CORRECT_SCHEDULES)
        if loop.kind == "correct"
        else [loop.scenario, *loop.single_faults_pass]
    )
    twin = (
        next((c for c in cat.LOOPS if c.name == "flax_simple_workload"), None)
        if loop.name == "flax_upstream_step"
        else None
    )
    runs = []
    for schedule in schedules:
        out, run, final = _play(loop.spec, schedule, base_out.events)
        run.update(
            faults_fired=sum(1 for e in out.events if e.get("kind") == "fault"),
            schedule=schedule,
            completed=bool(out.result.completed),
            error=_err(out),
            runs=len(out.result.results or []),
        )
        run["final_equal"], run["final_diff"] = _compare(final, base_final)
        run["tally_ok"], run["tally"] = _tally(final)
        run["verdict"] = _verdict(out)
        if twin is not None:
            _, _, twin_final = _play(twin.spec, schedule, None)
            run["twin_equal"], run["twin_diff"] = _compare(final, twin_final)
        if loop.kind != "correct":
            run["bug_shown"], run["evidence"] = _bug_shown(loop, run, base)
        else:
            run["own_ok"], run["evidence"] = _correct_evidence(loop, run)
        runs.append(run)
    return {
        "name": loop.name,
        "kind": loop.kind,
        "spec": loop.spec,
        "batch": loop.batch,
        "bug": loop.bug,
        "cause": loop.cause,
        "scenario": loop.scenario,
        "single_faults_pass": list(loop.single_faults_pass),
        "fault_free": {
            "completed": base["completed"],
            "error": base["error"],
            "seconds": base["seconds"],
        },
        "runs": runs,
    }


def _correct_evidence(loop: Any, run: dict[str, Any]) -> tuple[bool, str]:
    if not run["completed"]:
        return False, f"did not complete: {run['error']}"
    if run["tally_ok"] is False:
        return False, run["tally"]
    if loop.batch == "fixed":
        return bool(run["final_equal"]), f"final state vs fault-free: {run['final_diff']}"
    if run["final_equal"]:
        return True, f"final state vs fault-free: {run['final_diff']}"
    return True, run["tally"] or "scaled batch: completed (final state not comparable)"


def _names_cause(cause: str | None, failed: list[str]) -> dict[str, bool]:
    """Whether the first (or any) violation line mentions the cause; file paths are dropped
    first, so a loop file named after its bug does not count as the judge naming it."""
    words = CAUSE_WORDS.get(cause or "", ())
    lines = [re.sub(r"\S+\.py(:\d+)?", "", line).lower() for line in failed]
    return {
        "first": bool(lines) and any(w in lines[0] for w in words),
        "any": any(any(w in line for w in words) for line in lines),
    }


def _named(item: dict[str, Any]) -> dict[str, bool]:
    run = item["runs"][0]
    return _names_cause(item["cause"], run["verdict"]["failed"]) if item["cause"] else {}


def _err(out: Any) -> str | None:
    error = out.result.error
    return None if error is None else f"{type(error).__name__}: {error}"[:200]


# -- report -----------------------------------------------------------------------------------
def _cell(run: dict[str, Any]) -> str:
    v = run["verdict"]
    mark = "" if run["faults_fired"] else " (no fault)"
    if v["ok"]:
        return ("pass" if not v["not_judged"] else "pass*") + mark
    return "FAIL" + mark


def markdown(report: list[dict[str, Any]]) -> str:
    cat = _catalogue()
    out = [
        "| loop | kind | bug | CAUSE | SCENARIO | judge's verdict under SCENARIO | names cause"
        " | own evidence |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for item in report:
        if item["kind"] == "correct":
            continue
        run = item["runs"][0]
        v = run["verdict"]
        verdict = "pass" if v["ok"] else "fail: " + (v["failed"][0] if v["failed"] else "?")
        if v["ok"] and v["not_judged"]:
            verdict += " (not judged: " + "; ".join(v["not_judged"]) + ")"
        named = _named(item)
        naming = "yes" if named.get("first") else ("later line" if named.get("any") else "no")
        shown = ("bug shown: " if run["bug_shown"] else "bug NOT shown: ") + run["evidence"]
        shown += "" if run["faults_fired"] else " [no fault fired]"
        out.append(
            f"| {item['name']} | {item['kind']} | {item['bug']} | {item['cause']} "
            f"| `{item['scenario']}` | {_esc(verdict)} | {naming} | {_esc(shown)} |"
        )
    out += ["", "Two-fault loops under their single faults (must pass):", ""]
    out += ["| loop | single fault | judge | own evidence |", "|---|---|---|---|"]
    for item in report:
        for run in item["runs"][1:] if item["kind"] == "two_faults" else []:
            v = run["verdict"]
            verdict = "pass" if v["ok"] else "fail: " + (v["failed"][0] if v["failed"] else "?")
            own = ("bug shown (wrong): " if run["bug_shown"] else "correct: ") + run["evidence"]
            own += "" if run["faults_fired"] else " [no fault fired]"
            out.append(f"| {item['name']} | `{run['schedule']}` | {_esc(verdict)} | {_esc(own)} |")
    out += [
        "",
        "Correct loops under the 8 schedules (pass* = passed with some judges not run):",
        "",
    ]
    heads = [f"S{i + 1}" for i in range(len(cat.CORRECT_SCHEDULES))]
    out += [
        "| loop | batch | " + " | ".join(heads) + " | own evidence |",
        "|---|---|" + "---|" * len(heads) + "---|",
    ]
    notes: list[str] = []
    for item in report:
        if item["kind"] != "correct":
            continue
        cells = [_cell(r) for r in item["runs"]]
        own = (
            "all correct"
            if all(r["own_ok"] for r in item["runs"])
            else "; ".join(
                f"S{i + 1}: {r['evidence']}" for i, r in enumerate(item["runs"]) if not r["own_ok"]
            )
        )
        out.append(
            f"| {item['name']} | {item['batch']} | " + " | ".join(cells) + f" | {_esc(own)} |"
        )
        for i, r in enumerate(item["runs"]):
            if not r["verdict"]["ok"]:
                notes.append(f"- {item['name']} S{i + 1}: {(r['verdict']['failed'] or ['?'])[0]}")
    out += ["", "Schedules:", ""] + [
        f"- S{i + 1}: `{s}`" for i, s in enumerate(cat.CORRECT_SCHEDULES)
    ]
    out += ["", "First violation of each failed correct-loop run:", ""] + [_esc(n) for n in notes]
    out += ["", counts_text(report)]
    return "\n".join(out) + "\n"


def counts(report: list[dict[str, Any]]) -> dict[str, Any]:
    correct = [i for i in report if i["kind"] == "correct"]
    broken = [i for i in report if i["kind"] != "correct"]
    return {
        "correct": len(correct),
        "correct_passing_all": sum(all(r["verdict"]["ok"] for r in i["runs"]) for i in correct),
        "broken": len(broken),
        "broken_failed": sum(not i["runs"][0]["verdict"]["ok"] for i in broken),
        "broken_failed_naming_cause_first": sum(
            (not i["runs"][0]["verdict"]["ok"]) and _named(i).get("first", False) for i in broken
        ),
        "broken_failed_naming_cause_any": sum(
            (not i["runs"][0]["verdict"]["ok"]) and _named(i).get("any", False) for i in broken
        ),
        "two_fault_singles_passing": sum(
            all(r["verdict"]["ok"] for r in i["runs"][1:])
            for i in broken
            if i["kind"] == "two_faults"
        ),
        "own_evidence_bug_shown": sum(bool(i["runs"][0].get("bug_shown")) for i in broken),
        "own_evidence_correct_ok": sum(all(r["own_ok"] for r in i["runs"]) for i in correct),
    }


def counts_text(report: list[dict[str, Any]]) -> str:
    c = counts(report)
    return (
        "**Counts.** Correct loops the judge passes under all schedules: "
        f"{c['correct_passing_all']} of {c['correct']}. "
        "Broken loops (incl. two-fault) it fails under their SCENARIO: "
        f"{c['broken_failed']} of {c['broken']}; "
        f"with the first violation naming the real cause: {c['broken_failed_naming_cause_first']} "
        f"(any violation line: {c['broken_failed_naming_cause_any']}). "
        f"Two-fault loops passed under all their single faults: {c['two_fault_singles_passing']}. "
        f"Own evidence: bug shown in {c['own_evidence_bug_shown']} of {c['broken']} broken loops; "
        f"{c['own_evidence_correct_ok']} of {c['correct']} correct loops correct under every "
        "schedule."
    )


def _esc(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the full survey as JSON here")
    parser.add_argument("--markdown", help="write the tables as Markdown here (else print them)")
    parser.add_argument("--only", nargs="*", default=[], help="loop names to survey (default: all)")
    parser.add_argument(
        "--kind", choices=("correct", "broken", "two_faults"), help="survey one kind only"
    )
    parser.add_argument(
        "--from-json", help="re-render the tables from an earlier --json file, running nothing"
    )
    args = parser.parse_args(argv)
    cat = _catalogue()
    chosen = [
        loop
        for loop in cat.LOOPS
        if (not args.only or loop.name in args.only)
        and (args.kind is None or loop.kind == args.kind)
    ]
    unknown = set(args.only) - {loop.name for loop in cat.LOOPS}
    if unknown:
        parser.error(
            f"unknown loop name(s) {sorted(unknown)}: "
            "use names from tests/harness/judging/loop_catalogue/catalogue.py"
        )
    if args.from_json:
        report = json.loads(Path(args.from_json).read_text())["loops"]
        text = markdown(report)
        if args.markdown:
            Path(args.markdown).write_text(text)
        else:
            print(text)
        return 0
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    report, errors = [], []
    for loop in chosen:
        print(f"surveying {loop.kind}/{loop.name} ...", file=sys.stderr, flush=True)
        try:
            report.append(survey_loop(loop))
        except Exception as error:  # one broken setup must not lose the others
            errors.append(f"{loop.name}: {type(error).__name__}: {error}"[:300])
            print(f"  could not survey {loop.name}: {errors[-1]}", file=sys.stderr, flush=True)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"loops": report, "counts": counts(report), "errors": errors}, indent=1, default=str
            )
        )
    text = markdown(report)
    if errors:
        text += "\nNot surveyed (the survey could not run them):\n\n" + "\n".join(
            f"- {_esc(e)}" for e in errors
        )
        text += "\n"
    if args.markdown:
        Path(args.markdown).write_text(text)
    else:
        print(text)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
