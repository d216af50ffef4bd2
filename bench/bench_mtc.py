"""Multi-Tier Checkpointing figures on the fake, printed as one JSON object.

- restore_by_tier: restarting a 4-host job whose checkpoint is on every host's own ramdisk,
  on a peer (host 1's node lost), or only in the backup (every node lost); for the reference
  model's state and for a 100 MB state. ``init_s`` is the real client's
  ``initialize_multi_tier_checkpointing`` (the service stages the step from the tier inside it),
  ``restore_s`` the real sidecar managers' restore on every host, median of rounds.
- steps_lost: steps run again per fault kind at the default intervals (a local checkpoint every
  5 steps, a backup every 10 steps), the fault at step 18 of 20.

The tiers are tmpfs under /dev/shm where the machine has it (``medium``), so "peer" and "backup"
here cost a local copy, not a network transfer: the figures order the tiers, a GKE run sizes them.

Usage: python bench/bench_mtc.py [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

STEPS_LOST_SCHEDULES = {
    "none": "",
    "node_loss": "node_loss@step=18:host=1",
    "peer_loss+node_loss": "peer_loss@step=18:host=1,node_loss@step=18:host=1",
    "backup_only": "backup_only@step=18",
    "replicator_error": "replicator_error@step=18",
    "stale_backup": "stale_backup@step=18:version=1",
    "torn_save": "torn_save@step=18:host=2:saving=19",
}


def _on(value: Any, mesh: Any, dtype: Any) -> Any:
    import jax
    import numpy as np

    return jax.device_put(
        np.asarray(value, dtype=dtype),
        jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()),
    )


def restore_by_tier(state_name: str, make_state: Any, rounds: int) -> dict[str, Any]:
    import jax
    import numpy as np
    from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import (
        initialization,
    )
    from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import (
        sidecar_worker_checkpoint_manager as sidecar,
    )

    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology
    from pathways_chaos.harness.mtc.cluster import MtcCluster

    def init(cluster: MtcCluster) -> float:
        t0 = time.perf_counter()
        initialization.initialize_multi_tier_checkpointing(
            cluster.mount,  # type: ignore[arg-type]
            backup_interval_steps=10,
            num_slices=cluster.num_hosts,
            run_name=cluster.job,
            use_colocated_python=True,
            devices=cluster.devices,
        )
        return time.perf_counter() - t0

    def workers(cluster: MtcCluster) -> list[tuple[Any, Any]]:
        out = []
        for h in range(cluster.num_hosts):
            devices = cluster.cluster.slice_devices(h)
            mesh = jax.sharding.Mesh(np.asarray(devices).reshape(1, -1), ("replica", "data"))
            manager = sidecar.WorkerCheckpointManagerRaw(
                str(cluster.host_dir(h)),
                (1, len(devices)),
                ("replica", "data"),
                5,
                tuple(d.id for d in devices),
            )
            out.append((manager, mesh))
        return out

    figures: dict[str, list[dict[str, float]]] = {"ramdisk": [], "peer": [], "backup": []}
    with FakeCluster(SliceTopology(4, 2)) as fake, MtcCluster(fake) as cluster:
        init(cluster)
        fleet = workers(cluster)
        state = make_state()
        size = sum(np.asarray(x).nbytes for x in jax.tree.leaves(state))
        for manager, mesh in fleet:
            local = jax.device_put(
                state, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
            )
            manager.save(_on(10, mesh, np.int32), _on(True, mesh, np.bool_), local)
        for manager, mesh in fleet:
            manager.wait_until_finished(_on(0, mesh, np.int32))
            manager.close(_on(0, mesh, np.int32))
        del local
        cluster.service.pump()
        for _ in range(rounds):
            for tier, wipe in (("ramdisk", []), ("peer", [1]), ("backup", [0, 1, 2, 3])):
                for h in wipe:
                    cluster.tiers.wipe_host(h)
                init_s = init(cluster)
                plan = cluster.service.plans[-1]
                assert plan.tier == tier and plan.step == 10, (tier, plan.to_json())
                fleet = workers(cluster)
                t0 = time.perf_counter()
                restored = [
                    m.restore_infer(_on(10, mesh, np.int32), _on(False, mesh, np.bool_))
                    for m, mesh in fleet
                ]
                jax.block_until_ready(restored)
                restore_s = time.perf_counter() - t0
                for manager, mesh in fleet:
                    manager.close(_on(0, mesh, np.int32))
                del restored
                figures[tier].append({"init_s": init_s, "restore_s": restore_s})
                cluster.service.pump()  # peer copies back before the next round
        medium = cluster.tiers.medium
    return {
        "state": state_name,
        "bytes_per_host": int(size),
        "hosts": 4,
        "medium": medium,
        "rounds": rounds,
        **{
            tier: {
                key: round(statistics.median(r[key] for r in rows), 4)
                for key in ("init_s", "restore_s")
            }
            | {"total_s": round(statistics.median(r["init_s"] + r["restore_s"] for r in rows), 4)}
            for tier, rows in figures.items()
        },
    }


def steps_lost() -> dict[str, Any]:
    from pathways_chaos.faults.model import parse_schedule
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology
    from pathways_chaos.harness.mtc.cluster import MtcCluster
    from pathways_chaos.harness.mtc.episode import run_mtc_episode
    from pathways_chaos.harness.mtc.judging import check_all, tier_restores
    from pathways_chaos.harness.mtc.trainer import MtcOptions
    from pathways_chaos.harness.reference.trainer import TrainerConfig

    out: dict[str, Any] = {
        "local_checkpoint_period": 5,
        "backup_interval_steps": 10,
        "fault_step": 18,
    }
    for name, schedule in STEPS_LOST_SCHEDULES.items():
        with FakeCluster(SliceTopology(4, 2)) as fake, MtcCluster(fake) as cluster:
            t0 = time.perf_counter()
            episode = run_mtc_episode(
                cluster,
                TrainerConfig(mode="pause_resume", final_step=20),
                parse_schedule(schedule),
                options=MtcOptions(run_name=cluster.job, mount=cluster.mount),
            )
            wall = time.perf_counter() - t0
        restores = tier_restores(episode.events)
        out[name] = {
            "schedule": schedule,
            "steps_lost": sum(r.steps_lost for r in restores),
            "restored": [
                {
                    "step": r.restored_step,
                    "tier": r.tier,
                    "steps_lost": r.steps_lost,
                    "recovery_s": r.recovery_s,
                }
                for r in restores
            ],
            "episode_wall_s": round(wall, 3),
            "properties_ok": not check_all(episode.events) and episode.error is None,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round, no 100 MB state")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()

    import jax

    jax.config.update("jax_num_cpu_devices", 8)
    import numpy as np

    from pathways_chaos.harness.reference import model

    rounds = 1 if args.quick else 3

    def reference_state() -> Any:
        return {"model": model.init_state(0), "data_index": np.int32(0)}

    def big_state() -> Any:
        return {"ballast": np.arange(25_000_000, dtype=np.float32), "data_index": np.int32(0)}

    results: dict[str, Any] = {
        "restore_by_tier": [restore_by_tier("reference_model", reference_state, rounds)]
    }
    if not args.quick:
        results["restore_by_tier"].append(restore_by_tier("100MB", big_state, rounds))
    results["steps_lost"] = steps_lost()
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
