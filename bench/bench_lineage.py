"""The cost of watching a loop's lineage, printed as one JSON object.

The sample user loop's chaos scenarios (the schedules of suites/chaos/test_user_loop.py, each
after a fault-free run), played with the lineage seam and without it, side by side in this
process: each scenario with and without back to back (order swapped every round), one
warm-up round first (compilation), median per scenario and the ratio of the sums of medians.
Target: ratio <= 1.15. The fake clock runs the scenarios, so no real waiting is measured.

Usage: python bench/bench_lineage.py [--rounds N] [--loop MODULE:FUNC] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from typing import Any

BACK = "repair_after_polls=3"
SCENARIOS = {
    "data_loss": f"data_loss@batch=10:slice=1:{BACK}",
    "deadline_exceeded": f"deadline_exceeded@batch=10:slice=1:{BACK}",
    "not_found": f"not_found@batch=10:slice=1:{BACK}",
    "internal": f"internal@batch=10:slice=1:{BACK}",
    "repaired_slice_rejoins": "data_loss@batch=6:slice=2,repair@time=15:slice=2",
    "lost_during_a_save": f"data_loss@save=3:slice=2:{BACK}",
    "lost_during_a_restore": (
        f"data_loss@batch=10:slice=2:{BACK},data_loss@restore=1:slice=1:{BACK}"
    ),
    "flapping": "flapping@batch=3:slice=1:times=3:up_accesses=4",
    "all_replicas_but_one": ",".join(f"data_loss@batch=10:slice={s}:{BACK}" for s in (1, 2, 3)),
    "preemption": "preemption@batch=10",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loop", default="pathways_chaos.harness.reference.user_loop:main")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)

    from pathways_chaos.harness.engine.topology import request_cpu_devices

    request_cpu_devices(8)
    import tempfile

    from pathways_chaos.harness.engine.clock import make_clock
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology
    from pathways_chaos.harness.episodes.loop_episode import load_loop
    from pathways_chaos.harness.play import play_loop

    loop = load_loop(args.loop)
    times: dict[bool, dict[str, list[float]]] = {True: {}, False: {}}
    verdicts: dict[str, bool] = {}
    with tempfile.TemporaryDirectory() as tmp:

        def play(schedule: str, lineage: bool, tag: str) -> tuple[float, Any]:
            with FakeCluster(SliceTopology(4, 2), clock=make_clock("fake")) as cluster:
                t0 = time.perf_counter()
                out = play_loop(
                    loop,
                    schedule,
                    cluster=cluster,
                    lineage=lineage,
                    checkpoint_dir=f"{tmp}/{tag}-{time.monotonic_ns()}",
                )
                return time.perf_counter() - t0, out

        for lineage in (True, False):  # warm-up: compile every mesh's step once
            for name, schedule in SCENARIOS.items():
                play(schedule, lineage, name)
        for r in range(args.rounds):
            for name, schedule in SCENARIOS.items():
                # each scenario with and without, back to back, the order swapped every round:
                # a load that changes over the run weighs on both sides alike
                for lineage in (True, False) if r % 2 == 0 else (False, True):
                    seconds, out = play(schedule, lineage, name)
                    times[lineage].setdefault(name, []).append(seconds)
                    if lineage:
                        verdicts[name] = out.result.completed
    med = {k: {n: statistics.median(v) for n, v in times[k].items()} for k in times}
    total_on, total_off = sum(med[True].values()), sum(med[False].values())
    result = {
        "bench": "lineage",
        "loop": args.loop,
        "rounds": args.rounds,
        "scenarios": {
            n: {
                "with_lineage_s": round(med[True][n], 4),
                "without_s": round(med[False][n], 4),
                "ratio": round(med[True][n] / med[False][n], 3),
                "completed": verdicts.get(n),
            }
            for n in SCENARIOS
        },
        "total_with_lineage_s": round(total_on, 3),
        "total_without_s": round(total_off, 3),
        "ratio": round(total_on / total_off, 3),
        "target_ratio": 1.15,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
