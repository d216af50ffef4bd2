"""Replay equality: the committed batches replayed on one device with no faults give the run's
final state. The replay runs the same trainer class (its own ``init_state``, ``before_step``,
``place_batch`` and ``step_function``); only when that class cannot be rebuilt does it fall
back to the reference model's step, and every message says which."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from pathways_chaos.harness.engine.recorder import Event
from pathways_chaos.harness.judging.committed import StepRecord, run_start

#: Replay tolerance. The fake-cluster run reduces each step's gradient over a batch sharded
#: across up to 64 CPU devices, the replay on one: float32 sums in a different order differ
#: by a few ulps per step, and 100 SGD-with-momentum steps of a contracting MLP keep that
#: well under 1e-5 relative. A wrong batch, a skipped or repeated step moves params by >1e-3.
REPLAY_RTOL = 2e-5
REPLAY_ATOL = 2e-6

#: Loss tolerance when locating the first step where the run and the replay part ways (a
#: locator only: the verdict is the final state's comparison).
LOSS_RTOL = 1e-4
LOSS_ATOL = 1e-6


@dataclasses.dataclass(frozen=True)
class ReplayNotRun:
    """A replay the caller chose not to run (a trainer only a log named): the judge says
    "not judged" with ``why``."""

    why: str


#: A replay run elsewhere (a child process, for a trainer the toolkit did not write): the state
#: it reached, its losses and where it ran; or why it failed; or why it was not run.
Replayed = tuple[dict[str, np.ndarray], list[float], str] | str | ReplayNotRun


def check_replay(
    events: Sequence[Event],
    lineage: Sequence[StepRecord],
    trainer: Any = None,
    replayed_elsewhere: Replayed | None = None,
) -> list[str] | str:
    """Replays the committed batches on one device, with no faults, and compares (a string:
    not judged, and why).

    ``replayed_elsewhere``: the trainer's replay, already run in its own process (code the
    toolkit did not write never runs in the judging one)."""
    if isinstance(replayed_elsewhere, ReplayNotRun):
        return replayed_elsewhere.why
    final = next((e for e in reversed(events) if e["kind"] == "run_end"), None)
    start = run_start(events)
    if final is None or start is None or "final_state" not in final:
        return ["replay impossible: the log has no final state"]
    name = start.get("trainer")
    same = "a fault-free run of the same trainer ({}) {} over the committed batches"
    if isinstance(replayed_elsewhere, tuple):  # run by the trainer's class, never imported here
        replayed, losses, where = replayed_elsewhere
        judge = same.format(name or "the episode's", where)
    elif isinstance(replayed_elsewhere, str) and not replayed_elsewhere.startswith(
        "LoopUnloadable"
    ):
        raise RuntimeError(f"the replay's process failed: {replayed_elsewhere}")
    else:
        if replayed_elsewhere is None:
            cls, why = replay_trainer(start, trainer)
        else:
            cls, why = None, f"trainer {name} cannot be imported: {replayed_elsewhere}"
        if cls is not None:
            replayed, losses, where = replay_with_trainer(
                cls, start["config"], lineage, start.get("slices")
            )
            judge = same.format(name or f"{cls.__module__}:{cls.__qualname__}", where)
        else:
            judge = f"a one-device replay of the reference model's step ({why})"
            replayed, losses = replay_state(start["config"], lineage)
    problems = compare_state(final["final_state"], replayed, judge)
    if problems:
        problems[0] += _first_divergence(lineage, losses)
    return problems


#: A trainer of the toolkit's own, by name: the only kind a log may name for this process to
#: import (``pathways_chaos.`` then dotted identifiers: never a file path, never ``..``).
TOOLKIT_TRAINER = re.compile(r"pathways_chaos(\.[A-Za-z_]\w*)+:[A-Za-z_][\w.]*")


def is_toolkit_trainer(spec: str) -> bool:
    """Whether ``spec`` names a trainer in the toolkit's package (``X.py`` is read as a file)."""
    module = spec.partition(":")[0]
    return TOOLKIT_TRAINER.fullmatch(spec) is not None and not module.endswith(".py")


def replay_trainer(start: Event, trainer: Any = None) -> tuple[Any, str]:
    """The trainer class to replay with, or None and why the model's step stands in."""
    from pathways_chaos.harness.reference.trainer import ReferenceTrainer

    if trainer is None:
        spec = start.get("trainer")
        if not spec:
            return None, "the log names no trainer"
        if not is_toolkit_trainer(str(spec)):
            return None, f"the log names trainer {spec}, not one of the toolkit's"
        from pathways_chaos.harness.engine.user_modules import load_name

        try:
            trainer = load_name(str(spec))
        except (ValueError, ImportError, AttributeError) as error:
            return None, f"trainer {spec} cannot be imported: {error}"
    if not (isinstance(trainer, type) and issubclass(trainer, ReferenceTrainer)):
        return None, f"{trainer!r} is not a ReferenceTrainer subclass"
    return trainer, ""


def replay_with_trainer(
    cls: Any,
    config: dict[str, Any],
    lineage: Sequence[StepRecord],
    slices: dict[str, list[int]] | None = None,
) -> tuple[dict[str, np.ndarray], list[float], str]:
    """The trainer's own step path (same seeds, same hooks), step after committed step.

    On one device, unless the trainer says its math depends on the mesh
    (``replay_on_one_device = False``): then each step runs on the mesh of the slices it ran
    on (``mesh_slices``), when this process has those devices. Returns where it ran.
    """
    import jax

    from pathways_chaos.harness.engine.recorder import Recorder
    from pathways_chaos.harness.reference.data import SyntheticData
    from pathways_chaos.harness.reference.trainer import TrainerConfig

    fields = {f.name for f in dataclasses.fields(TrainerConfig)}
    values = {k: v for k, v in config.items() if k in fields}
    values["data"] = SyntheticData(**config["data"])
    trainer_config = TrainerConfig(**values)
    device = jax.devices("cpu")[0]
    trainer = cls(trainer_config, Recorder(None), devices=[device], run_index=1)
    by_id = {d.id: d for d in jax.devices("cpu")}
    per_mesh = not getattr(cls, "replay_on_one_device", True) and slices is not None
    if per_mesh and slices is not None:
        wanted = {i for ids in slices.values() for i in ids}
        per_mesh = wanted <= set(by_id) and all(r.mesh_slices for r in lineage)
    one = ReplayManager({0: [device]}, [0])

    def manager_of(record: StepRecord) -> ReplayManager:
        if not per_mesh or slices is None or not record.mesh_slices:
            return one
        mapping = {int(s): [by_id[i] for i in ids] for s, ids in slices.items()}
        return ReplayManager(mapping, list(record.mesh_slices))

    # The mesh and the jitted step come from the trainer's own seam, as in the run: a trainer
    # that sets state up in mesh_and_step (or names its mesh axes its own way) replays too.
    steps: dict[tuple[int, ...], tuple[Any, Any]] = {}
    losses: list[float] = []
    with jax.default_device(device):
        state = trainer.init_state()
        for record in lineage:
            manager = manager_of(record)
            key = tuple(sorted(manager.active_slice_indices))
            if key not in steps:
                steps[key] = trainer.mesh_and_step(manager, "replay")
            mesh, step_fn = steps[key]
            state = jax.device_put(state, trainer.state_sharding(mesh))
            batch = trainer_config.data.batch(list(record.ids))
            placed = trainer.place_batch(trainer.before_step(record.step, batch), mesh)
            state, loss = step_fn(state, *placed)
            losses.append(float(np.asarray(loss).ravel()[0]) if np.size(loss) else 0.0)
        flat = jax.tree_util.tree_flatten_with_path(jax.device_get(state))[0]
    where = "on the meshes the committed steps ran on" if per_mesh else "on one device"
    return {jax.tree_util.keystr(p): np.asarray(v) for p, v in flat}, losses, where


class ReplayManager:
    """What a trainer's ``mesh_and_step`` reads of pathwaysutils' ``Manager``, for the replay:
    the slices (one device, or the run's slices) and which of them are active."""

    def __init__(self, slice_to_devices: dict[int, list[Any]], active: Sequence[int]) -> None:
        self.slice_to_devices = slice_to_devices
        self.active_slice_indices = set(active)
        self.available_inactive_slices: frozenset[int] = frozenset()

    @property
    def total_slice_count(self) -> int:
        return len(self.slice_to_devices)

    @property
    def active_slice_count(self) -> int:
        return len(self.active_slice_indices)

    def scale_by_active_slices(self, x: int | float) -> int | float:
        if isinstance(x, int):
            return x * self.active_slice_count // self.total_slice_count
        return x * self.active_slice_count / self.total_slice_count


def replay_state(
    config: dict[str, Any], lineage: Sequence[StepRecord]
) -> tuple[dict[str, np.ndarray], list[float]]:
    """The reference model's step over the committed batches (no trainer to replay)."""
    import functools

    import jax

    from pathways_chaos.harness.reference import model
    from pathways_chaos.harness.reference.data import SyntheticData

    data = SyntheticData(**config["data"])
    device = jax.devices("cpu")[0]
    step = jax.jit(functools.partial(model.train_step, lr=config["lr"], beta=config["beta"]))
    losses: list[float] = []
    with jax.default_device(device):
        state = model.init_state(config["seed"])
        for record in lineage:
            batch = data.batch(list(record.ids))
            state, loss = step(state, batch["x"], batch["y"])
            losses.append(float(loss))
        flat = jax.tree_util.tree_flatten_with_path(jax.device_get(state))[0]
    return {jax.tree_util.keystr(p): np.asarray(v) for p, v in flat}, losses


def _first_divergence(lineage: Sequence[StepRecord], losses: Sequence[float]) -> str:
    for record, want in zip(lineage, losses, strict=False):
        if record.loss is None:
            return ""
        if not np.isclose(record.loss, want, rtol=LOSS_RTOL, atol=LOSS_ATOL):
            return (
                f"; the first committed step whose loss differs is step {record.step} "
                f"(run {record.run}, attempt {record.attempt}): {record.loss:.6g}, "
                f"replay {want:.6g}"
            )
    return "; every committed step's loss matches the replay's: the final update differs"


def compare_state(
    final: dict[str, Any],
    replayed: dict[str, np.ndarray],
    judge: str = "a one-device replay of the committed batches",
) -> list[str]:
    if sorted(final) != sorted(replayed):
        return [f"final state leaves {sorted(final)} differ from the replay's {sorted(replayed)}"]
    for path in sorted(final):
        got = np.asarray(final[path]["values"], dtype=final[path]["dtype"]).reshape(
            final[path]["shape"]
        )
        want = replayed[path]
        if got.shape != want.shape:
            return [f"leaf {path}: shape {got.shape} differs from the replay's {want.shape}"]
        # a NaN where the other side has a NaN too is the same state (a loss's running
        # best that starts at NaN), as the loop's final-state judge counts it
        if not np.allclose(got, want, rtol=REPLAY_RTOL, atol=REPLAY_ATOL, equal_nan=True):
            diff = np.abs(got.astype(np.float64) - np.asarray(want, dtype=np.float64))
            worst = float(np.nanmax(diff)) if not np.all(np.isnan(diff)) else float("nan")
            return [
                f"final state differs from {judge} at leaf "
                f"{path}: max abs diff {worst:.3g} "
                f"(tolerance rtol={REPLAY_RTOL}, atol={REPLAY_ATOL})"
            ]
    return []
