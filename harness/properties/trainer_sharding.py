"""A trainer's ``state_sharding``, asked of a trainer class this project did not write in a child.

Why: the snapshot round-trip property places its trees as the trainer under test shards its
state. A ``--chaos-trainer`` class is the team's code, which never runs in the judging process;
its child builds the same mesh on the same CPU devices, calls ``state_sharding`` and writes
the ``PartitionSpec`` as JSON (never a pickle), once per mesh shape. What it returns that is not
a ``NamedSharding`` on that mesh is said in one line.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import tempfile
from pathlib import Path
from typing import Any

from pathways_chaos.harness.episodes.child import ChildFiles, one_off
from pathways_chaos.harness.episodes.child_watch import one_off_error
from pathways_chaos.harness.episodes.loop_episode import said_at_its_line
from pathways_chaos.harness.errors import ChaosError


class ShardingUnavailable(ChaosError):
    """The trainer's child could not say how it shards its state (its code raised or ended)."""


@dataclasses.dataclass(kw_only=True)
class ShardingChildSpec(ChildFiles):
    trainer_spec: str
    slices: int
    out_file: str

    def run_in_child(self) -> None:
        one_off(self, lambda recorder: _ask(self, recorder))


def _ask(spec: ShardingChildSpec, recorder: Any) -> None:
    import jax

    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.recorder import Recorder
    from pathways_chaos.harness.engine.topology import SliceTopology
    from pathways_chaos.harness.engine.user_modules import load_name
    from pathways_chaos.harness.reference.trainer import TrainerConfig

    try:
        trainer = load_name(spec.trainer_spec)
    except BaseException as error:  # importing the team's module: anything goes
        recorder.emit("loop_unloadable", message=f"{type(error).__name__}: {error}"[:500])
        return
    with FakeCluster(SliceTopology.parse(spec.topology)) as fake:
        mesh = replica_mesh(fake.devices, spec.slices)
        try:
            sharding = trainer(TrainerConfig(), Recorder(None)).state_sharding(mesh)
        except BaseException as error:  # the trainer's code (a SystemExit too): its failure
            text = said_at_its_line(error)
            recorder.emit("run_end", run=spec.run, status="failed", error=text)
            return
        if not isinstance(sharding, jax.sharding.NamedSharding) or sharding.mesh != mesh:
            text = (
                f"state_sharding(mesh) returned {type(sharding).__name__}, not a NamedSharding "
                "on the mesh it was given: return jax.sharding.NamedSharding(mesh, spec)"
            )
            recorder.emit("run_end", run=spec.run, status="failed", error=text)
            return
        entries = [list(e) if isinstance(e, tuple) else e for e in sharding.spec]
        if not all(_entry_ok(e) for e in entries):
            text = (
                f"state_sharding(mesh) returned {sharding.spec}: the snapshot round trip "
                "places by axis names (None, a name, or a tuple of names per dimension)"
            )
            recorder.emit("run_end", run=spec.run, status="failed", error=text)
            return
    Path(spec.out_file).write_text(json.dumps({"spec": entries}))
    recorder.emit("run_end", run=spec.run, status="completed")


def replica_mesh(devices: list[Any], rows: int) -> Any:
    """The property's mesh: one row per slice, axes ``replica`` and ``data``."""
    import jax
    import numpy as np

    array = np.asarray(devices, dtype=object).reshape(rows, -1)
    return jax.sharding.Mesh(array, ("replica", "data"))


def partition_spec_of(trainer_spec: str, slices: int, devices_per_slice: int) -> Any:
    """The ``PartitionSpec`` the trainer ``trainer_spec`` gives its state on a ``slices`` x
    ``devices_per_slice`` mesh, from its child; ``ShardingUnavailable`` says why there is none.
    Asked once per shape: its answer, or why there is none, is kept for the session."""
    said = _asked(trainer_spec, slices, devices_per_slice)
    if isinstance(said, str):
        raise ShardingUnavailable(said)
    return said


@functools.cache
def _asked(trainer_spec: str, slices: int, devices_per_slice: int) -> Any:
    """The spec, or (a str) why there is none; a failure of ours raises and is not kept."""
    from jax.sharding import PartitionSpec

    from pathways_chaos.harness.episodes.supervised_trainer import child_files

    with tempfile.TemporaryDirectory(prefix="trainer-sharding-") as folder:
        work = Path(folder)
        log, out = work / "sharding.jsonl", work / "sharding.json"
        files = child_files(f"{slices}x{devices_per_slice}", log, work, "sharding", pickled=False)
        child = ShardingChildSpec(
            **files, trainer_spec=trainer_spec, slices=slices, out_file=str(out)
        )
        error = one_off_error(child, work, "trainer")
        if error is not None or not out.is_file():
            why = str(error) if error is not None else "its process wrote nothing"
            return f"the trainer {trainer_spec}'s state_sharding: {why}"
        entries = json.loads(out.read_text())["spec"]
    if not isinstance(entries, list) or not all(_entry_ok(e) for e in entries):
        return f"the trainer {trainer_spec}'s child wrote a malformed spec"
    return PartitionSpec(*(tuple(e) if isinstance(e, list) else e for e in entries))


def _entry_ok(entry: Any) -> bool:
    if entry is None or isinstance(entry, str):
        return True
    return isinstance(entry, list) and all(isinstance(x, str) for x in entry)
