"""What watching costs at the size of a real job (issue 33), printed as one JSON object.

The sample loop's structure (``bench/scale_loop.py``: Manager, Snapshotter, ElasticIterator, a
jitted momentum step on parameters sharded over the ``model`` axis) with a model of 1M, 10M
and 100M float32 parameters (the state holds as many again in the momentum), fault-free on the
fake 4x2 cluster, each size played side by side in this one run:

- **unwatched**: the loop called in a child process of its own (``python bench_scale.py
  --unwatched``) on the same fake cluster, no observer;
- **watched**: ``play_loop`` as the chaos suite plays it (a supervised child, the black-box
  observer and the lineage recording on); the second watched run is judged against the first
  (the final-state comparison included), as a scenario against its fault-free baseline;
- **watched_no_lineage** (``--no-lineage-too``): the same with ``lineage=False``.

Runs alternate (watched, unwatched, ...) so a load that changes over the run weighs on both;
``paired_ratio_median`` is the median of each round's watched over unwatched, and
``unwatched_spread`` the slowest unwatched run over the fastest: the machine's own noise.
Per size: the loop's wall seconds (median; for a watched run from its ``run_start`` event to
the ``returned_wall`` of its ``run_end``, as the unwatched run times the call) and their ratio;
``run_s`` and ``run_ratio_to_unwatched`` to the ``run_end`` event (saves settled and the final
state's files written for the comparison included), the episode's whole wall
time in this process (child start and judging included), the peak resident memory of this
judging process during the watched episodes (``VmHWM``, reset before each) and of each child
(``peak_rss_bytes`` of ``child_exit``), the event log's size in bytes, the value files' size,
and whether the log holds any state value (it must not).

With ``--every-save-too``, also **unwatched_every_save**: the unwatched loop waiting for each save
before the next. The Snapshotter skips a save while its last is still queued, which on CPU
devices happens when a copy outlasts the steps between saves (``saves_skipped_each``); a
watched run never skips one (the observer waits, so every run of a loop saves the same steps
and the verdict does not depend on thread timing), so this is the run that does the same work.

Usage: python bench/bench_scale.py [--sizes 1e6,1e7,1e8] [--rounds N] [--no-lineage-too]
       [--every-save-too] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LOOP = f"{HERE / 'scale_loop.py'}:train"
TOPOLOGY = "4x2"
#: Steps per size: the 100M model only for a few (each of its steps moves about 1.6 GB).
STEPS = {1_000_000: (24, 4), 10_000_000: (12, 4), 100_000_000: (5, 2)}


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _reset_peak() -> None:
    """Resets this process's ``VmHWM`` to its current RSS (Linux >= 4.0)."""
    Path("/proc/self/clear_refs").write_text("5")


def _options(params: int) -> dict[str, int]:
    final_step, interval = STEPS.get(params, (12, 4))
    return {"params": params, "final_step": final_step, "snapshot_interval": interval}


def unwatched_child(raw: str) -> None:
    """The loop in this process, on the fake cluster, nothing watching: prints its figures."""
    spec = json.loads(raw)
    from pathways_chaos.harness.engine.topology import SliceTopology, request_cpu_devices

    request_cpu_devices(SliceTopology.parse(TOPOLOGY).device_count)
    from pathways_chaos.harness.engine import compilation_cache
    from pathways_chaos.harness.engine.clock import FakeClock
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.episodes.loop_episode import load_loop

    compilation_cache.enable()  # as the watched child does
    loop = load_loop(LOOP)
    with FakeCluster(SliceTopology.parse(TOPOLOGY), clock=FakeClock()) as cluster:
        t0 = time.perf_counter()
        state = loop(devices=list(cluster.devices), **spec["options"])
        seconds = time.perf_counter() - t0
    print(json.dumps({"loop_s": seconds, "child_peak_rss_bytes": _status_kib("VmHWM") * 1024}))
    del state


def play_unwatched(params: int, every_save: bool = False) -> dict[str, Any]:
    t0 = time.perf_counter()
    options: dict[str, Any] = _options(params)
    if every_save:
        options["join_before_save"] = True
    done = subprocess.run(
        [sys.executable, __file__, "--unwatched", json.dumps({"options": options})],
        capture_output=True,
        text=True,
        check=True,
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["episode_s"] = time.perf_counter() - t0
    # The Snapshotter skips a save while its last is still queued (its worker's timing).
    out["saves_skipped"] = done.stderr.count("Skipping snapshot")
    return out


def play_watched(
    params: int, folder: Path, lineage: bool, baseline: list[dict[str, Any]] | None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from pathways_chaos.harness.play import play_loop

    folder.mkdir(parents=True)
    log = folder / "episode.jsonl"
    _reset_peak()
    rss0 = _status_kib("VmRSS") * 1024
    t0 = time.perf_counter()
    outcome = play_loop(
        LOOP,
        options=_options(params),
        baseline=baseline,
        log_path=log,
        checkpoint_dir=folder / "ckpt",
        lineage=lineage,
    )
    episode_s = time.perf_counter() - t0
    events = outcome.events
    kinds = {e["kind"]: e for e in events}  # the last of each kind
    start, end, exit_ = kinds["run_start"], kinds["run_end"], kinds["child_exit"]
    final = end.get("final_state") or {}
    values = folder / "episode.child" / "values"
    row = {
        # The loop's part: from its run's start to its return (the unwatched run's measure);
        # settling its saves and writing its final state for the comparison come after.
        "loop_s": end.get("returned_wall", end["wall"]) - start["wall"],
        "run_s": end["wall"] - start["wall"],
        "episode_s": episode_s,
        "completed": outcome.result.completed,
        "final_state_judged": "final-state" not in outcome.verdict.not_judged,
        "verdict_ok": outcome.verdict.ok if baseline is not None else None,
        "parent_peak_rss_bytes": _status_kib("VmHWM") * 1024,
        "parent_rss_before_bytes": rss0,
        "child_peak_rss_bytes": exit_.get("peak_rss_bytes"),
        "log_bytes": log.stat().st_size,
        "value_files_bytes": sum(f.stat().st_size for f in values.rglob("*") if f.is_file()),
        "log_holds_values": any("values" in leaf for leaf in final.values()),
        "events": len(events),
        "exec_events": sum(e["kind"] == "exec" for e in events),
    }
    return row, events


def bench_size(params: int, rounds: int, root: Path, modes: list[str]) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    baselines: dict[str, list[dict[str, Any]] | None] = {m: None for m in modes}
    for r in range(rounds):
        order = modes if r % 2 == 0 else list(reversed(modes))
        for mode in order:
            if mode.startswith("unwatched"):
                runs[mode].append(play_unwatched(params, every_save=mode != "unwatched"))
                continue
            folder = root / f"{params}-{mode}-{r}"
            row, events = play_watched(params, folder, mode == "watched", baselines[mode])
            baselines[mode] = baselines[mode] or events
            runs[mode].append(row)
    model = _actual_params(params)
    out: dict[str, Any] = {
        "model_params": model,
        "state_bytes": 8 * model,  # float32 parameters and as many in the momentum
        "options": _options(params),
    }
    base = statistics.median(r["loop_s"] for r in runs["unwatched"])
    for mode in modes:
        rows = runs[mode]
        entry: dict[str, Any] = {
            "loop_s": round(statistics.median(r["loop_s"] for r in rows), 3),
            "loop_s_each": [round(r["loop_s"], 3) for r in rows],
            "episode_s_each": [round(r["episode_s"], 2) for r in rows],
            "child_peak_rss_mib": max(_mib(r["child_peak_rss_bytes"]) for r in rows),
        }
        if mode.startswith("unwatched"):
            entry["saves_skipped_each"] = [r["saves_skipped"] for r in rows]
        if mode == "unwatched_every_save":
            entry["ratio_to_unwatched"] = round(entry["loop_s"] / base, 3)
        if not mode.startswith("unwatched"):
            entry["ratio_to_unwatched"] = round(entry["loop_s"] / base, 3)
            entry.update(_paired(rows, runs["unwatched"]))
            entry["run_s"] = round(statistics.median(r["run_s"] for r in rows), 3)
            entry["run_ratio_to_unwatched"] = round(entry["run_s"] / base, 3)
            entry["parent_peak_rss_mib"] = max(_mib(r["parent_peak_rss_bytes"]) for r in rows)
            entry["parent_rss_before_mib"] = min(_mib(r["parent_rss_before_bytes"]) for r in rows)
            entry["parent_growth_over_state"] = round(
                max(r["parent_peak_rss_bytes"] - r["parent_rss_before_bytes"] for r in rows)
                / out["state_bytes"],
                2,
            )
            entry["parent_peak_over_state"] = round(
                max(r["parent_peak_rss_bytes"] for r in rows) / out["state_bytes"], 2
            )
            entry["log_bytes"] = max(r["log_bytes"] for r in rows)
            entry["value_files_bytes"] = max(r["value_files_bytes"] for r in rows)
            entry["log_holds_values"] = any(r["log_holds_values"] for r in rows)
            entry["events"] = max(r["events"] for r in rows)
            entry["exec_events"] = max(r["exec_events"] for r in rows)
            entry["completed"] = all(r["completed"] for r in rows)
            entry["judged_verdict_ok"] = [
                r["verdict_ok"] for r in rows if r["verdict_ok"] is not None
            ]
        out[mode] = entry
    if "unwatched_every_save" in out:  # the observer's own cost, with the same saves taken
        every = out["unwatched_every_save"]["loop_s"]
        for mode in modes:
            if not mode.startswith("unwatched"):
                out[mode]["ratio_to_unwatched_every_save"] = round(out[mode]["loop_s"] / every, 3)
    return out


def _paired(rows: list[dict[str, Any]], unwatched: list[dict[str, Any]]) -> dict[str, Any]:
    """Each round's watched run over the unwatched run beside it (a load that drifts over the
    run weighs on both of a pair), and how far two unwatched runs of the same loop differ here:
    a ratio inside that spread is this machine's noise, not watching's cost."""
    pairs = [w["loop_s"] / u["loop_s"] for w, u in zip(rows, unwatched, strict=False)]
    alone = [u["loop_s"] for u in unwatched]
    return {
        "paired_ratio_median": round(statistics.median(pairs), 3),
        "paired_ratios": [round(r, 3) for r in pairs],
        "unwatched_spread": round(max(alone) / min(alone), 3),
    }


def _actual_params(params: int) -> int:
    sys.path.insert(0, str(HERE))
    from scale_loop import FEATURES, hidden_for

    hidden = hidden_for(params)
    return hidden * (FEATURES + 2)


def _mib(n: int | None) -> float:
    return -1.0 if n is None else round(n / (1 << 20), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1e6,1e7,1e8")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-lineage-too", action="store_true")
    parser.add_argument(
        "--every-save-too",
        action="store_true",
        help="also the unwatched loop waiting for each save before the next (never skipping "
        "one, as the watched run does for a verdict that does not depend on thread timing)",
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--unwatched", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.unwatched is not None:
        unwatched_child(args.unwatched)
        return
    from pathways_chaos.harness.episodes import child_limits

    # The 100M model's child holds its state, a snapshot and the host copy it returns.
    child_limits.set_default_limits(child_limits.ChildLimits(memory_bytes=20 * child_limits.GIB))
    modes = ["watched", "unwatched"] + (["watched_no_lineage"] if args.no_lineage_too else [])
    modes += ["unwatched_every_save"] if args.every_save_too else []
    result: dict[str, Any] = {"bench": "scale", "loop": "bench/scale_loop.py:train"}
    result["topology"] = TOPOLOGY
    result["rounds"] = args.rounds
    result["sizes"] = {}
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        for raw in args.sizes.split(","):
            params = int(float(raw))
            rounds = max(args.rounds, 2)  # the second watched run is the judged one
            t0 = time.perf_counter()
            result["sizes"][f"{params:.0e}"] = row = bench_size(params, rounds, Path(tmp), modes)
            row["size_wall_s"] = round(time.perf_counter() - t0, 1)
            print(json.dumps({f"{params:.0e}": row}), file=sys.stderr, flush=True)
    result["targets"] = {"ratio": 1.05, "parent_peak_over_state": 2.0, "log_bytes_100M": 1 << 20}
    result["machine"] = {"cpus": os.cpu_count(), "load_1min": round(os.getloadavg()[0], 2)}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
