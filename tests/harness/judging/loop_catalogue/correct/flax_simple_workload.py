"""pathwaysutils' own Flax NNX ``Workload`` (extras.simple_model), driven the way its docstrings
suggest: one ``Workload`` per elastic attempt over the active slices' devices, sharing one
``Snapshotter``, ``restore_from_snapshot`` when a snapshot exists; replica resize, a batch that
scales with the devices, token records without ids.

Correct, unlike upstream's own use: ``restore_from_snapshot`` restores params and data position
but not ``Workload.step``, so this loop sets the step to the one after the snapshot's.
"""

from __future__ import annotations

from typing import Any

RESTORE_STEP = True


def _config() -> Any:
    from pathwaysutils.extras.simple_model import ModelConfig

    return ModelConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_heads=2,
        head_dim=8,
        num_layers=1,
        per_device_batch_size=1,
        seq_len=8,
    )


def run(
    *, restore_step: bool, devices: Any, checkpoint_dir: str | None, steps: int, every: int
) -> Any:
    """One team's driver; ``restore_step=False`` is upstream's behaviour (the broken variant)."""
    import os
    import signal
    import threading
    from pathlib import Path

    import jax
    import orbax.checkpoint as ocp
    from pathwaysutils.elastic import manager
    from pathwaysutils.extras.simple_model import Workload

    mgr = manager.Manager(devices)
    snapshotter = ocp.v1.training.pathways.Snapshotter(replica_axis_index=0)
    per_slice = len(mgr.slice_to_devices[0])
    preempted = threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, lambda *_: preempted.set())

    def newest_checkpoint() -> Path | None:
        if checkpoint_dir is None or not os.path.isdir(checkpoint_dir):
            return None
        found = sorted(p for p in Path(checkpoint_dir).iterdir() if p.name.startswith("step_"))
        return found[-1] if found else None

    @mgr.elastic_retry(minimum_slice_count=1, poll_interval=5, timeout=300)
    def attempt() -> Any:
        devs = [d for s in sorted(mgr.active_slice_indices) for d in mgr.slice_to_devices[s]]
        wl = Workload(
            config=_config(),
            devices=devs,
            devices_per_slice=per_slice,
            elastic_manager=mgr,
            total_steps=steps,
            snapshot_interval=every,
            snapshotter=snapshotter,
            learning_rate=0.01,
        )
        wl.initialize()
        ckpt = newest_checkpoint()
        if snapshotter.latest is not None:
            wl.restore_from_snapshot()
            if restore_step:
                wl.step = snapshotter.latest.step + 1
        elif ckpt is not None:
            assert wl.artifacts is not None and wl.data_iterator is not None
            like = {
                "params": wl.artifacts.abstract_params,
                "step": 0,
                "grain_state": wl.data_iterator.get_state(),
            }
            saved = ocp.v1.load_pytree(ckpt, like)
            wl.params = saved["params"]
            wl.data_iterator.set_state(saved["grain_state"])
            wl.step = int(saved["step"]) + 1
        while wl.step <= wl.total_steps:
            wl.run_step()
            if preempted.is_set():
                assert wl.artifacts is not None and wl.data_iterator is not None
                last = wl.step - 1  # run_step has already moved past the step it trained
                tree = {
                    "params": wl.params,
                    "step": last,
                    "grain_state": wl.data_iterator.get_state(),
                }
                if checkpoint_dir is None:
                    raise RuntimeError(
                        "preempted, but no checkpoint_dir to save to: pass checkpoint_dir"
                    )
                ocp.v1.save_pytree(Path(checkpoint_dir) / f"step_{last:08d}", tree)
                return None
        snapshotter.join()
        return wl.params

    try:
        params = attempt()
        snapshotter.join()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return None if params is None else jax.device_get(params)


def main(
    *, devices: Any = None, checkpoint_dir: str | None = None, steps: int = 24, every: int = 4
) -> Any:
    return run(
        restore_step=RESTORE_STEP,
        devices=devices,
        checkpoint_dir=checkpoint_dir,
        steps=steps,
        every=every,
    )
