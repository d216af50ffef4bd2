"""The price of the process boundary (issue 29), printed as one JSON object.

The chaos suite's ten loop scenarios on the sample loop, played three ways, alternating per
scenario in one run: in this process (the old way, ``isolate=False``, kept for the toolkit's own
tests), each run in a child spawned with ``python -m`` (``PATHWAYS_CHAOS_CHILD_START=spawn``),
and each run in a child forked from the warm fork server (the default). Wall seconds per
scenario, the totals and their ratios to in-process, the time to the first verdict (fault-free
baseline plus the first scenario), and a child's bare start (load-only probe of the loop) both
ways.

And a fourth way, the loop suite's without xdist (``fixtures/scenario_pool.py``): the fork-server
baseline, then the ten scenarios side by side, one child per core (``side_by_side``).

Usage: python bench/bench_isolation.py [--out FILE]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

LOOP = "pathways_chaos.harness.reference.user_loop:main"
BACK = "repair_after_polls=3"
SCENARIOS = {
    **{
        k: f"{k}@batch=10:slice=1:{BACK}"
        for k in ("data_loss", "deadline_exceeded", "not_found", "internal")
    },
    "rejoins": "data_loss@batch=6:slice=2,repair@time=15:slice=2",
    "lost_during_save": f"data_loss@save=3:slice=2:{BACK}",
    "lost_during_restore": f"data_loss@batch=10:slice=2:{BACK},data_loss@restore=1:slice=1:{BACK}",
    "flapping": "flapping@batch=3:slice=1:times=3:up_accesses=4",
    "all_but_one": ",".join(f"data_loss@batch=10:slice={s}:{BACK}" for s in (1, 2, 3)),
    "preemption": "preemption@batch=10",
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    from pathways_chaos.harness.engine.topology import SliceTopology, request_cpu_devices

    request_cpu_devices(SliceTopology(4, 2).device_count)
    from pathways_chaos.harness.engine.clock import FakeClock
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.episodes import fork_server, supervisor
    from pathways_chaos.harness.episodes.loop_episode import load_loop
    from pathways_chaos.harness.play import play_loop

    probe: dict[str, float] = {}
    for start in ("spawn", "fork-server", "fork-server"):  # the second: a warm server
        os.environ[fork_server.START_VAR] = start
        t0 = time.perf_counter()
        supervisor._checked.clear()
        supervisor.check_loop(LOOP)
        probe[start] = round(time.perf_counter() - t0, 2)
    loop = load_loop(LOOP)
    out: dict[str, Any] = {"child_probe_s": probe, "scenarios": {}}
    isolated = {"spawn": "spawn", "fork_server": "fork-server"}
    with tempfile.TemporaryDirectory() as tmp, FakeCluster(SliceTopology(4, 2), FakeClock()) as c:
        root = Path(tmp)
        t0 = time.perf_counter()
        base_in = play_loop(loop, cluster=c, isolate=False, checkpoint_dir=root / "b-in").events
        base_in_s = time.perf_counter() - t0
        base_iso: dict[str, Any] = {}
        base_s: dict[str, float] = {"in_process": base_in_s}
        for mode, start in isolated.items():
            os.environ[fork_server.START_VAR] = start
            t0 = time.perf_counter()
            base_iso[mode] = play_loop(LOOP, checkpoint_dir=root / f"b-{mode}").events
            base_s[mode] = time.perf_counter() - t0
        first: dict[str, float] = {}
        for n, (name, schedule) in enumerate(SCENARIOS.items()):
            row: dict[str, Any] = {}
            for mode in ("in_process", *isolated):
                t0 = time.perf_counter()
                if mode == "in_process":
                    o = play_loop(
                        loop,
                        schedule,
                        baseline=base_in,
                        cluster=c,
                        isolate=False,
                        checkpoint_dir=root / f"{name}-in",
                    )
                else:
                    os.environ[fork_server.START_VAR] = isolated[mode]
                    o = play_loop(
                        LOOP,
                        schedule,
                        baseline=base_iso[mode],
                        checkpoint_dir=root / f"{name}-{mode}",
                    )
                row[f"{mode}_s"] = round(time.perf_counter() - t0, 2)
                row[f"{mode}_ok"] = o.verdict.ok
                if n == 0:
                    first[mode] = row[f"{mode}_s"]
            for mode in isolated:
                row[f"{mode}_ratio"] = round(row[f"{mode}_s"] / row["in_process_s"], 2)
            out["scenarios"][name] = row
        # The suite's way without xdist (fixtures/scenario_pool.py): the ten scenarios side by
        # side, one forked child per core, after the fork-server baseline.
        os.environ[fork_server.START_VAR] = "fork-server"
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(fork_server.MAX_SERVERS) as pool:
            jobs = [
                pool.submit(
                    play_loop,
                    LOOP,
                    schedule,
                    baseline=base_iso["fork_server"],
                    checkpoint_dir=root / f"{name}-side",
                )
                for name, schedule in SCENARIOS.items()
            ]
            side_ok = all(job.result().verdict.ok for job in jobs)
        side_s = time.perf_counter() - t0
    modes = ("in_process", *isolated)
    total = {m: sum(r[f"{m}_s"] for r in out["scenarios"].values()) + base_s[m] for m in modes}
    total["side_by_side"] = base_s["fork_server"] + side_s
    out["side_by_side"] = {
        "children_at_once": fork_server.MAX_SERVERS,
        "scenarios_s": round(side_s, 1),
        "all_ok": side_ok,
    }
    isolated = {**isolated, "side_by_side": "fork-server"}
    modes = ("in_process", *isolated)
    base_s["side_by_side"] = base_s["fork_server"]
    first["side_by_side"] = first["fork_server"]  # the first test waits as long either way
    out["baseline_s"] = {m: round(base_s[m], 2) for m in modes}
    out["total_s"] = {m: round(total[m], 1) for m in modes}
    out["ratio_total"] = {m: round(total[m] / total["in_process"], 2) for m in isolated}
    out["first_verdict_s"] = {m: round(base_s[m] + first[m], 1) for m in modes}
    out["machine"] = {"cpus": os.cpu_count(), "load_1min": round(os.getloadavg()[0], 2)}
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
