"""Trainer subclasses a team might write, carelessly or worse: each must end as a verdict that
names what it did, in a child process, and leave pytest and the session untouched."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from pathways_chaos.harness.reference.trainer import ReferenceTrainer
from pathways_chaos.harness.reference.variants import WeightDecayTrainer


class ExitsInStep(ReferenceTrainer):
    """``os._exit`` at step 7: a data loader that gives up, say."""

    def before_step(self, step: int, batch: Any) -> Any:
        if step == 7:
            os._exit(0)
        return batch


class BlocksForever(ReferenceTrainer):
    """Waits on an event nobody sets, at step 3."""

    def before_step(self, step: int, batch: Any) -> Any:
        if step == 3:
            threading.Event().wait()
        return batch


class ChangesTheWorkingFolder(ReferenceTrainer):
    """``chdir('/')`` and an environment variable: must not leak into the judging process."""

    def before_step(self, step: int, batch: Any) -> Any:
        os.chdir("/")
        os.environ["HOSTILE_TRAINER_WAS_HERE"] = "1"
        return batch


class ForksAndLeaves(ReferenceTrainer):
    """Forks a child that sleeps on, at step 2: must be found and ended."""

    def before_step(self, step: int, batch: Any) -> Any:
        if step == 2 and os.fork() == 0:
            time.sleep(600)
            os._exit(0)
        return batch


class PidRecordingWeightDecay(WeightDecayTrainer):
    """A correct trainer (another optimizer) that writes down the process it ran in."""

    def before_step(self, step: int, batch: Any) -> Any:
        path = os.environ.get("TRAINER_PID_FILE")
        if path and step == 1:
            with open(path, "a") as f:
                f.write(f"{os.getpid()}\n")
        return batch


class IgnoresRestoredState(ReferenceTrainer):
    """Restores the step but trains on from fresh parameters: only a replay can tell."""

    def restore_snapshot(self, snapshotter: Any, abstract: Any, iterator: Any) -> tuple[Any, int]:
        import jax

        state, step = super().restore_snapshot(snapshotter, abstract, iterator)
        fresh = self.init_state()
        return jax.tree.map(lambda old, new: jax.device_put(new, old.sharding), state, fresh), step


class StaleSeamName(ReferenceTrainer):
    """Overrides ``_mesh_and_step``, the seam's old name: never called (a silent plain run)."""

    def _mesh_and_step(self, manager: Any, reason: str) -> Any:
        return super().mesh_and_step(manager, reason)


class RecordsItsProcessPerRun(ReferenceTrainer):
    """A correct trainer that writes down, for each run of the episode, the process it ran in."""

    def before_step(self, step: int, batch: Any) -> Any:
        path = os.environ.get("TRAINER_PID_FILE")
        if path and not getattr(self, "_recorded", False):
            self._recorded = True
            with open(path, "a") as f:
                f.write(f"{self.run_index} {os.getpid()}\n")
        return batch


#: Where ``ResumesFromMemory`` keeps its preemption checkpoint: gone with its process.
_MEMORY: dict[str, Any] = {}


class ResumesFromMemory(ReferenceTrainer):
    """Keeps its preemption checkpoint in a module global: in one process the next run resumes
    from it; on GKE the next run is a new container, the global is gone, and it starts over."""

    def _suspend(self, state: Any, step: int, iterator: Any) -> Any:
        import jax

        _MEMORY["checkpoint"] = (jax.device_get(state), step, iterator.get_state())
        return super()._suspend(state, step, iterator)

    def _latest_checkpoint(self) -> Any:
        return (_MEMORY["checkpoint"][1], "memory") if "checkpoint" in _MEMORY else None

    def _load_checkpoint(self, path: Any, abstract: Any, iterator: Any) -> tuple[Any, int]:
        import jax

        state, step, position = _MEMORY["checkpoint"]
        iterator.set_state(position)
        placed = jax.tree.map(lambda a, x: jax.device_put(x, a.sharding), abstract, state)
        return placed, step + 1


class ShardsStateAlongReplicas(ReferenceTrainer):
    """A model-parallel spec put on the wrong axis: each Snapshotter copy holds only a piece;
    writes the process that asked it how it shards (``TRAINER_PID_FILE``)."""

    def state_sharding(self, mesh: Any) -> Any:
        import jax

        path = os.environ.get("TRAINER_PID_FILE")
        if path:
            with open(path, "a") as f:
                f.write(f"{os.getpid()}\n")
        return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("replica"))


class ShardingRaises(ReferenceTrainer):
    """Its ``state_sharding`` needs a config file the test machine does not have."""

    def state_sharding(self, mesh: Any) -> Any:
        raise FileNotFoundError("sharding.yaml")
