"""Episode figures, printed as one JSON object.

- episode_ratio: a 4x2 episode of 100 steps with 3 faults (down, down, rejoin) against the
  same episode without faults, side by side in this process, fake clock (no real sleeping).
- idle_overhead: the reference step on a 4x2 mesh with a fake cluster installed but idle,
  against bare JAX on the same mesh (interleaved rounds, median of rounds).
- scale: the faulted episode at 2, 8, 32 and 64 slices of 4 devices, one process per size
  (the CPU device count is fixed when JAX starts).

Usage: python bench/bench_episode.py [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

FAULTS = "data_loss@step=30:slice=2,data_loss@step=50:slice=1,repair@step=60:slice=2"
#: Pause-and-resume: the same losses, each slice back after 2 health polls; no mesh changes.
PAUSE_FAULTS = (
    "data_loss@step=30:slice=2:repair_after_polls=2,data_loss@step=50:slice=1:repair_after_polls=2"
)
#: For the scale runs: also valid on 2 slices (down, rejoin, down).
SCALE_FAULTS = "data_loss@step=30:slice=1,repair@step=40:slice=1,data_loss@step=60:slice=0"

_COMPILE_SECONDS: list[float] = []


def _count_compiles() -> None:
    import jax

    def listener(event: str, duration: float, **_: Any) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            _COMPILE_SECONDS.append(duration)

    jax.monitoring.register_event_duration_secs_listener(listener)


def episode_seconds(
    num_slices: int, per_slice: int, steps: int, schedule: str, mode: str = "resize"
) -> dict[str, Any]:
    from pathways_chaos.faults.model import parse_schedule
    from pathways_chaos.harness.engine.episode import run_episode
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology
    from pathways_chaos.harness.judging import oracle
    from pathways_chaos.harness.reference.trainer import TrainerConfig

    config = TrainerConfig(mode=mode, final_step=steps, global_batch=4 * num_slices)
    compiled_before = sum(_COMPILE_SECONDS)
    t0 = time.perf_counter()
    with FakeCluster(SliceTopology(num_slices, per_slice)) as fake:
        result = run_episode(fake, config, parse_schedule(schedule))
    wall = time.perf_counter() - t0
    verdict = oracle.check(result.events, replay=False)
    return {
        "wall_s": round(wall, 3),
        "compile_s": round(sum(_COMPILE_SECONDS) - compiled_before, 3),
        "clock_s": result.events[-1]["t"],
        "survived": verdict.ok,
        "wasted_steps": verdict.wasted_steps,
        "recompiles": sum(1 for e in result.events if e["kind"] == "mesh" and e["recompile"]),
    }


def idle_overhead(rounds: int, steps: int) -> dict[str, Any]:
    import functools

    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology
    from pathways_chaos.harness.reference import model
    from pathways_chaos.harness.reference.data import SyntheticData

    devices = sorted(jax.devices(), key=lambda d: d.id)[:8]
    mesh = Mesh(np.array(devices).reshape(4, 2), ("replica", "data"))
    rep = NamedSharding(mesh, PartitionSpec())
    dat = NamedSharding(mesh, PartitionSpec(("replica", "data")))
    step = jax.jit(functools.partial(model.train_step), out_shardings=(rep, None))
    batch = SyntheticData().batch(list(range(16)))
    x, y = jax.device_put(batch["x"], dat), jax.device_put(batch["y"], dat)

    def loop() -> float:
        state = jax.device_put(model.init_state(0), rep)
        t0 = time.perf_counter()
        for _ in range(steps):
            state, loss = step(state, x, y)
            float(loss)
        return (time.perf_counter() - t0) / steps

    loop()  # compile
    bare, installed = [], []
    for _ in range(rounds):
        bare.append(loop())
        with FakeCluster(SliceTopology(4, 2)):
            installed.append(loop())
    b, i = statistics.median(bare), statistics.median(installed)
    return {
        "bare_step_ms": round(b * 1e3, 4),
        "installed_step_ms": round(i * 1e3, 4),
        "ratio": round(i / b, 4),
        "target": 1.05,
    }


def one_size(num_slices: int, steps: int) -> dict[str, Any]:
    from pathways_chaos.harness.engine.topology import request_cpu_devices

    request_cpu_devices(num_slices * 4)
    return episode_seconds(num_slices, 4, steps, SCALE_FAULTS)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer rounds and sizes")
    parser.add_argument("--out", default=None)
    parser.add_argument("--one-size", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    _quiet()
    _count_compiles()
    if args.one_size:
        print(json.dumps(one_size(args.one_size, args.steps)))
        return 0

    from pathways_chaos.harness.engine.topology import request_cpu_devices

    request_cpu_devices(8)
    out: dict[str, Any] = {"machine": {"cores": _cores()}}
    episode_seconds(4, 2, 5, "")  # warm imports and the first compile for both
    rounds = 2 if args.quick else 5
    for mode, faults in (("resize", FAULTS), ("pause_resume", PAUSE_FAULTS)):
        faulted, clean = [], []
        for _ in range(rounds):
            clean.append(episode_seconds(4, 2, args.steps, "", mode))
            faulted.append(episode_seconds(4, 2, args.steps, faults, mode))
        fw = statistics.median(r["wall_s"] for r in faulted)
        cw = statistics.median(r["wall_s"] for r in clean)
        fc = statistics.median(r["compile_s"] for r in faulted)
        cc = statistics.median(r["compile_s"] for r in clean)
        wasted = faulted[0]["wasted_steps"]
        step_s = (cw - cc) / args.steps
        # What the fake itself costs: the faulted run less the recompiles and replayed steps
        # that a real TPU recovery pays too.
        own = fw - (fc - cc) - wasted * step_s
        out[f"episode_ratio_{mode}"] = {
            "steps": args.steps,
            "faults": faults,
            "rounds": rounds,
            "faulted_wall_s": fw,
            "clean_wall_s": cw,
            "ratio": round(fw / cw, 3),
            "target": 1.5,
            "faulted_compile_s": fc,
            "clean_compile_s": cc,
            "recompiles_faulted": faulted[0]["recompiles"],
            "wasted_steps": wasted,
            "ratio_without_recompiles_and_replayed_steps": round(own / cw, 3),
            "faulted_clock_s": faulted[0]["clock_s"],
            "survived": all(r["survived"] for r in faulted + clean),
        }
    out["idle_overhead"] = idle_overhead(rounds=3 if args.quick else 7, steps=200)
    sizes = [2, 8] if args.quick else [2, 8, 32, 64]
    scale = {}
    for n in sizes:
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, __file__, "--one-size", str(n), "--steps", str(args.steps)],
            capture_output=True,
            text=True,
            check=True,
        )
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        result["process_wall_s"] = round(time.perf_counter() - t0, 3)
        scale[f"{n}x4"] = result
    out["scale"] = scale
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


def _cores() -> int:
    import os

    return os.cpu_count() or 0


def _quiet() -> None:
    import logging

    logging.disable(logging.CRITICAL)


if __name__ == "__main__":
    sys.exit(main())
