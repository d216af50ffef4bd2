"""A fuzz of the trainer judges: ``--chaos-trainer`` subclasses built from correct building
blocks (state shapes, mesh axis names, snapshot keys, state set up in ``mesh_and_step``, save
intervals, recovery modes) run through chaos schedules. Every one must get a PASS or a NOT
JUDGED with a reason: never a toolkit exception, never a deadline hit, never a violation (a
correct trainer failing is the judge's bug).

Examples per run follow PATHWAYS_CHAOS_PROFILE (ci by default): deterministic in ci.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pathways_chaos.harness.engine.deadline import EpisodeDeadlineExceeded
from pathways_chaos.harness.reference import model
from pathways_chaos.harness.reference.data import FEATURES
from pathways_chaos.harness.reference.trainer import ReferenceTrainer, TrainerConfig

EXAMPLES = {"ci": 25, "dev": 200, "nightly": 2000}[os.environ.get("PATHWAYS_CHAOS_PROFILE", "ci")]
STATS: dict[str, Any] = {"generated": 0, "faulted": 0, "modes": {}, "seconds": 0.0}


# -- building blocks (each one correct on its own) ---------------------------------------------
def _init_state(trainer: Any, hidden: int, extra: tuple[int, ...]) -> Any:
    import jax
    import jax.numpy as jnp

    k1, k2 = jax.random.split(jax.random.key(trainer.config.seed))
    params = {
        "w1": jax.random.normal(k1, (FEATURES, hidden), jnp.float32) * 0.3,
        "b1": jnp.zeros((hidden,), jnp.float32),
        "w2": jax.random.normal(k2, (hidden, 1), jnp.float32) * 0.3,
    }
    if extra:
        params["unused"] = jnp.ones(extra, jnp.float32)  # a leaf the loss never reads
    return {"params": params, "momentum": jax.tree.map(jnp.zeros_like, params)}


def _build_mesh(trainer: Any, manager: Any, axes: tuple[str, str]) -> Any:
    import jax

    devices = np.asarray(trainer.active_devices(manager), dtype=object)
    return jax.sharding.Mesh(devices.reshape(manager.active_slice_count, -1), axes)


def _place_batch(trainer: Any, batch: Any, mesh: Any, axes: tuple[str, str]) -> Any:
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    n = len(batch["id"])
    if n % mesh.size == 0:
        spec = PartitionSpec(axes)
    elif n % mesh.shape[axes[0]] == 0:
        spec = PartitionSpec(axes[0])
    else:
        spec = PartitionSpec()
    sharding = NamedSharding(mesh, spec)
    return jax.device_put(batch["x"], sharding), jax.device_put(batch["y"], sharding)


def _payload(trainer: Any, state: Any, step: int, iterator: Any, keys: tuple[str, ...]) -> Any:
    return {keys[0]: state, keys[1]: step, keys[2]: iterator.get_state()}


def _restore(trainer: Any, snapshotter: Any, abstract: Any, iterator: Any, keys: Any) -> Any:
    restored = snapshotter.load({keys[0]: abstract, keys[1]: 0, keys[2]: iterator.get_state()})
    iterator.set_state(restored[keys[2]])
    return restored[keys[0]], int(restored[keys[1]]) + 1


def _mesh_and_step_with_setup(trainer: Any, manager: Any, reason: str) -> Any:
    mesh, step = ReferenceTrainer.mesh_and_step(trainer, manager, reason)
    trainer.input_scale = np.float32(1.0)  # set up here, read by before_step
    return mesh, step


def _before_step_reading_setup(trainer: Any, step: int, batch: Any) -> Any:
    return {**batch, "x": batch["x"] * trainer.input_scale}


def make_trainer(
    hidden: int,
    extra: tuple[int, ...],
    axes: tuple[str, str],
    keys: tuple[str, str, str],
    setup_in_mesh: bool,
) -> type[ReferenceTrainer]:
    body: dict[str, Any] = {
        "init_state": lambda self: _init_state(self, hidden, extra),
        "build_mesh": lambda self, manager: _build_mesh(self, manager, axes),
        "place_batch": lambda self, batch, mesh: _place_batch(self, batch, mesh, axes),
        "snapshot_payload": lambda self, s, step, it: _payload(self, s, step, it, keys),
        "restore_snapshot": lambda self, snap, abstract, it: _restore(
            self, snap, abstract, it, keys
        ),
        "step_function": lambda self: functools.partial(
            model.train_step, lr=self.config.lr, beta=self.config.beta
        ),
    }
    if setup_in_mesh:
        body["mesh_and_step"] = _mesh_and_step_with_setup
        body["before_step"] = _before_step_reading_setup
    name = f"Fuzzed_h{hidden}_{'_'.join(axes)}_{'_'.join(keys)}{'_setup' if setup_in_mesh else ''}"
    return type(name, (ReferenceTrainer,), body)


AXIS_NAMES = st.sampled_from([("replica", "data"), ("slices", "fsdp"), ("dp", "mp"), ("a", "b")])
KEYS = st.sampled_from(
    [("state", "step", "iterator_state"), ("model", "global_step", "data"), ("m", "s", "it")]
)


@st.composite
def episodes(draw: Any) -> tuple[type[ReferenceTrainer], TrainerConfig, str]:
    trainer = make_trainer(
        hidden=draw(st.sampled_from([4, 8, 16])),
        extra=draw(st.sampled_from([(), (3,), (2, 5)])),
        axes=draw(AXIS_NAMES),
        keys=draw(KEYS),
        setup_in_mesh=draw(st.booleans()),
    )
    mode = draw(st.sampled_from(["resize", "pause_resume"]))
    final_step = draw(st.integers(8, 14))
    interval = draw(st.integers(1, 5))
    at = draw(st.integers(1, final_step - 2))
    lost = draw(st.integers(0, 3))
    if mode == "pause_resume":
        faults = ["", f"data_loss@step={at}:slice={lost}:repair_after_polls=2"]
    else:
        back = min(at + 2, final_step - 1)
        faults = [
            "",
            f"data_loss@step={at}:slice={lost}",
            f"data_loss@step={at}:slice={lost},repair@step={back}:slice={lost}",
        ]
    schedule = draw(st.sampled_from(faults))
    config = TrainerConfig(mode=mode, final_step=final_step, snapshot_interval=interval)
    return trainer, config, schedule


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("PATHWAYS_CHAOS_PROFILE", "ci") == "ci",
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
@given(episodes())
def test_correct_trainers_pass_or_are_not_judged_with_a_reason(episode):
    from pathways_chaos.harness.play import play

    trainer, config, schedule = episode
    t0 = time.monotonic()
    # The judge's correctness on generated (local, unpicklable) classes: judged in this
    # process; tests/harness/episodes/test_supervised_trainer.py holds the isolation.
    outcome = play(schedule, config=config, topology="4x2", trainer=trainer, isolate=False)
    STATS["generated"] += 1
    STATS["faulted"] += bool(schedule)
    STATS["modes"][config.mode] = STATS["modes"].get(config.mode, 0) + 1
    STATS["seconds"] += time.monotonic() - t0
    error = outcome.result.error
    assert not isinstance(error, EpisodeDeadlineExceeded), str(error)
    assert error is None, f"{trainer.__name__} under {schedule!r}: {error!r}"
    verdict = outcome.verdict
    for name, reason in verdict.not_judged.items():  # NOT JUDGED must say why
        assert reason.strip(), name
    assert not verdict.judge_errors, verdict.judge_errors
    assert verdict.ok, f"{trainer.__name__} under {schedule!r}: {verdict.violations}"


def test_the_fuzz_generated_and_timed():
    """Runs after the fuzz (file order): what it generated and how long it took, as JSON."""
    import json

    if not STATS["generated"]:
        return  # selected alone
    print(json.dumps({"fuzz": "trainer judges", **STATS}))
    assert STATS["generated"] >= min(EXAMPLES, 1)
