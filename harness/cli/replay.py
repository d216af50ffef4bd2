"""``pathways-chaos replay``: one episode from its command-line form, judged like the property.

A property failure prints this command with the shrunk schedule; pasting it reproduces the
failure in a new process (exit 1), or shows the fix (exit 0).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from pathways_chaos.harness.cli.quiet import quiet_libraries
from pathways_chaos.harness.engine.episode_spec import EpisodeSpec


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pathways-chaos replay", description="replay one episode and print the verdict"
    )
    for field in dataclasses.fields(EpisodeSpec):
        flag = "--" + field.name.replace("_", "-")
        if field.type in ("bool", bool):
            parser.add_argument(flag, action="store_true", default=field.default)
        elif field.type in ("int", int):
            parser.add_argument(flag, type=int, default=field.default)
        else:
            parser.add_argument(flag, default=field.default)
    from pathways_chaos.harness.cli.main import add_deadline_arguments

    add_deadline_arguments(parser)
    return parser


def replay_main(argv: list[str]) -> int:
    """Runs the episode; prints the schedule, outcome and every violation; 1 when it fails."""
    from pathways_chaos.harness.errors import ChaosError

    args = build_parser().parse_args(argv)
    try:
        from pathways_chaos.harness.cli.main import apply_deadline_arguments

        apply_deadline_arguments(args)
        fields = {f.name for f in dataclasses.fields(EpisodeSpec)}
        spec = EpisodeSpec(**{k: v for k, v in vars(args).items() if k in fields})
        from pathways_chaos.harness.engine.topology import request_cpu_devices

        request_cpu_devices(spec.slices * spec.devices_per_slice)  # before JAX starts
        quiet_libraries()
        from pathways_chaos.harness.engine.episode_spec import judge, run_spec

        outcome = run_spec(spec)
    except ChaosError as error:
        print(f"pathways-chaos replay: error: {error}", file=sys.stderr)
        return error.exit_code
    except OSError as error:
        print(f"pathways-chaos replay: error: {error.strerror or error}", file=sys.stderr)
        return 2
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


if __name__ == "__main__":
    sys.exit(replay_main(sys.argv[1:]))
