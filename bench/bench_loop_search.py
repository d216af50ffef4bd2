"""Loop-search figures (issue 21), printed as one JSON object.

- sample_loop: schedules per minute the stateful loop search runs on the sample loop (each
  schedule one episode of the loop, judged against its fault-free run), per minute of episodes
  and per minute of wall time (generation and the fault-free runs included), and the share of
  episodes with each event.
- first_failure: for each broken loop of tests/harness/properties/two_fault_loops.py (each needs two
  faults in order), the examples and seconds the derandomized stateful search needed to find
  it (the fault-free run excluded, no shrinking): the median of 3 runs of the same seed, and
  the schedule it failed on.

- reruns_kept: the same search (seed, examples) with the clean reruns and restore probes kept
  for later schedules and made anew each time, alternating, on the sample loop and on a loop
  whose batch scales with the slices (every loss changes its batch schedule, as in many real
  jobs): schedules per minute side by side, and how many reruns were made and reused.

Usage: python bench/bench_loop_search.py [--examples N] [--runs 3] [--out FILE] [--reruns-only]
(bench/results/issue-21-loop-search.json: --examples 60 --runs 3 on 2 shared cores)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SAMPLE = "pathways_chaos.harness.reference.user_loop:main"
LOOPS_FILE = "tests/harness/properties/two_fault_loops.py"
SCALING = "tests/harness/judging/loop_catalogue/correct/trainer_class.py:main"
TWO_FAULT_LOOPS = (
    "checkpoint_position_from_step",
    "mesh_cache_by_slice_count",
    "snapshot_step_after_resume",
)


def _setup() -> None:
    from pathways_chaos.harness.engine import compilation_cache
    from pathways_chaos.harness.engine.topology import request_cpu_devices

    request_cpu_devices(8)
    compilation_cache.enable()
    import logging

    from pathways_chaos.harness.cli.quiet import quiet_libraries

    quiet_libraries()
    logging.disable(logging.CRITICAL)  # pathwaysutils logs every elastic event


def sample_rate(examples: int) -> dict[str, Any]:
    from pathways_chaos.harness.properties.loop import LoopSearch, LoopTarget

    search = LoopSearch(LoopTarget(SAMPLE), database=None, seed=0, max_examples=examples)
    t0 = time.perf_counter()
    search.run("stateful")
    wall = time.perf_counter() - t0
    stats = search.stats.to_json()
    return {
        "loop": SAMPLE,
        "schedules": stats["schedules"],
        "failures": stats["failures"],
        "schedules_per_minute_of_episodes": stats["schedules_per_minute"],
        "schedules_per_minute_wall": round(stats["schedules"] / wall * 60, 1),
        "wall_s": round(wall, 1),
        "fault_free_runs_s": stats["baseline_s"],
        "fault_kinds": stats["fault_kinds"],
        "episode_shares": stats["episode_shares"],
    }


def reruns_kept(examples: int, rounds: int) -> dict[str, Any]:
    """Schedules per minute with the search's yardstick runs kept and made anew, alternating."""
    from pathways_chaos.harness.properties.loop import LoopSearch, LoopTarget

    out: dict[str, Any] = {}
    for loop in (SAMPLE, SCALING):
        for prop in ("mesh", "dataset"):
            rows: dict[str, list[dict[str, Any]]] = {"kept": [], "made_anew": []}
            for _ in range(rounds):
                for mode in rows:
                    search = LoopSearch(
                        LoopTarget(loop), database=None, seed=0, max_examples=examples
                    )
                    search.baseline()
                    search.yardsticks.keep = mode == "kept"
                    t0 = time.perf_counter()
                    search.run(prop)
                    wall = time.perf_counter() - t0
                    stats = search.stats.to_json()
                    rows[mode].append(
                        {
                            "schedules": stats["schedules"],
                            "failures": stats["failures"],
                            "wall_s": round(wall, 2),
                            "schedules_per_minute": round(stats["schedules"] / wall * 60, 1),
                            "reruns_made": stats["reruns_made"],
                            "reruns_reused": stats["reruns_reused"],
                        }
                    )
            kept = statistics.median(r["wall_s"] for r in rows["kept"])
            anew = statistics.median(r["wall_s"] for r in rows["made_anew"])
            out[f"{loop.rsplit('/', 1)[-1]} {prop}"] = {
                **rows,
                "speedup_kept_over_made_anew": round(anew / kept, 3),
            }
    return out


def first_failure(name: str, runs: int, examples: int) -> dict[str, Any]:
    from pathways_chaos.harness.properties.loop import LoopPropertyFailure, LoopSearch, LoopTarget
    from pathways_chaos.harness.properties.loop_schedules import ScheduleWriter

    class Timed(LoopSearch):
        found: tuple[float, int, str] | None = None
        started = 0.0

        def check(self, prop: str, writer: ScheduleWriter) -> None:
            try:
                super().check(prop, writer)
            except LoopPropertyFailure:
                if self.found is None:
                    elapsed = time.perf_counter() - self.started
                    self.found = (elapsed, self.stats.schedules, writer.text())
                raise

    results = []
    for _ in range(runs):
        search = Timed(
            LoopTarget(f"{LOOPS_FILE}:{name}"),
            database=None,
            seed=0,
            max_examples=examples,
            shrink=False,
        )
        search.baseline()  # the fault-free run is the session's, not the search's
        search.started = time.perf_counter()
        with contextlib.suppress(LoopPropertyFailure):
            search.run("stateful")
        results.append(search.found)
    found = [r for r in results if r is not None]
    if len(found) < len(results):
        return {"found": f"{len(found)} of {len(results)} runs within {examples} examples"}
    return {
        "seconds_median": round(statistics.median(r[0] for r in found), 2),
        "seconds": [round(r[0], 2) for r in found],
        "examples": found[0][1],
        "schedule": found[0][2],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=60, help="sample-loop schedules")
    parser.add_argument("--runs", type=int, default=3, help="runs per two-fault loop")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    parser.add_argument("--reruns-only", action="store_true", help="only the reruns_kept rows")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of reruns_kept per mode")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    _setup()
    import os

    os.chdir(REPO)  # the two-fault loops are loaded by path, as --chaos-loop would
    out: dict[str, Any] = {"reruns_kept": reruns_kept(min(args.examples, 16), args.rounds)}
    if not args.reruns_only:
        out["sample_loop"] = sample_rate(args.examples)
        out["first_failure"] = {
            name: first_failure(name, args.runs, 60) for name in TWO_FAULT_LOOPS
        }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
