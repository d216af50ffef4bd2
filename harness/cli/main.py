"""``pathways-chaos``: run a demo episode, judge a log, replay a rollback journal.

The CPU device count is set before anything imports JAX, which is why the heavy imports live
inside the commands.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pathways_chaos.harness.cli.deadline_arguments import (
    STEPS,
    add_deadline_arguments,
    apply_deadline_arguments,
)
from pathways_chaos.harness.cli.quiet import quiet_libraries, restores_library_logging
from pathways_chaos.harness.engine.option_values import OneLineArgumentParser
from pathways_chaos.harness.engine.topology import DEVICES_PER_SLICE, SLICES

DEMO_SCHEDULE = "data_loss@step=12:slice=2,data_loss@step=25:slice=1,repair@step=30:slice=2"


@restores_library_logging
def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["rollback"]:  # these have their own parsers, --help included
        return _rollback(args_list[1:])
    if args_list[:1] == ["replay"]:
        from pathways_chaos.harness.cli.replay import replay_main

        return replay_main(args_list[1:])
    if args_list[:1] == ["search"]:
        from pathways_chaos.harness.cli.search import search_main

        return search_main(args_list[1:])
    if args_list[:1] == ["twin"]:
        from pathways_chaos.harness.cli.twin import twin_main

        return twin_main(args_list[1:])
    if args_list[:1] == ["ramdisk"]:
        from pathways_chaos.harness.acceptance.ramdisk import ramdisk_main

        return ramdisk_main(args_list[1:])
    parser = OneLineArgumentParser(prog="pathways-chaos", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("demo", help="run one episode on the fake cluster and summarise it")

    check = sub.add_parser("check", help="run the oracle over an event log")
    check.add_argument("log", type=Path)
    check.add_argument("--no-replay", action="store_true")
    check.add_argument(
        "--trainer",
        default=None,
        metavar="MODULE:CLASS",
        help="replay with the trainer the log names (its code runs in a child process); "
        "without it, a trainer the toolkit did not write is not replayed on a log's word",
    )
    check.add_argument(
        "--baseline",
        type=Path,
        default=None,
        metavar="LOG",
        help="a loop's fault-free run's log, to judge the final state against",
    )

    sub.add_parser("rollback", help="undo every change a rollback journal records (JOURNAL)")
    sub.add_parser(
        "replay",
        help="run one episode from a schedule's text form and judge it (--loop MODULE:FUNC: "
        "your own loop)",
    )
    sub.add_parser("ramdisk", help="size the Multi-Tier Checkpointing ramdisk per host")
    sub.add_parser(
        "search",
        help="search the property suites as shards (--emit-job N: as an Indexed Job; merge: "
        "one HTML report)",
    )
    sub.add_parser("twin", help="a local twin of Pathways on GKE: twin up --manifest F / down")

    if args_list[:1] == ["demo"]:
        args = build_demo_parser().parse_args(args_list[1:])
        args.command = "demo"
    else:
        args = parser.parse_args(args_list)
    from pathways_chaos.harness.engine.command_errors import reported

    return reported(
        "pathways-chaos", lambda: _demo(args) if args.command == "demo" else _check(args)
    )


def build_demo_parser() -> argparse.ArgumentParser:
    """``pathways-chaos demo``'s options (the generated bad-input test walks them)."""
    demo = OneLineArgumentParser(
        prog="pathways-chaos demo", description="run one episode on the fake cluster"
    )
    demo.add_number("--slices", SLICES, default=4)
    demo.add_number("--devices-per-slice", DEVICES_PER_SLICE, default=2)
    demo.add_argument("--mode", default="resize", help="pause_resume or resize")
    demo.add_argument("--scale-up", default="in_loop", help="in_loop, signal or off")
    demo.add_number("--steps", STEPS, default=50)
    demo.add_argument("--schedule", default=None, help="faults, e.g. data_loss@step=12:slice=2")
    demo.add_argument(
        "--loop",
        default=None,
        metavar="MODULE:FUNC",
        help="run your own elastic loop (unchanged) instead of the reference trainer",
    )
    demo.add_argument("--clock", default="fake", choices=("fake", "real"))
    demo.add_argument("--log", type=Path, default=None, help="write the JSONL event log here")
    add_deadline_arguments(demo)
    return demo


def _demo(args: argparse.Namespace) -> int:
    from pathways_chaos.faults.model import check_schedule_fits, parse_schedule
    from pathways_chaos.harness.engine.topology import SliceTopology, request_cpu_devices
    from pathways_chaos.harness.errors import ChaosConfigError

    # Every input is checked before JAX starts: a typo costs milliseconds, not a JAX start-up.
    topology = SliceTopology(args.slices, args.devices_per_slice)
    apply_deadline_arguments(args)
    if args.schedule is not None and not args.schedule.strip():
        raise ChaosConfigError(
            "--schedule is empty: give faults (e.g. --schedule data_loss@step=12:slice=2), or "
            "leave --schedule out for the demo schedule"
        )
    if args.loop is not None and not args.loop.strip():
        raise ChaosConfigError(
            "--loop is empty: name your loop (--loop MODULE:FUNC, e.g. "
            "pathways_chaos.harness.reference.user_loop:main), or leave --loop out for the "
            "reference trainer"
        )
    trainer_only = [
        flag
        for flag, value, default in (
            ("--steps", args.steps, 50),
            ("--mode", args.mode, "resize"),
            ("--scale-up", args.scale_up, "in_loop"),
        )
        if value != default
    ]
    if args.loop and trainer_only:
        raise ChaosConfigError(
            f"{', '.join(trainer_only)} set the reference trainer, not a loop given with --loop: "
            "pass your loop's own options with pathways-chaos replay --loop ... --option "
            "steps=40, or leave them out"
        )
    schedule = None if args.loop else parse_schedule(args.schedule or DEMO_SCHEDULE)
    if args.loop and args.schedule is not None:
        check_schedule_fits(parse_schedule(args.schedule), topology.num_slices, kubernetes=False)
    if schedule is not None:
        check_schedule_fits(schedule, topology.num_slices, kubernetes=False)
    if args.log is not None:
        from pathways_chaos.harness.engine.owned_paths import check_appendable

        check_appendable(args.log, what="--log")
    request_cpu_devices(topology.device_count)  # before anything starts JAX
    quiet_libraries()
    if args.loop:
        from pathways_chaos.harness.cli.loop_demo import demo_loop

        return demo_loop(args, topology)
    from pathways_chaos.harness.play import play
    from pathways_chaos.harness.reference.trainer import TrainerConfig
    from pathways_chaos.harness.reports import report

    assert schedule is not None
    with tempfile.TemporaryDirectory() as tmp:
        config = TrainerConfig(
            mode=args.mode, scale_up=args.scale_up, final_step=args.steps, checkpoint_dir=tmp
        )
        outcome = play(
            schedule, config=config, topology=topology, clock=args.clock, log_path=args.log
        )
    result, verdict = outcome.result, outcome.verdict
    print(f"pathways-chaos demo: {topology} fake cluster, mode {args.mode}, {args.steps} steps")
    print(f"schedule: {schedule.to_text() or '(none)'}")
    print(report.summary(result.events, verdict))
    if args.log:
        print(f"event log: {args.log}")
    for line in result.unfired:  # never "survived" for a fault that never happened
        print(f"pathways-chaos: {line}", file=sys.stderr)
    return 0 if verdict.ok and not result.unfired else 1


def _read_events(path: Path) -> list[dict[str, Any]]:
    """An event log given on the command line, or one line saying why it is not one."""
    import json
    import os
    import stat

    from pathways_chaos.harness.engine.recorder import read_log
    from pathways_chaos.harness.errors import ChaosConfigError

    with contextlib.suppress(OSError):  # a missing file or a folder: read_log says it below
        mode = os.stat(path).st_mode  # never blocks, unlike opening a FIFO
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            kind = "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a device or socket"
            raise ChaosConfigError(
                f"{path} is {kind}, not an event log: give the file an episode wrote"
            )
    try:
        events = read_log(path)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        whole = _without_torn_end(path)
        if whole is None:
            raise ChaosConfigError(
                f"{path} is not a JSONL event log ({type(error).__name__}): give the file "
                "an episode wrote (--log, --chaos-log-dir)"
            ) from None
        events = whole
    if not all(isinstance(e, dict) and "kind" in e for e in events):
        raise ChaosConfigError(f"{path} is not an event log: its lines have no 'kind'")
    events = _recorded_only(path, events)
    from pathways_chaos.harness.judging.final_values import vet_value_files

    vet_value_files(events, path)  # a value file it names is read only from beside it
    if not any(e["kind"] == "episode_start" for e in events):
        raise ChaosConfigError(
            f"{path} holds no episode (no episode_start event): give the file an episode wrote"
        )
    return events


def _recorded_only(path: Path, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lines the recorder wrote; any other (edited, joined from another log, written by
    the loop) is left out, and said in one line on stderr."""
    from pathways_chaos.harness.engine.recorder import not_recorded

    kept: list[dict[str, Any]] = []
    left_out: list[str] = []
    due = 0
    for e in events:
        why = not_recorded(e, due)
        if why is None:
            kept.append(e)
        else:
            left_out.append(why)
        if why is None or e.get("seq") == due:
            due += 1  # its number was the recorder's (a line of ours, edited)
    if left_out:
        print(
            f"{path}: {len(left_out)} line(s) its recorder did not write were left out (the "
            f"first: {left_out[0]})",
            file=sys.stderr,
        )
    return kept


def _without_torn_end(path: Path) -> list[dict[str, Any]] | None:
    """A log whose last line alone is torn (its writer was killed mid-line): the whole lines,
    said on stderr; None when any other line is not JSON."""
    from pathways_chaos.harness.engine.recorder import LogTail

    tail = LogTail(path)
    events = tail.read(final=True)
    if tail.bad or tail.torn != 1:
        return None
    print(
        f"{path}: its last line is torn (cut short while written): judged without it",
        file=sys.stderr,
    )
    return events


def _check(args: argparse.Namespace) -> int:
    from pathways_chaos.harness.errors import ChaosConfigError

    events = _read_events(args.log)
    from pathways_chaos.harness.cli.loop_demo import check_loop_log, is_loop_log

    if is_loop_log(events):
        baseline = None if args.baseline is None else _read_events(args.baseline)
        if baseline is not None:
            _check_baseline(args.baseline, baseline, events)
        return check_loop_log(events, baseline)
    if args.baseline is not None:
        raise ChaosConfigError("--baseline is for a loop's log: a trainer's log needs none")
    if any(e["kind"] == "run_start" for e in events):
        from pathways_chaos.harness.engine.topology import request_cpu_devices

        request_cpu_devices(1)
    from pathways_chaos.harness.judging import oracle
    from pathways_chaos.harness.reports import report

    verdict = oracle.check(events, replay=not args.no_replay, replayed=_replay_child(args, events))
    print(report.summary(events, verdict))
    return verdict.exit_code


def _check_baseline(
    path: str, baseline: list[dict[str, Any]], events: list[dict[str, Any]]
) -> None:
    """A ``--baseline`` must be a fault-free run of the same loop: anything else would make
    the judges compare the episode with a yardstick that is not one."""
    from pathways_chaos.harness.cli.loop_demo import is_loop_log
    from pathways_chaos.harness.errors import ChaosConfigError

    fix = "give the log of a fault-free run of the same loop (--chaos-log-dir keeps each as "
    fix += "fault-free-N.jsonl)"
    if not is_loop_log(baseline):
        raise ChaosConfigError(f"--baseline {path} is not a loop's event log: {fix}")
    start = next(e for e in baseline if e["kind"] == "episode_start")
    if start.get("schedule") or any(e["kind"] == "fault" for e in baseline):
        raise ChaosConfigError(
            f"--baseline {path} ran under faults ({start.get('schedule')!r}), so it is not a "
            f"fault-free run: {fix}"
        )
    mine = next(e for e in events if e["kind"] == "episode_start")
    if start.get("loop") != mine.get("loop"):
        raise ChaosConfigError(
            f"--baseline {path} ran the loop {start.get('loop')!r}, the log {mine.get('loop')!r}: "
            "give a fault-free run of the same loop"
        )


def _replay_child(args: argparse.Namespace, events: list[dict[str, Any]]) -> Any:
    """A replay in a child for a log whose trainer the toolkit did not write (never imported
    here), only when ``--trainer`` names it too: a log is a file anyone can edit, and the code
    it names is not run on its word. None for the toolkit's own trainers."""
    import shlex

    from pathways_chaos.harness.errors import ChaosConfigError
    from pathways_chaos.harness.judging.replay import ReplayNotRun, is_toolkit_trainer

    start = next((e for e in events if e["kind"] == "run_start"), None)
    spec = str((start or {}).get("trainer") or "")
    if args.trainer is not None and args.trainer != spec:
        raise ChaosConfigError(
            f"--trainer {args.trainer} but the log's trainer is {spec or 'not named'}: give the "
            "trainer the episode ran, or leave --trainer out"
        )
    if not spec or is_toolkit_trainer(spec):
        return None
    if args.trainer is None:
        return ReplayNotRun(
            f"the log names the trainer {spec}, whose code check does not run on a log's word: "
            f"pass --trainer {shlex.quote(spec)} to replay it (in a child process)"
        )
    first = next((e for e in events if e["kind"] == "episode_start"), {})
    topology = str(first.get("topology") or "4x2")

    def replay() -> Any:
        from pathways_chaos.harness.episodes.supervised_trainer import replay_logged_trainer

        return replay_logged_trainer(Path(args.log), spec, topology)

    return replay


def _rollback(argv: list[str]) -> int:
    try:
        from pathways_chaos.harness.cli.rollback import rollback_main
    except ImportError:
        print(
            "pathways-chaos: error: the Kubernetes rollback journal is not installed",
            file=sys.stderr,
        )
        return 2
    return rollback_main(argv)


if __name__ == "__main__":
    sys.exit(main())
