"""The reference trainer in Multi-Tier Checkpointing mode: Orbax's MTC client, as a job uses it.

Each incarnation of the job (a JobSet run of every Pod) calls the real
``initialize_multi_tier_checkpointing`` (which talks to the replication service through
``replicator.yaml`` and waits for its restore marker), then opens one real Orbax sidecar
checkpoint manager (``WorkerCheckpointManagerRaw``) per worker host on that host's ramdisk,
restores the newest local step if the service staged one, and trains, saving every
``local_checkpoint_period`` steps. Any error ends the incarnation and the job restarts (a
JobSet's failure policy), up to ``max_restarts`` times.

The model, data, step function and batch placement are the reference trainer's. The grain
iterator position is saved inside the checkpoint (a ``data_index`` leaf next to the model), so
a restore brings the data position back with the model from the same tier.

On a real Pathways backend the trainer would use ``ReplicatorCheckpointManager`` with
``use_colocated_python=True``, whose controller dispatches the same sidecar calls through
colocated Python; on CPU that manager refuses to start (see ``harness/mtc/client_seams.py``),
so ``sidecars`` builds the sidecar managers itself, one per host, on the host's own folder.
"""

from __future__ import annotations

import dataclasses
import time
import types
from collections.abc import Sequence
from typing import Any

import numpy as np

from pathways_chaos.harness.engine.digest import digest
from pathways_chaos.harness.engine.recorder import Recorder
from pathways_chaos.harness.errors import ChaosConfigError
from pathways_chaos.harness.reference.trainer import (
    ReferenceTrainer,
    TrainerConfig,
    TrainResult,
    describe_state,
    live_census,
)


@dataclasses.dataclass(frozen=True)
class MtcOptions:
    """MaxText's MTC flags, with defaults a CPU episode finishes in seconds."""

    mount: str = "/mtc/ramdisk"  # local_checkpoint_directory: the ramdisk mount on every host
    run_name: str = "chaos-mtc"
    local_checkpoint_period: int = 5
    backup_interval_steps: int | None = 10
    backup_interval_minutes: int | None = None
    max_restarts: int = 6
    init_timeout_seconds: int = 120

    def __post_init__(self) -> None:
        if self.local_checkpoint_period < 1:
            raise ChaosConfigError(
                f"local_checkpoint_period={self.local_checkpoint_period}: use >= 1 step"
            )
        if (self.backup_interval_steps is None) == (self.backup_interval_minutes is None):
            raise ChaosConfigError(
                "set exactly one of backup_interval_steps and backup_interval_minutes "
                "(MaxText: multi_tier_checkpointing_backup_interval_steps / _minutes)"
            )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class MtcTrainer(ReferenceTrainer):
    """One job: incarnations until it completes or runs out of restarts."""

    def __init__(
        self,
        config: TrainerConfig,
        recorder: Recorder,
        devices: Sequence[Any] | None = None,
        run_index: int = 1,
        mtc: MtcOptions | None = None,
    ) -> None:
        super().__init__(config, recorder, devices, run_index)
        self.mtc = mtc or MtcOptions()

    # -- the pieces a broken variant overrides -----------------------------------------------
    def sidecars(self, slices: dict[int, list[Any]]) -> list[tuple[int, Any, Any]]:
        """One real Orbax sidecar manager per worker host: (host, manager, host mesh)."""
        import jax
        from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import (
            sidecar_worker_checkpoint_manager as sidecar,
        )

        from pathways_chaos.harness.mtc import client_seams

        seams = client_seams.active()
        if seams is None:
            raise ChaosConfigError(
                "MtcTrainer runs its sidecar managers in-process only on the fake (enter an "
                "MtcCluster); on Pathways use "
                "ReplicatorCheckpointManager(use_colocated_python=True)"
            )
        out = []
        for host, devices in sorted(slices.items()):
            mesh = jax.sharding.Mesh(np.asarray(devices).reshape(1, -1), ("replica", "data"))
            manager = sidecar.WorkerCheckpointManagerRaw(
                str(seams.mount.resolve(self.mtc.mount, host)),
                mesh_shape=(1, len(devices)),
                mesh_axis_names=("replica", "data"),
                save_interval_steps=self.mtc.local_checkpoint_period,
                mesh_device_ids=tuple(d.id for d in devices),
            )
            out.append((host, manager, mesh))
        return out

    def checkpoint_payload(self, state: Any, iterator: Any) -> dict[str, Any]:
        position = iterator.get_state()["global_next_index"]
        return {"model": state, "data_index": np.asarray(position, dtype=np.int32)}

    # -- the job -----------------------------------------------------------------------------
    def run(self) -> TrainResult:
        from pathwaysutils.elastic import elastic

        devices = list(self.devices) if self.devices is not None else None
        if devices is None:
            import jax

            devices = jax.devices()
        slices = {int(s): list(ds) for s, ds in elastic.get_slice_to_devices(devices).items()}
        self.config.check_fits(len(slices))
        self.recorder.emit(
            "run_start",
            run=self.run_index,
            config=self.config.to_json(),
            mtc=self.mtc.to_json(),
            slices={str(s): [d.id for d in ds] for s, ds in slices.items()},
            active_slices=sorted(slices),
        )
        while True:
            self.attempt += 1
            try:
                result = self._incarnation(slices)
                break
            except Exception as error:
                self.attempt_failed(error, slice_down=False)
                if self.attempt > self.mtc.max_restarts:
                    self.recorder.emit(
                        "run_end",
                        run=self.run_index,
                        status="failed",
                        attempts=self.attempt,
                        error=f"{type(error).__name__}: {error}"[:500],
                        cause=None,
                    )
                    raise
        self.recorder.emit(
            "run_end",
            run=self.run_index,
            status=result.status,
            attempts=self.attempt,
            step=result.step,
            final_state=describe_state(result.state),
            compiles=sum(f._cache_size() for f in self._jitted.values()),
        )
        return result

    def _incarnation(self, slices: dict[int, list[Any]]) -> TrainResult:
        import jax
        from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import (
            initialization,
        )

        config, emit, mtc = self.config, self.recorder.emit, self.mtc
        ids = {"run": self.run_index, "attempt": self.attempt}
        all_devices = [d for s in sorted(slices) for d in slices[s]]
        manager = _AllSlices(slices)
        emit("attempt_start", **ids, active_slices=sorted(slices))
        mesh, step_fn = self.mesh_and_step(manager, "attempt")
        iterator = self.make_iterator(manager)
        sharding = self.state_sharding(mesh)

        t0 = time.perf_counter()
        initialization.initialize_multi_tier_checkpointing(
            mtc.mount,
            backup_interval_minutes=mtc.backup_interval_minutes,
            backup_interval_steps=mtc.backup_interval_steps,
            num_slices=len(slices),
            run_name=mtc.run_name,
            jax_initialization_timeout_seconds=mtc.init_timeout_seconds,
            use_colocated_python=True,
            devices=all_devices,
        )
        emit("mtc_init", **ids, seconds=round(time.perf_counter() - t0, 6))
        workers = self.sidecars(slices)
        try:
            state, step = self._restore_or_init(workers, mesh, sharding, iterator, ids)
            emit("attempt_ready", **ids, reason="attempt", start_step=step, live=live_census())
            while step < config.final_step:
                t0 = time.perf_counter()
                batch = next(iterator)
                t1 = time.perf_counter()
                state, loss = step_fn(state, *self.place_batch(batch, mesh))
                loss_value = float(np.asarray(loss).ravel()[0]) if np.size(loss) else 0.0
                emit(
                    "step",
                    **ids,
                    step=step,
                    ids=self.batch_ids(batch),
                    loss=loss_value,
                    input_s=round(t1 - t0, 6),
                    step_s=round(time.perf_counter() - t1, 6),
                )
                del batch
                if step > 0 and _scalar(workers[0][1].should_save(_on(step, workers[0][2]))):
                    self._save(workers, state, step, iterator, ids)
                step += 1
            return TrainResult("completed", step, self.attempt, jax.device_get(state))
        finally:
            for _, worker, host_mesh in workers:
                worker.close(_on(0, host_mesh))

    def _save(
        self, workers: Any, state: Any, step: int, iterator: Any, ids: dict[str, int]
    ) -> None:
        import jax

        t0 = time.perf_counter()
        payload = self.checkpoint_payload(state, iterator)
        for _, worker, host_mesh in workers:
            local = jax.device_put(payload, _replicated(host_mesh))
            worker.save(_on(step, host_mesh), _on(False, host_mesh, np.bool_), local)
        for _, worker, host_mesh in workers:
            worker.wait_until_finished(_on(0, host_mesh))
        self.recorder.emit(
            "checkpoint_save",
            **ids,
            step=step,
            path=self.mtc.mount,
            digest=digest(state),
            data_index=int(payload["data_index"]),
            seconds=round(time.perf_counter() - t0, 6),
        )

    def _restore_or_init(
        self, workers: Any, mesh: Any, sharding: Any, iterator: Any, ids: dict[str, int]
    ) -> tuple[Any, int]:
        import jax

        emit = self.recorder.emit
        latest = [_scalar(w.latest_step(_on(0, m))) for _, w, m in workers]
        if not any(latest):  # 0 is the protocol's "no checkpoint"
            return jax.device_put(self.init_state(), sharding), 0
        if len(set(latest)) != 1:
            raise RuntimeError(
                f"hosts hold different latest steps {latest} after the MTC restore: the "
                "replicas would differ"
            )
        step = latest[0]
        emit("restore_begin", **ids, source="checkpoint", step=step)
        t0 = time.perf_counter()
        restored = [w.restore_infer(_on(step, m), _on(False, m, np.bool_)) for _, w, m in workers]
        host_digests = [digest(r["model"]) for r in restored]
        host_positions = [int(np.asarray(r["data_index"])) for r in restored]
        # The controller assembles each leaf from every host's own shards, as the Pathways
        # controller does from the sidecars' results.
        state = jax.tree.map(
            lambda *leaves: _assemble(leaves, sharding),
            *[r["model"] for r in restored],
        )
        iterator.set_state({"global_next_index": host_positions[0]})
        emit(
            "restore_end",
            **ids,
            source="checkpoint",
            step=step,
            digest=digest(state),
            host_digests=host_digests,
            data_index=host_positions[0],
            host_data_index=host_positions,
            seconds=round(time.perf_counter() - t0, 6),
        )
        return state, step + 1


class _AllSlices(types.SimpleNamespace):
    """What the reference trainer's mesh and batch helpers read of a Manager: every slice."""

    def __init__(self, slices: dict[int, list[Any]]) -> None:
        super().__init__(
            slice_to_devices=slices,
            active_slice_indices=set(slices),
            active_slice_count=len(slices),
        )

    def scale_by_active_slices(self, x: int) -> int:
        return x


def _replicated(mesh: Any) -> Any:
    import jax

    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


def _on(value: Any, mesh: Any, dtype: Any = np.int32) -> Any:
    import jax

    return jax.device_put(np.asarray(value, dtype=dtype), _replicated(mesh))


def _scalar(array: Any) -> int:
    return int(np.asarray(array))


def _assemble(leaves: Sequence[Any], sharding: Any) -> Any:
    import jax

    by_device = {s.device.id: s.data for leaf in leaves for s in leaf.addressable_shards}
    mesh_devices = list(sharding.mesh.devices.flat)
    return jax.make_array_from_single_device_arrays(
        leaves[0].shape, sharding, [by_device[d.id] for d in mesh_devices]
    )
