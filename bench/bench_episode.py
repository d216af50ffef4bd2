"""Episode figures, printed as one JSON object.

- episode_ratio: a 4x2 episode of 100 steps with 3 faults (down, down, rejoin) against the
  same episode without faults, side by side in this process, fake clock (no real sleeping),
  medians of interleaved rounds after a first faulted episode that met its meshes (its own
  figure: ratio_first_faulted_in_process).
- idle_overhead: the reference step on a 4x2 mesh with a fake cluster installed but idle,
  against bare JAX on the same mesh (interleaved rounds, median of rounds).
- scale: the faulted episode at 2, 8, 32 and 64 slices of 4 devices, one process per size
  (the CPU device count is fixed when JAX starts).
- compilation_cache: the faulted episode in new processes without, with a cold and with a
  warm persistent compilation cache.
- breakdown (in each episode_ratio): one more faulted and fault-free pair under cProfile (all
  threads), split into phases (health polls, recompiles, restore, iterator rebuild, census,
  recorder, fault injection, failed-attempt teardown, oracle, ...), each faulted, clean and
  the extra; ``harness_own`` sums the phases that are this toolkit's own code, and its extra
  as a share of the fault-free episode (target at most 0.10).

Usage: python bench/bench_episode.py [--quick] [--ratio-only] [--out FILE]
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
#: Tracing and lowering too: what a jit cache miss costs besides XLA's compile.
_TRACE_SECONDS: list[float] = []
_TRACE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
)


def _count_compiles() -> None:
    import jax

    def listener(event: str, duration: float, **_: Any) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            _COMPILE_SECONDS.append(duration)
        elif event in _TRACE_EVENTS:
            _TRACE_SECONDS.append(duration)

    jax.monitoring.register_event_duration_secs_listener(listener)


def episode_seconds(
    num_slices: int,
    per_slice: int,
    steps: int,
    schedule: str,
    mode: str = "resize",
    keep_events: bool = False,
) -> Any:
    from pathways_chaos.faults.model import parse_schedule
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology
    from pathways_chaos.harness.episodes.episode import run_episode
    from pathways_chaos.harness.judging import oracle
    from pathways_chaos.harness.reference.trainer import TrainerConfig

    config = TrainerConfig(mode=mode, final_step=steps, global_batch=4 * num_slices)
    compiled_before = sum(_COMPILE_SECONDS)
    t0 = time.perf_counter()
    with FakeCluster(SliceTopology(num_slices, per_slice)) as fake:
        result = run_episode(fake, config, parse_schedule(schedule))
    wall = time.perf_counter() - t0
    verdict = oracle.check(result.events, replay=False)
    out = {
        "wall_s": round(wall, 3),
        "compile_s": round(sum(_COMPILE_SECONDS) - compiled_before, 3),
        "clock_s": result.events[-1]["t"],
        "survived": verdict.ok,
        "wasted_steps": verdict.wasted_steps,
        "recompiles": sum(1 for e in result.events if e["kind"] == "mesh" and e["recompile"]),
    }
    return (out, result.events) if keep_events else out


def _phase_targets() -> dict[str, list[tuple[Any, str]]]:
    """Phase -> the (owner, attribute) callables whose time it is, each looked up at call time."""
    import traceback

    from grain._src.python.dataset import elastic_iterator
    from orbax.checkpoint.experimental.v1._src.training.pathways import snapshotter
    from pathwaysutils.elastic import elastic, manager

    from pathways_chaos.harness.engine import census, fake_cluster, recorder
    from pathways_chaos.harness.engine.clock import FakeClock
    from pathways_chaos.harness.episodes import fault_controller
    from pathways_chaos.harness.reference import trainer

    return {
        "health_polls": [
            (elastic, "wait_for_slices"),
            (manager.Manager, "_check_inactive_slices"),
        ],
        "fake_health_checks": [(fake_cluster.FakeCluster, "_run_health_computation")],
        "restore": [(trainer.ReferenceTrainer, "restore_snapshot")],
        "iterator_rebuild": [(trainer.ReferenceTrainer, "make_iterator")],
        "input_next": [(elastic_iterator._ElasticMapDatasetIterator, "__next__")],
        "failed_attempt_teardown": [(traceback, "clear_frames")],
        "census": [(census.Census, "__call__"), (census.Census, "pinned_host")],
        "fault_injection": [(fault_controller.FaultController, "_fire")],
        "fault_controller": [(fault_controller.FaultController, "on_event")],
        "clock_advance": [(FakeClock, "advance")],
        "recorder": [(recorder.Recorder, "emit")],
        "snapshot_save": [(snapshotter.Snapshotter, "save")],
        "snapshotter_release": [(trainer, "release_snapshotter")],
        "digest": [(trainer, "digest")],
        "place_batch": [(trainer.ReferenceTrainer, "place_batch")],
    }


#: This toolkit's own phases: what a real Pathways run does not pay. Health polls are the
#: library's; the fake's health computation inside them is ours.
HARNESS_OWN = (
    "fake_health_checks",
    "census",
    "recorder",
    "fault_controller",
    "fault_injection",
    "clock_advance",
    "snapshotter_release",
)


class PhaseTimer:
    """Wraps each phase's callables; a phase's time excludes the nested phases it calls, so
    the main thread's phases add up to its wall time. Other threads' time (the monitor
    thread's polls, which ``advance`` waits for) is kept apart."""

    def __init__(self) -> None:
        import threading

        self.main = threading.get_ident()
        self.own: dict[str, float] = {}
        self.other_threads: dict[str, float] = {}
        self._stack: dict[int, list[list[float]]] = {}  # thread -> [start, nested] frames
        self._saved: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> PhaseTimer:
        for phase, targets in _phase_targets().items():
            for owner, name in targets:
                original = owner.__dict__[name] if name in owner.__dict__ else getattr(owner, name)
                self._saved.append((owner, name, original))
                setattr(owner, name, self._wrap(phase, original))
        return self

    def __exit__(self, *exc: object) -> None:
        while self._saved:
            owner, name, original = self._saved.pop()
            setattr(owner, name, original)

    def _wrap(self, phase: str, fn: Any) -> Any:
        import functools
        import threading

        timer = self

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            me = threading.get_ident()
            stack = timer._stack.setdefault(me, [])
            frame = [time.perf_counter(), 0.0]
            stack.append(frame)
            try:
                return fn(*args, **kwargs)
            finally:
                stack.pop()
                total = time.perf_counter() - frame[0]
                if stack:
                    stack[-1][1] += total
                into = timer.own if me == timer.main else timer.other_threads
                into[phase] = into.get(phase, 0.0) + total - frame[1]

        return timed


def profile_phases(mode: str, schedule: str, steps: int) -> dict[str, Any]:
    """One episode with every phase timed (seconds of the trainer's thread, exclusive)."""
    from pathways_chaos.harness.judging import oracle

    trace0, compile0 = sum(_TRACE_SECONDS), sum(_COMPILE_SECONDS)
    t0 = time.perf_counter()
    with PhaseTimer() as timer:
        _, events = episode_seconds(4, 2, steps, schedule, mode, keep_events=True)
    wall = time.perf_counter() - t0
    out: dict[str, float] = {phase: timer.own.get(phase, 0.0) for phase in _phase_targets()}
    out["monitor_thread_polls"] = sum(timer.other_threads.values())
    out["recompiles"] = sum(_TRACE_SECONDS) - trace0 + sum(_COMPILE_SECONDS) - compile0
    out["steps_and_rest"] = wall - sum(timer.own.values())
    t1 = time.perf_counter()
    oracle.check(events, replay=False)
    out["oracle"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    oracle.check(events, replay=True)
    out["oracle_with_replay"] = time.perf_counter() - t1
    out["wall"] = wall
    return {k: round(v, 4) for k, v in out.items()}


def breakdown(mode: str, faults: str, steps: int) -> dict[str, Any]:
    faulted = profile_phases(mode, faults, steps)
    clean = profile_phases(mode, "", steps)
    phases = {
        k: {
            "faulted_s": faulted[k],
            "clean_s": clean[k],
            "extra_s": round(faulted[k] - clean[k], 4),
        }
        for k in faulted
    }
    own_extra = sum(phases[k]["extra_s"] for k in HARNESS_OWN) + phases["oracle"]["extra_s"]
    return {
        "phases": phases,
        "harness_own_phases": [*HARNESS_OWN, "oracle"],
        "harness_own_extra_s": round(own_extra, 4),
        "harness_own_extra_share_of_clean": round(own_extra / clean["wall"], 4),
        "target_share": 0.10,
        "note": "one faulted and one fault-free episode, each phase's callables timed in the "
        "trainer's thread exclusive of the phases they call (they add up to the wall time; "
        "steps_and_rest holds the steps, recompiles included); clock_advance is mostly the "
        "wait for the monitor thread's polls (monitor_thread_polls, not added); oracle and "
        "oracle_with_replay run after the episode",
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


def one_cache_run(steps: int) -> dict[str, Any]:
    """The faulted resize episode in a new process, compiles served by whatever cache the
    environment names (JAX_COMPILATION_CACHE_DIR), with the cache's own counters."""
    import jax

    from pathways_chaos.harness.engine.topology import request_cpu_devices

    request_cpu_devices(8)
    hits: list[str] = []
    jax.monitoring.register_event_listener(
        lambda event, **_: (
            hits.append(event) if event == "/jax/compilation_cache/cache_hits" else None
        )
    )
    t0 = time.perf_counter()
    out = episode_seconds(4, 2, steps, FAULTS)
    out["cache_hits"] = len(hits)
    out["trace_and_lower_s"] = round(sum(_TRACE_SECONDS), 3)
    out["process_s"] = round(time.perf_counter() - t0, 3)
    return out


def compilation_cache(steps: int) -> dict[str, Any]:
    """The same faulted episode in three new processes: no persistent cache, a cold one, and
    the same cache warm (what a CI rerun or the next xdist worker finds)."""
    import os
    import tempfile

    runs = {}
    with tempfile.TemporaryDirectory(prefix="chaos-xla-bench-") as folder:
        for name, cache in (("no_cache", None), ("cold", folder), ("warm", folder)):
            env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
            env["PATHWAYS_CHAOS_XLA_CACHE"] = "off"
            if cache:
                env["JAX_COMPILATION_CACHE_DIR"] = cache
                env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.05"
            t0 = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, __file__, "--one-cache-run", "--steps", str(steps)],
                capture_output=True,
                text=True,
                check=True,
                env=env,
            )
            runs[name] = json.loads(proc.stdout.strip().splitlines()[-1])
            runs[name]["wall_with_start_s"] = round(time.perf_counter() - t0, 3)
    saved = runs["no_cache"]["compile_s"] - runs["warm"]["compile_s"]
    runs["compile_s_saved_warm"] = round(saved, 3)
    return runs


def one_size(num_slices: int, steps: int) -> dict[str, Any]:
    from pathways_chaos.harness.engine.topology import request_cpu_devices

    request_cpu_devices(num_slices * 4)
    return episode_seconds(num_slices, 4, steps, SCALE_FAULTS)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer rounds and sizes")
    parser.add_argument(
        "--ratio-only", action="store_true", help="only the episode ratios and their breakdown"
    )
    parser.add_argument("--out", default=None)
    parser.add_argument("--one-size", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--one-cache-run", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--cache-only", action="store_true", help="only the persistent compilation cache runs"
    )
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    _quiet()
    _count_compiles()
    if args.one_size:
        print(json.dumps(one_size(args.one_size, args.steps)))
        return 0
    if args.one_cache_run:
        print(json.dumps(one_cache_run(args.steps)))
        return 0
    if args.cache_only:
        return _write({"compilation_cache": compilation_cache(args.steps)}, args.out)

    from pathways_chaos.harness.engine.topology import request_cpu_devices

    request_cpu_devices(8)
    from pathways_chaos.harness.engine import compilation_cache as persistent

    cache = persistent.enable()  # as a pytest session with the plugin has it
    out: dict[str, Any] = {
        "machine": {"cores": _cores(), "load_avg_1_5_15": _load()},
        "persistent_compilation_cache": str(cache) if cache else None,
    }
    episode_seconds(4, 2, 5, "")  # warm imports and the first compile for both
    rounds = 3 if args.quick else 5
    for mode, faults in (("resize", FAULTS), ("pause_resume", PAUSE_FAULTS)):
        # The first faulted episode of the process meets its meshes for the first time (XLA
        # compiles them, no persistent cache here); the rounds after it reuse them.
        first = episode_seconds(4, 2, args.steps, faults, mode)
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
            "first_faulted_in_process": first,
            "ratio_first_faulted_in_process": round(first["wall_s"] / cw, 3),
            "survived": all(r["survived"] for r in faulted + clean),
            "breakdown": breakdown(mode, faults, args.steps),
        }
    if args.ratio_only:
        return _write(out, args.out)
    out["compilation_cache"] = compilation_cache(args.steps)
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
    return _write(out, args.out)


def _write(out: dict[str, Any], path: str | None) -> int:
    text = json.dumps(out, indent=2)
    print(text)
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")
    return 0


def _load() -> list[float]:
    import os

    return [round(x, 2) for x in os.getloadavg()]


def _cores() -> int:
    import os

    return os.cpu_count() or 0


def _quiet() -> None:
    import logging

    logging.disable(logging.CRITICAL)


if __name__ == "__main__":
    sys.exit(main())
