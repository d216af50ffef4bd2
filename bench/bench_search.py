"""Sharded-search figures (issue 24), printed as one JSON object.

- throughput: schedules per minute with 1, 2, 4 and 8 shards, each shard a local process (as
  Kubernetes would run an Indexed Job's Pods, JOB_COMPLETION_INDEX set), all searching the
  dataset family on the reference trainer for the same budget, on disjoint seeds. Per minute
  of the whole run's wall time (from the first process started to the last one ended: JAX
  start-up included, as a Job pays it), and per shard.
- replay: a 4-shard search of a broken trainer
  (mutants.IteratorRestoredFromCurrentPosition) with one Redis example database: when the
  shard that found it had the failure (found, then shrunk), and how long a later run took
  to replay it first: from its process start (JAX start-up included) and from its search's start.

On 2 cores the throughput is sublinear beyond 2 shards: each shard is a process whose
episodes keep a core busy (XLA's CPU client and the Python loop), so 4 or 8 shards time-share
2 cores; each also pays its own start-up (the interpreter, JAX, the compilation cache read:
``median_first_episode_s`` grows from about 3 s alone to about 8 s with 8 shards), which is a
larger share of a short budget. The machine is shared (``load_average_before`` about 10 on 2
cores): an earlier run of the same bench, under heavier load from other work, measured 257,
274, 144 and 45 schedules a minute for 1, 2, 4 and 8 shards; more processes than cores only
lose there. On a cluster each shard has its own Pod and cores: there the figure grows with the
shards until the database or the merge is the limit.

Usage: python bench/bench_search.py [--budget 40] [--shards 1,2,4,8] [--out FILE]
(bench/results/issue-24-search.json: --budget 40 on 2 shared cores; needs redis-server)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MUTANT = "pathways_chaos.harness.reference.mutants:IteratorRestoredFromCurrentPosition"


def _search(args: list[str], index: int | None = None) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.pop("JOB_COMPLETION_INDEX", None)
    if index is not None:
        env["JOB_COMPLETION_INDEX"] = str(index)
    return subprocess.Popen(
        [sys.executable, "-m", "pathways_chaos.harness.cli.main", "search", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_all(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        _out, err = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise SystemExit(f"a shard failed ({p.returncode}): {err[-2000:]}")


def throughput(shards: int, budget: float, root: Path) -> dict[str, Any]:
    out = root / f"throughput-{shards}"
    args = ["--shards", str(shards), "--properties", "dataset", "--out", str(out)]
    args += ["--database", str(root / f"db-{shards}"), "--budget", str(budget), "--seed", "0"]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    _wait_all([_search(args, i) for i in range(shards)])
    wall = time.perf_counter() - t0
    reports = [json.loads((out / f"shard-{i}-of-{shards}.json").read_text()) for i in range(shards)]
    schedules = sum(r["schedules"] for r in reports)
    firsts = []
    for r in reports:
        text = (out / r["episodes"]).read_text().splitlines()
        if text:  # the first episode's end, from the shard's search start (warm-up included)
            firsts.append(json.loads(text[0])["t"])
    return {
        "shards": shards,
        "budget_s": budget,
        "wall_s": round(wall, 1),
        "schedules": schedules,
        "schedules_per_minute": round(schedules / wall * 60, 1),
        "per_shard_per_minute": round(schedules / wall * 60 / shards, 1),
        "median_first_episode_s": round(statistics.median(firsts), 1) if firsts else None,
        "load_average_before": round(load, 1),  # other work on the shared machine
    }


def _redis(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    server = shutil.which("redis-server")
    if server is None:
        raise SystemExit("redis-server is not installed: ci/bootstrap.sh --redis")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
    )
    import redis

    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
    return proc, f"redis://127.0.0.1:{port}/0"


def replay(root: Path) -> dict[str, Any]:
    proc, url = _redis(root)
    try:
        out = root / "replay-1"
        common = ["--trainer", MUTANT, "--redis", url, "--rounds", "3"]
        _wait_all(
            [
                _search(
                    [
                        "--shards",
                        "4",
                        "--properties",
                        "snapshot,dataset,mesh",
                        "--out",
                        str(out),
                        *common,
                        "--seed",
                        "0",
                        "--examples-per-round",
                        "4",
                        "--budget",
                        "600",
                    ],
                    i,
                )
                for i in range(4)
            ]
        )
        found = json.loads((out / "shard-1-of-4.json").read_text())["findings"][0]
        lines = [json.loads(x) for x in (out / "shard-1-of-4.jsonl").read_text().splitlines()]
        first_fail = next(e for e in lines if not e["ok"])
        last_fail = [e for e in lines if not e["ok"]][-1]
        t0 = time.perf_counter()
        again_out = root / "replay-2"
        p = _search(
            [
                "--shard",
                "0/1",
                "--properties",
                "dataset",
                "--out",
                str(again_out),
                *common,
                "--seed",
                "987654321",
                "--examples-per-round",
                "4",
            ]
        )
        first_line = again_out / "shard-0-of-1.jsonl"
        seen = None
        while p.poll() is None and seen is None:
            if first_line.exists() and first_line.read_text().strip():
                seen = time.perf_counter() - t0
            time.sleep(0.02)
        _wait_all([p])
        seen = seen if seen is not None else time.perf_counter() - t0
        first = json.loads(first_line.read_text().splitlines()[0])
        return {
            "finding": found["schedule"],
            "found_by_shard": found["shard"],
            "found_after_s": first_fail["t"],
            "shrunk_after_s": last_fail["t"],
            "examples_to_find": found["examples_to_find"],
            "shrink_examples": found["shrink_examples"],
            "replayed_first": first["schedule"] == found["schedule"] and not first["ok"],
            "replayed_from_database": first["from_database"],
            "replay_after_process_start_s": round(seen, 2),
            "replay_after_search_start_s": first["t"],
        }
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=float, default=40.0)
    parser.add_argument("--shards", default="1,2,4,8")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        root = Path(tmp)
        result = {
            "machine": f"{os.cpu_count()} cores (shared)",
            "throughput": [throughput(int(n), args.budget, root) for n in args.shards.split(",")],
            "replay": replay(root),
        }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
