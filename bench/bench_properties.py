"""Property-suite figures, printed as one JSON object.

- stateful: fault schedules per minute for the end-to-end state machine (each example is one
  generated schedule run as one episode and judged by the oracle), warm: after a warm-up that
  compiles the usual mesh shapes once; also the cold first minute's rate.
- recompiles per example: the trainer's jit cache misses (``mesh`` events with
  ``recompile``), and real XLA compiles (not served by the compilation cache) per example.
- first/last 50: the warm rate over the first and the last 50 schedules (no decline: nothing
  accumulates from episode to episode).
- ci_profile_wall_s: ``pytest suites/properties`` with the ci profile, in a new process.
- features: the share of stateful episodes that include each event (a loss, a repair, an
  in-loop scale-up, a mesh shrink, a failure or a loss while a save is in flight, a callback
  error), and the examples hypothesis discarded per 100 generated (no episode runs for them).
- first_failure: for each blind-spot mutant of issue 12, the examples and seconds its named
  property needed to fail (derandomized, no shrinking).

Usage: python bench/bench_properties.py [--examples N] [--no-suite] [--no-mutants] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def stateful_rate(examples: int, warmup: int) -> dict[str, Any]:
    import jax
    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test

    from pathways_chaos.harness import properties

    compiles: list[float] = []

    def on_duration(event: str, duration: float, **_: Any) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(duration)

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    episodes: list[float] = []
    spans: list[tuple[float, float]] = []  # (start, end) of every episode
    from pathways_chaos.harness.properties import stateful

    real_run_spec = stateful.run_spec

    played: list[tuple[Any, dict[str, Any]]] = []  # every schedule, to replay the same ones

    def timed_run_spec(spec: Any, **kwargs: Any) -> Any:
        played.append((spec, kwargs))
        t0 = time.perf_counter()
        try:
            return real_run_spec(spec, **kwargs)
        finally:
            t1 = time.perf_counter()
            episodes.append(t1 - t0)
            spans.append((t0, t1))

    stateful.run_spec = timed_run_spec  # type: ignore[assignment]

    def run(n: int) -> tuple[float, int, int, properties.ExampleCounter]:
        counter = properties.ExampleCounter()
        machine = properties.episode_machine(counter=counter)
        before_episodes, before_compiles = len(episodes), len(compiles)
        t0 = time.perf_counter()
        run_state_machine_as_test(
            machine,
            # The mutant table's search, unseeded: throughput over fresh schedules.
            settings=settings(properties.mutant_search(max_examples=n), derandomize=False),
        )
        return (
            time.perf_counter() - t0,
            len(episodes) - before_episodes,
            len(compiles) - before_compiles,
            counter,
        )

    cold_s, cold_n, cold_compiles, _ = run(warmup)
    first_warm = len(spans)
    warm_s, warm_n, warm_compiles, warm_counter = run(examples)
    warm_spans = spans[first_warm:]

    # Decline, free of the schedule mix: the same 50 schedules, timed before and after another
    # `examples` of search in the same process (caches, threads, snapshots and memory all grow
    # there if anything leaks).
    same = played[first_warm : first_warm + 50]

    def replay_rate() -> float:
        t0 = time.perf_counter()
        for spec, kwargs in same:
            with contextlib.suppress(Exception):  # a failing schedule costs its time, too
                real_run_spec(spec, **kwargs)
        return round(len(same) / (time.perf_counter() - t0) * 60, 1)

    same_before = replay_rate()
    run(examples)
    same_after = replay_rate()

    def window_rate(window: list[tuple[float, float]]) -> float | None:
        if len(window) < 2:
            return None
        return round(len(window) / (window[-1][1] - window[0][0]) * 60, 1)

    from pathways_chaos.harness.engine.census import pinned_host_arrays
    from pathways_chaos.harness.engine.snapshotter_release import live_snapshotter_threads

    episodes_judged = len(warm_counter.features)
    generated = warm_counter.examples + warm_counter.discarded
    shares = {
        name: round(sum(name in f for f in warm_counter.features) / max(1, episodes_judged), 3)
        for name in properties.FEATURES
    }
    return {
        "episodes_judged": episodes_judged,
        "share_of_episodes_including": shares,
        "discarded_per_100_examples": round(100 * warm_counter.discarded / max(1, generated), 1),
        "episodes_run_for_discarded_examples": 0,  # teardown runs none while one is in flight
        "schedules_per_minute_warm": round(warm_n / warm_s * 60, 1),
        "schedules_per_minute_cold": round(cold_n / cold_s * 60, 1),
        "schedules_warm": warm_n,
        "wall_s_warm": round(warm_s, 2),
        "episode_median_s": round(statistics.median(episodes), 3),
        "episode_p90_s": round(sorted(episodes)[int(0.9 * (len(episodes) - 1))], 3),
        "trainer_recompiles_per_example": round(statistics.mean(warm_counter.recompiles), 2),
        "xla_compiles_per_example_warm": round(warm_compiles / max(1, warm_n), 2),
        "xla_compiles_per_example_cold": round(cold_compiles / max(1, cold_n), 2),
        "target_schedules_per_minute": 100,
        "schedules_per_minute_first_50": window_rate(warm_spans[:50]),
        "schedules_per_minute_last_50": window_rate(warm_spans[-50:]),
        "same_50_schedules_per_minute_before": same_before,
        "same_50_schedules_per_minute_after_another_run": same_after,
        "schedules_between_the_two_replays": examples,
        "live_snapshotter_threads_after": live_snapshotter_threads(),  # each one released
        "pinned_host_arrays_after": pinned_host_arrays(),
        "threads_after": threading.active_count(),
    }


def first_failures() -> dict[str, Any]:
    """Examples and seconds until each blind-spot mutant's property fails (seeded search)."""
    from pathways_chaos.harness import properties
    from pathways_chaos.harness.properties import ExampleCounter, PropertyFailure
    from pathways_chaos.harness.reference.mutants import CATALOGUE, spec_of

    search = properties.mutant_search(max_examples=40)
    out: dict[str, Any] = {}
    for entry in CATALOGUE:
        if entry.trainer.__name__ not in BLIND_SPOT_MUTANTS:
            continue
        counter = ExampleCounter()
        t0 = time.perf_counter()
        caught = None
        try:
            properties.run_property(entry.caught_by, spec_of(entry.trainer), counter, search)
        except PropertyFailure as failure:
            caught = str(failure).splitlines()[1].strip()[:160]
        out[entry.trainer.__name__] = {
            "property": entry.caught_by,
            "judge": entry.judge,
            "examples_to_first_failure": counter.first_failure,
            "seconds_to_first_failure": round(time.perf_counter() - t0, 1),
            "message": caught,
        }
    return out


#: One mutant per blind spot of issue 12.
BLIND_SPOT_MUTANTS = (
    "StaleSnapshotRestore",
    "ScaleUpKeepsOldMesh",
    "IteratorNotCarriedAcrossScaleUp",
    "BatchFromTotalSlices",
    "RandomnessNotRestored",
    "CallbackErrorEscapes",
)


def ci_profile_wall() -> dict[str, Any]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "suites/properties", "-q", "-p", "no:logging"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    tail = proc.stdout.strip().splitlines()[-1:] or [""]
    return {
        "ci_profile_wall_s": round(time.perf_counter() - t0, 1),
        "ci_profile_exit": proc.returncode,
        "ci_profile_summary": tail[0],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--examples", type=int, default=150)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--no-suite", action="store_true")
    parser.add_argument("--no-mutants", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import logging

    from pathways_chaos.harness.engine.topology import request_cpu_devices

    request_cpu_devices(8)
    for name in ("pathwaysutils", "absl", "jax", "root"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    from pathways_chaos.harness.properties import enable_compilation_cache

    enable_compilation_cache()
    out: dict[str, Any] = {"cores": _cores(), "stateful": stateful_rate(args.examples, args.warmup)}
    if not args.no_mutants:
        out["first_failure"] = first_failures()
    if not args.no_suite:
        out.update(ci_profile_wall())
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    sys.exit(main())
