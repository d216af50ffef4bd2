"""Black-box recording figures for a user's own loop, printed as one JSON object.

- recording_overhead: the sample user loop's fault-free run on the fake cluster, bare and
  watched by the black-box observer (writing its JSONL log), alternated in one process after a
  warm-up; medians and their ratio (target <= 1.10x); and the full episode beside them (the
  fake clock moving, so the monitor's health polls run too).
- first_fault: time from starting ``pytest -m chaos --chaos-loop=...`` (one loop scenario,
  which first makes the fault-free run it compares with) to the first fault in the loop.

Usage: python bench/bench_blackbox.py [--rounds N] [--no-pytest]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parents[1]
LOOP = "pathways_chaos.harness.reference.user_loop:main"


def recording_overhead(rounds: int) -> dict[str, Any]:
    from pathways_chaos.harness.engine.topology import SliceTopology, request_cpu_devices

    topology = SliceTopology(4, 2)
    request_cpu_devices(topology.device_count)
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.episodes.loop_episode import load_loop, run_loop_episode

    loop = load_loop(LOOP)
    bare: list[float] = []
    watched: list[float] = []
    episode: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, FakeCluster(topology) as cluster:

        def run_bare() -> float:
            t = time.perf_counter()
            loop(devices=cluster.devices)
            return time.perf_counter() - t

        def run_watched(i: int) -> float:
            # step_seconds=0: the fake clock stays still as in the bare run, so no health
            # polls run in either and only the recording is measured.
            t = time.perf_counter()
            run_loop_episode(
                cluster, loop, log_path=Path(tmp) / f"watched-{i}.jsonl", step_seconds=0
            )
            return time.perf_counter() - t

        def run_episode(i: int) -> float:
            t = time.perf_counter()
            run_loop_episode(cluster, loop, log_path=Path(tmp) / f"episode-{i}.jsonl")
            return time.perf_counter() - t

        run_bare()  # warm-up: compiles, the Snapshotter's first copies
        run_watched(-1)
        for i in range(rounds):
            bare.append(run_bare())
            watched.append(run_watched(i))
            episode.append(run_episode(i))
        events = sum(1 for _ in (Path(tmp) / "watched-0.jsonl").open())
    b, w = statistics.median(bare), statistics.median(watched)
    return {
        "loop": LOOP,
        "rounds": rounds,
        "bare_s": [round(x, 4) for x in bare],
        "watched_s": [round(x, 4) for x in watched],
        "bare_median_s": round(b, 4),
        "watched_median_s": round(w, 4),
        "ratio": round(w / b, 3),
        "target_ratio": 1.10,
        "episode_s": [round(x, 4) for x in episode],
        "episode_median_s": round(statistics.median(episode), 4),
        "episode_note": "the full episode also moves the fake clock one second a batch, so "
        "pathwaysutils' monitor polls the slices' health every 10 batches, as in production",
        "events_per_episode": events,
    }


def first_fault() -> dict[str, Any]:
    from pathways_chaos.harness.engine.recorder import read_log

    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp) / "logs"
        started = time.time()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                str(ROOT / "suites/chaos/test_user_loop.py"),
                "-m",
                "chaos",
                "-k",
                "every_slice_down_code and data_loss",
                "-q",
                "-p",
                "no:cacheprovider",
                f"--chaos-loop={LOOP}",
                f"--chaos-log-dir={logs}",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=ROOT,
        )
        (log,) = logs.rglob("episode-*.jsonl")
        events = read_log(log)
    epoch = events[0]["epoch"]
    fault = next(e for e in events if e["kind"] == "fault")
    return {
        "pytest_exit": out.returncode,
        "start_to_first_fault_s": round(epoch + fault["wall"] - started, 3),
        "episode_start_to_fault_s": round(fault["wall"], 3),
        "note": "includes the fault-free run of the same loop the verdict compares with",
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-pytest", action="store_true")
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)
    out: dict[str, Any] = {"recording_overhead": recording_overhead(args.rounds)}
    if not args.no_pytest:
        out["first_fault"] = first_fault()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
