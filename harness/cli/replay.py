"""``pathways-chaos replay``: one episode from its command-line form, judged like the property.

A property failure prints this command with the shrunk schedule; pasting it reproduces the
failure in a new process (exit 1), or shows the fix (exit 0). ``replay --loop MODULE:FUNC``
replays a user's own loop (the loop search's failures): a fault-free run of the loop, then the
schedule, judged by the loop judge against it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import tempfile
from pathlib import Path

from pathways_chaos.harness.cli.deadline_arguments import (
    STEPS,
    add_deadline_arguments,
    apply_deadline_arguments,
)
from pathways_chaos.harness.cli.loop_demo import print_loop_output
from pathways_chaos.harness.cli.quiet import quiet_libraries, restores_library_logging
from pathways_chaos.harness.engine.command_errors import reported
from pathways_chaos.harness.engine.option_values import OneLineArgumentParser, Range
from pathways_chaos.harness.engine.topology import DEVICES_PER_SLICE, SLICES, SliceTopology
from pathways_chaos.harness.properties.episode_spec import EpisodeSpec

#: The range of each whole-number field of an episode (EpisodeSpec checks how they combine).
FIELD_RANGES = {
    "slices": SLICES,
    "devices_per_slice": DEVICES_PER_SLICE,
    "steps": STEPS,
    "snapshot_interval": Range(1, STEPS.maximum, whole=True, unit="steps"),
    "global_batch": Range(1, 2**20, whole=True, unit="samples"),
    "max_attempts": Range(0, 10_000, whole=True, unit="attempts"),
    "poll_interval": Range(0, 24 * 3600, whole=True, unit="seconds"),
    "data_size": Range(0, 2**40, whole=True, unit="samples"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog="pathways-chaos replay",
        description="replay one episode and print the verdict",
        epilog="A loop instead of the reference trainer: pathways-chaos replay --loop "
        "MODULE:FUNC [--schedule TEXT] [--topology NxM] [--option KEY=VALUE ...] (see "
        "pathways-chaos replay --loop X --help). Exit 0 survived, 1 failed, 5 not judged (a "
        "loop's central judge could not judge).",
    )
    for field in dataclasses.fields(EpisodeSpec):
        flag = "--" + field.name.replace("_", "-")
        if field.type in ("bool", bool):
            parser.add_argument(flag, action="store_true", default=field.default)
        elif field.type in ("int", int):
            parser.add_number(flag, FIELD_RANGES[field.name], default=field.default)
        else:
            parser.add_argument(flag, default=field.default)
    add_deadline_arguments(parser)
    return parser


@restores_library_logging
def replay_main(argv: list[str]) -> int:
    """Runs the episode; prints the schedule, outcome and every violation; 1 when it fails."""
    if any(a == "--loop" or a.startswith("--loop=") for a in argv):
        return replay_loop_main(argv)
    args = build_parser().parse_args(argv)
    return reported("pathways-chaos replay", lambda: _replay_trainer(args))


def _replay_trainer(args: argparse.Namespace) -> int:
    apply_deadline_arguments(args)
    fields = {f.name for f in dataclasses.fields(EpisodeSpec)}
    spec = EpisodeSpec(**{k: v for k, v in vars(args).items() if k in fields})
    from pathways_chaos.harness.engine.topology import request_cpu_devices

    request_cpu_devices(spec.slices * spec.devices_per_slice)  # before JAX starts
    quiet_libraries()
    from pathways_chaos.harness.properties.episode_spec import judge, run_spec

    outcome = run_spec(spec)
    result = outcome.result
    problems = result.unfired + judge(result.events, spec, outcome.verdict)
    ends = [e for e in result.events if e["kind"] == "run_end"]
    print(f"replay: {spec.slices}x{spec.devices_per_slice} fake cluster, trainer {spec.trainer}")
    print(f"schedule: {spec.schedule or '(none)'}; expected outcome: {spec.expect}")
    for e in ends:
        why = e.get("error") or ""
        print(f"run {e['run']}: {e['status']} after {e['attempts']} attempts {why}".rstrip())
    if problems:
        print("verdict: FAILED")
        for p in problems:
            print(f"  - {p}")
        return 1
    print("verdict: survived")
    return 0


def build_loop_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog="pathways-chaos replay --loop",
        description="replay a user's loop under one schedule and print the loop judge's verdict",
    )
    parser.add_argument("--loop", required=True, metavar="MODULE:FUNC", help="the loop to run")
    parser.add_argument("--schedule", default="", help="faults, e.g. data_loss@batch=6:slice=1")
    parser.add_argument(
        "--topology",
        default=str(SliceTopology.DEFAULT),
        help=f"the fake cluster, NxM (default {SliceTopology.DEFAULT})",
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a keyword option for the loop (VALUE as JSON, else a string); repeatable",
    )
    parser.add_argument(
        "--log",
        type=Path,
        default=None,
        help="keep the event log here, and the loop's output beside it (<log>.child/)",
    )
    add_deadline_arguments(parser)
    return parser


def _loop_options(items: list[str]) -> dict[str, object]:
    import json

    from pathways_chaos.harness.errors import ChaosConfigError

    options: dict[str, object] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.isidentifier():
            raise ChaosConfigError(
                f"--option {item!r} is not KEY=VALUE: write for example --option final_step=12"
            )
        if key in options:
            raise ChaosConfigError(f"--option {key}= is given twice: keep one")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options


@restores_library_logging
def replay_loop_main(argv: list[str]) -> int:
    """The loop under the schedule, judged against its fault-free run; 1 when it fails."""
    args = build_loop_parser().parse_args(argv)
    return reported("pathways-chaos replay", lambda: _replay_loop(args))


def _replay_loop(args: argparse.Namespace) -> int:
    from pathways_chaos.faults.model import check_schedule_fits, parse_schedule
    from pathways_chaos.harness.engine.topology import SliceTopology, request_cpu_devices
    from pathways_chaos.harness.episodes.supervisor import check_loop
    from pathways_chaos.harness.errors import ChaosConfigError

    # Every input is checked before JAX starts.
    apply_deadline_arguments(args)
    if args.log is not None:
        from pathways_chaos.harness.engine.owned_paths import check_appendable

        check_appendable(args.log, what="--log")
    topology = SliceTopology.parse(args.topology)
    schedule = parse_schedule(args.schedule)
    check_schedule_fits(schedule, topology.num_slices, kubernetes=False)
    options = _loop_options(args.option)
    request_cpu_devices(topology.device_count)
    quiet_libraries()
    problem = check_loop(args.loop, "--loop")  # loaded in a child: one line, before any run
    if problem is not None:
        raise ChaosConfigError(problem)
    from pathways_chaos.harness.properties.loop import LoopTarget, play_target

    target = LoopTarget(args.loop, tuple(sorted(options.items())), str(args.topology))
    baseline, _ = play_target(target, "", None)
    # Without --log the log lives only until the loop's output is shown.
    scratch = None
    if args.log is None:
        scratch = tempfile.TemporaryDirectory(prefix="pathways-chaos-replay-")
    log = args.log if scratch is None else Path(scratch.name) / "episode.jsonl"
    outcome, _ = play_target(target, schedule.to_text(), list(baseline.events), log)
    verdict = outcome.verdict
    print(f"replay: {args.topology} fake cluster, loop {args.loop}")
    print(f"schedule: {schedule.to_text() or '(none)'}")
    if not baseline.result.completed:
        print(f"the fault-free run did not complete: {baseline.result.error}")
    for e in outcome.of_kind("run_end"):
        why = e.get("error") or ""
        print(f"run {e['run']}: {e['status']} {why}".rstrip())
    print(verdict.summary())
    if args.log is not None:
        print(f"event log: {args.log}")
    with scratch or contextlib.nullcontext():  # read before a temporary folder goes
        print_loop_output(log, verdict.word != "SURVIVED", temporary=scratch is not None)
    print(f"verdict: {'survived' if verdict.word == 'SURVIVED' else verdict.word}")
    return verdict.exit_code


if __name__ == "__main__":
    sys.exit(replay_main(sys.argv[1:]))
