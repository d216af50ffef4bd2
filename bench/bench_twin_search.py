"""The nightly's shard curve on the twin (issue 34), printed as one JSON object.

What ``search --emit-job N`` prints (the JobSet of N shards and their merge) applied to the local
twin (a real API server and job controller, the JobSet stand-in, Pods run as processes) with 1, 2
and 4 shards, the example database a Redis Pod (``redis:7``, the host's redis-server), all in one
run:

- **throughput**: the reference trainer's ``dataset`` family for ``--budget`` seconds per shard
  (as ``bench_search.py`` runs it locally): schedules per minute over the JobSet's whole life
  (created to Completed: Pod start-up, JAX start-up and the merge included, as a team pays it),
  and per shard;
- **time to first failure**: a held broken loop
  (``user_loop_bugs:iterator_from_current_position``, its ``dataset`` family, no shrinking), the
  same seeds every run, a fresh database: seconds from the JobSet's creation to the first failing
  episode line any shard wrote, and to the JobSet's end (``Failed``, by its merge).

Usage: python bench/bench_twin_search.py [--budget 40] [--shards 1,2,4] [--out FILE]
(needs the local Kubernetes binaries and redis-server: ci/bootstrap.sh --kube --redis)
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BROKEN_LOOP = "pathways_chaos.harness.reference.user_loop_bugs:iterator_from_current_position"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _lines(folder: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in sorted(folder.glob("shard-*-of-*.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def _nightly(twin: Any, shards: int, *search_args: str) -> tuple[Any, float]:
    """The nightly ``pathways-chaos search --emit-job`` prints, created on the twin; and the
    ``perf_counter`` just before it was (its life starts there)."""
    import yaml

    from pathways_chaos.fixtures.twin.nightly import apply_nightly, emit_arguments, new_namespace

    command = [sys.executable, "-m", "pathways_chaos.harness.cli.main"]
    arguments = emit_arguments(shards, new_namespace(), *search_args)
    printed = subprocess.run([*command, *arguments], capture_output=True, text=True, check=True)
    jobset = yaml.safe_load(printed.stdout)
    t0 = time.perf_counter()
    return apply_nightly(twin, jobset), t0


def throughput(twin: Any, shards: int, budget: float, redis: str) -> dict[str, Any]:
    from pathways_chaos.fixtures.twin.nightly import wait_nightly

    load = os.getloadavg()[0]
    nightly, t0 = _nightly(
        twin, shards, "--properties", "dataset", "--budget", f"{budget:g}", "--seed", "0",
        "--redis", redis,
    )  # fmt: skip
    status = wait_nightly(twin, nightly, budget + 900)
    wall = time.perf_counter() - t0
    reports = [
        json.loads((nightly.results / f"shard-{i}-of-{shards}.json").read_text())
        for i in range(shards)
    ]
    schedules = sum(r["schedules"] for r in reports)
    return {
        "shards": shards,
        "budget_s": budget,
        "ended": status["terminalState"],
        "wall_s": round(wall, 1),
        "schedules": schedules,
        "schedules_per_minute": round(schedules / wall * 60, 1),
        "per_shard_per_minute": round(schedules / wall * 60 / shards, 1),
        "median_shard_search_s": round(statistics.median(r["wall_s"] for r in reports), 1),
        "load_average_before": round(load, 1),
    }


def first_failure(twin: Any, shards: int, redis: str) -> dict[str, Any]:
    from pathways_chaos.fixtures.twin.nightly import wait_nightly

    nightly, t0 = _nightly(
        twin, shards, "--loop", BROKEN_LOOP, "--properties", "dataset", "--budget", "300",
        "--seed", "11", "--rounds", "1", "--examples-per-round", "4", "--no-shrink",
        "--redis", redis,
    )  # fmt: skip
    seen: dict[str, float] = {}

    def poll() -> None:
        done = "first" in seen or not nightly.results.is_dir()
        if not done and any(not e["ok"] for e in _lines(nightly.results)):
            seen["first"] = time.perf_counter() - t0

    status = wait_nightly(twin, nightly, 1200, poll)
    lines = _lines(nightly.results)
    return {
        "shards": shards,
        "ended": status["terminalState"],
        "first_failure_s": round(seen["first"], 1) if "first" in seen else None,
        "ended_s": round(time.perf_counter() - t0, 1),
        "schedules": len(lines),
        "failing_schedules": sum(1 for e in lines if not e["ok"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=float, default=40.0)
    parser.add_argument("--shards", default="1,2,4")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import redis as redis_client
    from kubernetes import client

    from pathways_chaos.faults.watching import wait_for
    from pathways_chaos.fixtures.twin.nightly import redis_pod
    from pathways_chaos.fixtures.twin.twin import NodePool, Twin

    counts = [int(n) for n in args.shards.split(",")]
    with Twin([NodePool("cpu-np", 1)]) as twin:
        port = _port()
        client.CoreV1Api(twin.api).create_namespace({"metadata": {"name": "redis"}})
        twin.apply([redis_pod(port)], namespace="redis")
        db = redis_client.Redis(port=port)
        wait_for(lambda: _pings(db), 60, interval=0.2, what="the Redis Pod")
        url = f"redis://127.0.0.1:{port}/0"
        result: dict[str, Any] = {"machine": {"cpus": os.cpu_count()}, "throughput": []}
        for n in counts:
            db.flushall()
            result["throughput"].append(throughput(twin, n, args.budget, url))
            print(json.dumps(result["throughput"][-1]), flush=True)
        result["first_failure"] = []
        for n in counts:
            db.flushall()  # found, never replayed from an earlier night
            result["first_failure"].append(first_failure(twin, n, url))
            print(json.dumps(result["first_failure"][-1]), flush=True)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


def _pings(db: Any) -> bool:
    try:
        return bool(db.ping())
    except Exception:
        return False


if __name__ == "__main__":
    main()
