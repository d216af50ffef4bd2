"""Twin figures, printed as one JSON object: what a Pod kill costs, process to process.

For each round a worker Pod of pathwaysutils' generator output (2 slices) is deleted with grace
0 through the API, and the clock runs until:

- ``slice_down_s``: the resource manager reports the slice short of a host (the worker process
  died and its connection closed). The ``--cluster`` backend marks the slice lost at this
  report, so the loop's slice-down error comes at its next health check after it: this is the
  lower bound of "kill -> slice-down error in the loop";
- ``replacement_running_s``: the replacement Pod (job controller -> scheduler -> twin kubelet)
  is Running in the API;
- ``slice_back_s``: the resource manager reports the slice whole again (the new process joined).

Also ``twin_start_s``: Twin() up (control plane, CRD, kubelet) and ``jobset_running_s``: the
JobSet applied until its 3 Pods run. Medians and all rounds.

Usage: python bench/bench_twin.py [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    from kubernetes import client

    from pathways_chaos.faults.watching import wait_for
    from pathways_chaos.fixtures.control_plane import free_port
    from pathways_chaos.fixtures.twin.sample_jobset import generated_jobset
    from pathways_chaos.fixtures.twin.twin import NodePool, Twin
    from pathways_chaos.harness.kube.slice_health import SliceHealthWatch

    tpu = (
        ("cloud.google.com/gke-tpu-accelerator", "tpu-v5-lite-podslice"),
        ("cloud.google.com/gke-tpu-topology", "2x2"),
    )
    pools = [NodePool("cpu-np", 1)] + [NodePool(f"tpu-{i}", 1, tpu, 4) for i in range(2)]
    port = free_port()
    jobset = generated_jobset("bench", "bench", port).to_dict()
    started = time.monotonic()
    rounds: list[dict[str, float]] = []
    with Twin(pools) as twin:
        twin_start = time.monotonic() - started
        core: Any = client.CoreV1Api(twin.api)
        core.create_namespace({"metadata": {"name": "bench"}})
        applied = time.monotonic()
        twin.apply([jobset], namespace="bench")
        selector = "jobset.sigs.k8s.io/replicatedjob-name=pathways-worker,"
        selector += "jobset.sigs.k8s.io/job-index=0"

        def running(sel: str = "", count: int = 3) -> list[Any] | None:
            pods = core.list_namespaced_pod("bench", label_selector=sel).items
            up = [
                p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp
            ]
            return up if len(up) >= count else None

        wait_for(running, 60, interval=0.01)
        jobset_running = time.monotonic() - applied
        health = SliceHealthWatch(f"127.0.0.1:{port}")
        health.start()
        health.wait_up(0, 1)
        health.wait_up(1, 1)
        for _ in range(args.rounds):
            (victim,) = running(selector, 1) or []
            t0 = time.monotonic()
            core.delete_namespaced_pod(victim.metadata.name, "bench", grace_period_seconds=0)
            health.wait_down(0, 1)
            down = time.monotonic() - t0
            gone = victim.metadata.uid
            wait_for(
                lambda gone=gone: [p for p in running(selector, 1) or [] if p.metadata.uid != gone],
                60,
                interval=0.005,
            )
            replaced = time.monotonic() - t0
            health.wait_up(0, 1)
            back = time.monotonic() - t0
            rounds.append(
                {"slice_down_s": down, "replacement_running_s": replaced, "slice_back_s": back}
            )
        health.stop()
    out = {
        "twin_start_s": round(twin_start, 3),
        "jobset_running_s": round(jobset_running, 3),
        "median": {k: round(statistics.median(r[k] for r in rounds), 4) for k in rounds[0]},
        "rounds": [{k: round(v, 4) for k, v in r.items()} for r in rounds],
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
