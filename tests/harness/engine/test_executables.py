"""A mesh seen before in the process reuses its executables; a run still reports the mesh as
new to it and counts the compiles it would have made on its own."""

from __future__ import annotations

import functools

from pathways_chaos.harness.engine import executables
from pathways_chaos.harness.reference import model


def _compiles_during(body):
    import jax

    seen: list[str] = []

    def listener(event: str, duration: float, **_: object) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            seen.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        result = body()
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    return result, len(seen)


def test_a_second_run_on_the_same_meshes_compiles_nothing(fake_cluster_factory):
    from pathways_chaos.faults.model import parse_schedule
    from pathways_chaos.harness.episodes.episode import run_episode
    from pathways_chaos.harness.reference.trainer import TrainerConfig

    config = TrainerConfig(final_step=10, lr=0.0123)  # a step no other test has compiled

    def episode():
        with fake_cluster_factory(4, 2) as fake:
            return run_episode(fake, config, parse_schedule("data_loss@step=4:slice=3"))

    first, first_compiles = _compiles_during(episode)
    second, second_compiles = _compiles_during(episode)
    assert first_compiles >= 2  # the 4x2 mesh, then the 3x2 one
    assert second_compiles == 0
    for result in (first, second):
        meshes = [e for e in result.events if e["kind"] == "mesh"]
        assert [e["recompile"] for e in meshes] == [True, True]  # new to each run
    ends = [next(e for e in r.events if e["kind"] == "run_end") for r in (first, second)]
    # What each run would compile on its own (one per mesh here), executables shared or not:
    # the acceptance suite's steady-state recompile check reads it.
    assert [e["compiles"] for e in ends] == [2, 2]


def test_only_the_same_computation_and_sharding_share():
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = jax.devices("cpu")
    on_two = NamedSharding(Mesh(devices[:2], ("replica",)), PartitionSpec())
    on_four = NamedSharding(Mesh(devices[:4], ("replica",)), PartitionSpec())
    step = functools.partial(model.train_step, lr=0.5, beta=0.9)
    same = functools.partial(model.train_step, lr=0.5, beta=0.9)
    other = functools.partial(model.train_step, lr=0.25, beta=0.9)
    assert executables.jitted_step(step, on_two) is executables.jitted_step(same, on_two)
    assert executables.jitted_step(step, on_two) is not executables.jitted_step(other, on_two)
    assert executables.jitted_step(step, on_two) is not executables.jitted_step(step, on_four)
    closure = executables.jitted_step(lambda s, x, y: (s, x), on_two)
    assert closure is not executables.jitted_step(lambda s, x, y: (s, x), on_two)
