"""Never hang, never crash, never blame the user (issue 20, the trainer side).

A run that waits for what never comes ends with what it waited for; the oracle and the seams
take valid subclasses; a toolkit exception in a judge is "not judged", not the trainer's fault;
a misspelt override is named.
"""

from __future__ import annotations

import threading
import time
import warnings

import numpy as np
import pytest

from pathways_chaos.harness.engine import seams
from pathways_chaos.harness.engine.deadline import (
    Deadline,
    EpisodeDeadlineExceeded,
    UnsatisfiableWait,
    episode_deadline,
    parse_seconds,
)
from pathways_chaos.harness.errors import ChaosConfigError
from pathways_chaos.harness.judging import oracle
from pathways_chaos.harness.judging import verdict as verdict_module
from pathways_chaos.harness.reference.overrides import TrainerOverrideWarning, dead_overrides
from pathways_chaos.harness.reference.trainer import ReferenceTrainer, TrainerConfig


def _play(schedule="", *, deadline=None, trainer=None, **config):
    from pathways_chaos.faults.model import parse_schedule
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology
    from pathways_chaos.harness.episodes.episode import run_episode

    with FakeCluster(SliceTopology(4, 2)) as fake:
        result = run_episode(
            fake,
            TrainerConfig(**config),
            parse_schedule(schedule),
            trainer_factory=trainer or ReferenceTrainer,
            deadline=deadline,
        )
        guards = list(fake.clock._guards)
    return result, guards


def _nothing_left(guards):
    assert guards == []  # the deadline's clock guard is gone
    assert seams._ACTIVE == []  # no pathwaysutils or JAX seam stays patched
    assert [t for t in threading.enumerate() if t.name == "pathways-chaos-deadline"] == []


# -- 1. deadlines ---------------------------------------------------------------------------
def test_a_wait_for_a_slice_that_never_returns_ends_at_the_fake_deadline():
    """Pause-and-resume with no wait timeout and a slice never repaired waits forever."""
    t0 = time.monotonic()
    result, guards = _play(
        "data_loss@step=3:slice=1",
        deadline=Deadline(fake_s=200),
        mode="pause_resume",
        timeout=None,
        final_step=10,
    )
    assert isinstance(result.error, EpisodeDeadlineExceeded)
    message = str(result.error)
    assert "deadline of 200 s on the fake clock" in message
    assert "the loop waits for 4 slices; this cluster has 4, 3 alive (slices [0, 2, 3])" in message
    verdict = oracle.check(result.events, replay=False)
    assert any("waits for 4 slices" in v for v in verdict.violations)
    assert time.monotonic() - t0 < 60
    _nothing_left(guards)


class SpinningTrainer(ReferenceTrainer):
    """Spins without the clock at step 4 (a user bug no fake-clock deadline can see)."""

    def before_step(self, step, batch):
        while step == 4:
            pass
        return batch


def test_code_that_spins_without_the_clock_ends_at_the_wall_deadline():
    t0 = time.monotonic()
    result, guards = _play(deadline=Deadline(wall_s=1.5), trainer=SpinningTrainer, final_step=8)
    assert isinstance(result.error, EpisodeDeadlineExceeded)
    message = str(result.error)
    assert "wall-time deadline of 1.5 s" in message
    assert "test_trainer_guard.py" in message and "before_step" in message  # where it spun
    assert time.monotonic() - t0 < 30
    _nothing_left(guards)


def test_a_run_within_its_deadlines_is_untouched():
    result, guards = _play(
        "data_loss@step=3:slice=1", deadline=Deadline(fake_s=500, wall_s=120), final_step=8
    )
    assert result.error is None and result.completed
    _nothing_left(guards)


def test_an_unsatisfiable_slice_wait_ends_at_once_and_says_so():
    """What a port's elastic_retry(minimum_slice_count=5) does on 4 slices."""
    from pathwaysutils.elastic import elastic

    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology

    with FakeCluster(SliceTopology(4, 2)) as fake:
        mapping = elastic.get_slice_to_devices(fake.devices)
        t0 = fake.clock.time()
        with (
            episode_deadline(fake.clock, Deadline(fake_s=10_000), cluster=fake),
            pytest.raises(UnsatisfiableWait) as caught,
        ):
            elastic.wait_for_slices(5, poll_interval=10, slice_to_devices=mapping)
        assert fake.clock.time() - t0 <= 10  # one poll, not the deadline
        assert fake.clock._guards == []
    assert "the loop waits for 5 slices; this cluster has 4" in str(caught.value)
    assert "minimum_slice_count=5" in str(caught.value)


def test_a_satisfiable_wait_is_not_mistaken_for_an_unsatisfiable_one():
    from pathwaysutils.elastic import elastic

    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology

    with FakeCluster(SliceTopology(4, 2)) as fake:
        mapping = elastic.get_slice_to_devices(fake.devices)
        fake.lose_slice(3, repair_after_polls=2)
        with episode_deadline(fake.clock, Deadline(fake_s=1000), cluster=fake):
            assert elastic.wait_for_slices(4, poll_interval=10, slice_to_devices=mapping) == {
                0,
                1,
                2,
                3,
            }


def test_more_slices_than_the_cluster_has_is_refused_before_the_run():
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology
    from pathways_chaos.harness.episodes.episode import run_episode

    seen = []
    with FakeCluster(SliceTopology(4, 2)) as fake, pytest.raises(ChaosConfigError) as caught:
        run_episode(fake, TrainerConfig(minimum_slice_count=5), listeners=[seen.append])
    assert "minimum_slice_count=5 does not fit 4 slices: use 1..4" in str(caught.value)
    assert "\n" not in str(caught.value)
    assert seen == []  # refused before anything ran


@pytest.mark.parametrize("raw", ["-3", "soon", "nan", "inf", ""])
def test_a_bad_deadline_value_is_one_line(raw):
    with pytest.raises(ChaosConfigError, match=r"--chaos-deadline=.*use a number of seconds"):
        parse_seconds(raw, "--chaos-deadline")


def test_deadline_values():
    assert parse_seconds("90", "--x") == 90.0
    assert parse_seconds("off", "--x") is None
    with pytest.raises(ChaosConfigError, match="--chaos-wall-deadline=0"):
        Deadline(wall_s=0)


def test_the_plugin_checks_the_deadline_options():
    from pathways_chaos.harness.pytest_plugin.option_checks import first_problem

    class Config:
        def __init__(self, **values):
            self.values = values

        def getoption(self, name, default=None):
            return self.values.get(name, default)

    assert first_problem(Config(chaos_deadline="600", chaos_wall_deadline="off")) is None
    problem = first_problem(Config(chaos_wall_deadline="ten"))
    assert problem is not None and problem.startswith("--chaos-wall-deadline='ten'")


# -- 3. the oracle and the seams never crash on valid code ------------------------------------
class MeshStateTrainer(ReferenceTrainer):
    """A correct subclass that sets state up in mesh_and_step and reads it later."""

    def mesh_and_step(self, manager, reason):
        mesh, step = super().mesh_and_step(manager, reason)
        self.scale = np.float32(1.0)  # set here, read by before_step
        return mesh, step

    def before_step(self, step, batch):
        return {**batch, "x": batch["x"] * self.scale}


class AxisNamesTrainer(ReferenceTrainer):
    """A correct subclass whose mesh has its own axis names."""

    def build_mesh(self, manager):
        import jax

        devices = np.asarray(self.active_devices(manager), dtype=object)
        return jax.sharding.Mesh(
            devices.reshape(manager.active_slice_count, -1), ("slices", "fsdp")
        )

    def place_batch(self, batch, mesh):
        import jax
        from jax.sharding import NamedSharding, PartitionSpec

        sharding = NamedSharding(mesh, PartitionSpec(("slices", "fsdp")))
        return jax.device_put(batch["x"], sharding), jax.device_put(batch["y"], sharding)


@pytest.mark.parametrize("trainer", [MeshStateTrainer, AxisNamesTrainer])
def test_the_replay_builds_the_trainer_through_its_own_seams(trainer):
    result, _ = _play("data_loss@step=4:slice=2", trainer=trainer, final_step=10)
    assert result.completed, result.error
    verdict = oracle.check(result.events, trainer=trainer)
    assert verdict.not_judged == {}
    assert verdict.ok, verdict.violations


def test_a_toolkit_exception_in_a_judge_is_a_judge_error_never_a_pass(monkeypatch):
    result, _ = _play(final_step=6)

    def broken(*args):
        raise KeyError("oops")

    monkeypatch.setattr(oracle, "check_meshes", broken)
    verdict = oracle.check(result.events)
    assert verdict.violations == []  # the trainer is not blamed
    assert not verdict.ok  # and the verdict is not a pass
    assert "mesh-rebuild" not in verdict.judged and "mesh-rebuild" not in verdict.not_judged
    reason = verdict.judge_errors["mesh-rebuild"]
    assert reason.startswith("KeyError: 'oops'\n")
    assert "Traceback" in reason and "in broken" in reason
    with pytest.raises(
        verdict_module.OracleViolation, match=r"the judge failed: a bug in pathways-chaos"
    ):
        verdict.raise_if_failed()


def test_the_device_loss_seam_wraps_a_snapshotter_subclass_that_inherits_load(monkeypatch):
    """A subclass put in orbax's place that does not define load itself (KeyError: 'load')."""
    from orbax.checkpoint.experimental.v1.training import pathways

    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology

    base = pathways.Snapshotter
    original_load = base.__dict__["load"]

    class TeamSnapshotter(base):
        def save(self, *args, **kwargs):
            return super().save(*args, **kwargs)

    monkeypatch.setattr(pathways, "Snapshotter", TeamSnapshotter)
    with FakeCluster(SliceTopology(4, 2)) as fake:  # raised KeyError: 'load' on start
        assert base.__dict__["load"] is not original_load  # the defining class is wrapped
        import jax
        from jax.sharding import NamedSharding, PartitionSpec

        mesh = jax.sharding.Mesh(np.asarray(fake.devices, dtype=object).reshape(4, 2), ("r", "d"))
        sharding = NamedSharding(mesh, PartitionSpec())
        snapshotter = TeamSnapshotter(replica_axis_index=0)
        snapshotter.save(0, {"w": jax.device_put(np.arange(4.0, dtype=np.float32), sharding)})
        snapshotter.join()
        fake.lose_slice(2, "NOT_FOUND")
        abstract = {"w": jax.ShapeDtypeStruct((4,), np.float32, sharding=sharding)}
        with pytest.raises(jax.errors.JaxRuntimeError, match="NOT_FOUND"):
            snapshotter.load(abstract)  # inherited load, guarded
    assert base.__dict__["load"] is original_load
    assert seams._ACTIVE == []


def test_defining_class():
    class A:
        def f(self):
            pass

    class B(A):
        pass

    assert seams.defining_class(B, "f") is A
    with pytest.raises(AttributeError, match="no attribute 'g'"):
        seams.defining_class(B, "g")


# -- 4. overrides checked -----------------------------------------------------------------
PUBLIC_SEAMS = (
    "make_snapshotter",
    "on_elastic_event",
    "before_step",
    "build_mesh",
    "mesh_and_step",
    "settle_snapshots",
    "restore_snapshot",
    "train_attempt",
)


@pytest.mark.parametrize("seam", PUBLIC_SEAMS)
def test_a_method_named_like_a_renamed_seam_gets_a_warning_naming_both(seam):
    stale = type("Stale", (ReferenceTrainer,), {f"_{seam}": lambda self, *a: None})
    assert dead_overrides(stale) == [(f"_{seam}", seam)]
    from pathways_chaos.harness.reference.overrides import warn_dead_overrides

    with pytest.warns(TrainerOverrideWarning, match=rf"_{seam} is not a method.*{seam}"):
        warn_dead_overrides(stale)


def test_real_overrides_and_new_helpers_are_not_warned_about():
    from pathways_chaos.harness.acceptance.loop import AdapterTrainer
    from pathways_chaos.harness.reference import mutants, variants

    class Good(ReferenceTrainer):
        def mesh_and_step(self, manager, reason):
            return super().mesh_and_step(manager, reason)

        def my_helper(self):
            return 1

    assert dead_overrides(Good) == []
    assert dead_overrides(AdapterTrainer) == []
    for module in (mutants, variants):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, ReferenceTrainer):
                assert dead_overrides(value) == [], value


def test_an_episode_warns_about_a_dead_override():
    stale = type("Stale", (ReferenceTrainer,), {"_mesh_and_step": lambda self, *a: None})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _play(trainer=stale, final_step=2)
    texts = [str(w.message) for w in caught if w.category is TrainerOverrideWarning]
    assert texts and "did you mean 'mesh_and_step'" in texts[0]


# -- what the run was waiting for -----------------------------------------------------------
def _blocked_frame(filename: str, function: str):
    """A thread blocked in ``function`` defined in ``filename``; returns (frame, release)."""
    import sys

    namespace: dict = {}
    source = f"def {function}(event):\n    event.wait(30)\n"
    exec(compile(source, filename, "exec"), namespace)
    event = threading.Event()
    thread = threading.Thread(target=namespace[function], args=(event,), daemon=True)
    thread.start()
    for _ in range(200):
        frame = sys._current_frames().get(thread.ident)
        while frame is not None and frame.f_code.co_name != function:
            frame = frame.f_back
        if frame is not None:
            break
        time.sleep(0.01)

    def release():
        event.set()
        thread.join()

    return sys._current_frames()[thread.ident], release


@pytest.mark.parametrize(
    ("filename", "function", "expected"),
    [
        ("/site-packages/orbax/snapshotter.py", "join", "a snapshot save in flight"),
        ("/harness/engine/save_gate.py", "finish", "a snapshot save in flight"),
        ("/harness/engine/fake_cluster.py", "_health_check", "a slice health poll"),
        ("/home/team/train.py", "my_loop", "the run was at /home/team/train.py:2 in my_loop"),
    ],
)
def test_the_deadline_says_what_the_run_waited_for(filename, function, expected):
    from pathways_chaos.harness.engine.deadline import describe_wait

    frame, release = _blocked_frame(filename, function)
    try:
        assert describe_wait(frame).startswith(expected)
    finally:
        del frame
        release()


@pytest.mark.parametrize(
    "argv",
    [
        ["demo", "--deadline", "soon"],
        ["demo", "--wall-deadline", "-1"],
        ["replay", "--deadline", "x"],
    ],
)
def test_the_cli_deadline_options_are_checked_in_one_line(argv, capsys):
    from pathways_chaos.harness.cli.main import main
    from pathways_chaos.harness.engine.deadline import default_deadline

    before = default_deadline()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "use a number of seconds > 0, or 'off'" in err and "\n" not in err
    assert default_deadline() == before  # nothing applied


def test_the_cli_deadline_becomes_every_episodes_default():
    import argparse

    from pathways_chaos.harness.cli.deadline_arguments import apply_deadline_arguments
    from pathways_chaos.harness.engine.deadline import default_deadline, set_default_deadline

    before = default_deadline()
    try:
        apply_deadline_arguments(argparse.Namespace(deadline="90", wall_deadline="off"))
        assert default_deadline() == Deadline(fake_s=90.0, wall_s=None)
    finally:
        set_default_deadline(before)


def test_an_unsatisfiable_wait_on_the_real_clock_ends_within_a_poll():
    from pathwaysutils.elastic import elastic

    from pathways_chaos.harness.engine.clock import RealClock
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology

    with FakeCluster(SliceTopology(4, 2), clock=RealClock()) as fake:
        mapping = elastic.get_slice_to_devices(fake.devices)
        t0 = time.monotonic()
        with (
            episode_deadline(fake.clock, Deadline(wall_s=120), cluster=fake),
            pytest.raises(UnsatisfiableWait, match="waits for 5 slices; this cluster has 4"),
        ):
            elastic.wait_for_slices(5, poll_interval=0.2, slice_to_devices=mapping)
        assert time.monotonic() - t0 < 30  # not the 120 s wall deadline
    assert [t for t in threading.enumerate() if t.name == "pathways-chaos-deadline"] == []
