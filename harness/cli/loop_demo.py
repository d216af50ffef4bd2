"""``pathways-chaos demo --loop MODULE:FUNC``: a user's own loop, a fault-free run and one
under faults, judged by the loop oracle; and ``check`` on a loop's log."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

#: Slices lost and back after two health polls: a pause-and-resume loop recovers too.
LOOP_DEMO_SCHEDULE = (
    "data_loss@batch=8:slice=2:repair_after_polls=2,not_found@batch=16:slice=1:repair_after_polls=2"
)


def demo_loop(args: argparse.Namespace, topology: Any) -> int:
    from pathways_chaos.faults.model import parse_schedule
    from pathways_chaos.harness.episodes.supervisor import check_loop
    from pathways_chaos.harness.errors import ChaosConfigError
    from pathways_chaos.harness.play import play_loop

    problem = check_loop(args.loop, "--loop")  # imported in a child, never here
    if problem is not None:
        raise ChaosConfigError(problem)
    schedule = parse_schedule(args.schedule or LOOP_DEMO_SCHEDULE)
    with tempfile.TemporaryDirectory() as tmp:
        baseline = play_loop(
            args.loop, topology=topology, clock=args.clock, checkpoint_dir=Path(tmp) / "fault-free"
        )
        outcome = play_loop(
            args.loop,
            schedule,
            baseline=baseline.events,
            topology=topology,
            clock=args.clock,
            log_path=args.log,
            checkpoint_dir=Path(tmp) / "faulted",
        )
    result, verdict = outcome.result, outcome.verdict
    batches = [e for e in result.events if e["kind"] == "batch"]
    attempts = [e for e in result.events if e["kind"] == "attempt_start"]
    print(f"pathways-chaos demo: {topology} fake cluster, loop {args.loop}")
    print(f"schedule: {schedule.to_text() or '(none)'}")
    print(
        f"{len(batches)} batches drawn, {len(verdict.batches)} committed, "
        f"{len(attempts)} attempts, {'completed' if verdict.completed else 'did not complete'}"
    )
    for r in verdict.recoveries:
        took = "never" if r["recovery_s"] is None else f"{r['recovery_s']:.1f} s"
        print(f"fault {r['fault']}: recovered {took} (episode clock)")
    print(verdict.summary())
    print(verdict.word)
    if args.log:
        print(f"event log: {args.log}")
        print_loop_output(Path(args.log), full=verdict.word != "SURVIVED")
    return verdict.exit_code


#: How much of a loop's output a verdict shows (the whole file stays beside the log).
OUTPUT_TAIL_LINES, OUTPUT_TAIL_BYTES, OUTPUT_LINE_CHARS = 20, 1 << 16, 300


def print_loop_output(log_path: Path, full: bool = True, temporary: bool = False) -> None:
    """What the loop wrote to stdout and stderr in each run, kept beside its log
    (``<log>.child/output-N.txt``): the last lines of each when ``full`` (a verdict that is not
    a pass), else only where it is (nothing of a ``temporary`` folder's, which goes). Read as
    untrusted bytes: the end of the file only, each line cut, undecodable bytes replaced."""
    from pathways_chaos.harness.engine.recorder import child_folder

    folder = child_folder(log_path)
    files = sorted(folder.glob("output-*.txt"), key=lambda f: (len(f.name), f.name))
    for file in files:
        if file.is_symlink() or not file.is_file():
            continue
        size = file.stat().st_size
        if size == 0:
            continue
        run = file.stem.removeprefix("output-")
        if not full:
            if not temporary:
                print(f"the loop's output, run {run}: {file}")
            continue
        with file.open("rb") as f:
            f.seek(max(0, size - OUTPUT_TAIL_BYTES))
            lines = f.read().decode(errors="replace").splitlines()[-OUTPUT_TAIL_LINES:]
        whole = "--log PATH keeps it all" if temporary else f"all in {file}"
        print(f"the loop's output, run {run} (its last {len(lines)} lines; {whole}):")
        for line in lines:
            print(f"  | {line[:OUTPUT_LINE_CHARS]}")


def check_loop_log(
    events: list[dict[str, Any]], baseline: list[dict[str, Any]] | None = None
) -> int:
    """A loop's log judged again (against its fault-free run's log, when given: without it
    the final state is not judged, and the verdict cannot be more than NOT JUDGED)."""
    from pathways_chaos.harness.judging.loop_oracle import judge_loop

    verdict = judge_loop(events, baseline)
    print(verdict.summary())
    print(verdict.word)
    return verdict.exit_code


def is_loop_log(events: list[dict[str, Any]]) -> bool:
    return any(e["kind"] == "episode_start" and e.get("loop") for e in events)
