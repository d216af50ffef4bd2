"""User code that misbehaves ends in a verdict naming the line, never in the session's exit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pathways_chaos.harness.episodes.loop_episode import load_loop
from pathways_chaos.harness.errors import ChaosConfigError

LOOPS = Path(__file__).parents[2] / "loops" / "misbehaving.py"


def _loop(name: str):
    return load_loop(f"{LOOPS}:{name}")


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("calls_sys_exit", "the loop called sys.exit(3)"),
        ("calls_os_exit", "the loop's process exited with code 0: os._exit(0)"),
        ("kills_itself", "the loop's process was killed by SIGKILL the loop sent itself"),
    ],
)
def test_an_exit_from_the_loop_is_a_failed_verdict_naming_the_line(chaos, name, said):
    pid = os.getpid()
    out = chaos.run_loop(_loop(name), "", baseline=False)

    assert os.getpid() == pid  # still here: the session did not end
    (crash,) = out.verdict.violations
    assert said in crash and "misbehaving.py" in crash, crash
    assert os._exit.__module__ in ("posix", "nt")  # the refusal was undone


@pytest.mark.parametrize("name", ["returns_a_string", "returns_at_once"])
def test_a_function_that_does_not_train_is_not_a_survivor(chaos, name):
    out = chaos.run_loop(_loop(name), "", baseline=False)

    assert not out.verdict.ok
    assert "returned at once without training" in out.verdict.violations[0]


def test_a_fault_that_cannot_fire_names_the_trigger_to_use(chaos):
    from pathways_chaos.harness.play import play_loop

    out = play_loop(_loop("trains_from_a_list"), "data_loss@batch=2:slice=1", cluster=chaos.cluster)

    (line,) = out.result.unfired
    assert "draws none it can see: use a save=, attempt= or time= trigger" in line


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"def main(:\n", "SyntaxError: invalid syntax at"),
        (b"\xb2\xff\x00binary", "SyntaxError"),
        (b"raise RuntimeError('boom at import')\n", "RuntimeError: boom at import at"),
    ],
)
def test_a_loop_module_that_cannot_load_is_one_line(tmp_path, content, said):
    module = tmp_path / "broken_loop.py"
    module.write_bytes(content)

    with pytest.raises(ChaosConfigError) as caught:
        load_loop(f"{module}:main")

    message = str(caught.value)
    assert said in message and "\n" not in message and str(module) in message
    assert message.startswith(f"loop='{module}:main' cannot be loaded"), message  # no option


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("", "loop is empty"),
        (f"{LOOPS}:NotALoop", "is a class, not a function"),
        ("x" * 5000 + ":main", "..."),
    ],
)
def test_a_loop_spec_that_names_no_loop_is_refused(spec, said):
    with pytest.raises(ChaosConfigError) as caught:
        load_loop(spec)
    assert said in str(caught.value) and len(str(caught.value)) < 600
    assert spec or str(caught.value).startswith("loop is empty"), caught.value  # no option


def test_a_loop_that_never_returns_ends_at_its_deadline_saying_where(chaos):
    from pathways_chaos.harness.engine.deadline import Deadline
    from pathways_chaos.harness.play import play_loop

    out = play_loop(
        _loop("never_returns"), cluster=chaos.cluster, deadline=Deadline(fake_s=60, wall_s=6)
    )

    (message,) = out.verdict.violations
    assert message.startswith("the run did not finish: the episode passed its wall-time")
    assert "misbehaving.py" in message and "never_returns" in message


def test_a_loop_blocked_deeper_than_a_stack_dump_keeps_is_still_found(chaos):
    """faulthandler keeps a thread's innermost 100 frames: the main thread is found by its
    id, not by the child's outermost frame, which such a dump leaves out."""
    from pathways_chaos.harness.engine.deadline import Deadline
    from pathways_chaos.harness.play import play_loop

    out = play_loop(
        _loop("blocks_deep_in_its_own_code"),
        cluster=chaos.cluster,
        deadline=Deadline(fake_s=60, wall_s=4),
    )

    (message,) = out.verdict.violations
    assert "misbehaving.py" in message and " in descend" in message, message


def test_a_loop_waiting_for_more_slices_than_the_cluster_has_is_told_at_once(chaos):
    from pathways_chaos.harness.play import play_loop

    out = play_loop(_loop("waits_for_five_slices"), cluster=chaos.cluster)

    assert "the loop waits for 5 slices; this cluster has 4" in str(out.result.error)
    assert out.verdict.violations[0].startswith("the run did not finish")


def test_a_crash_inside_a_library_is_named_at_the_loops_own_line(chaos):
    out = chaos.run_loop(_loop("saves_what_orbax_cannot"), "", baseline=False)

    (crash,) = out.verdict.violations
    assert "misbehaving.py" in crash and "snapshotter.save(0, state)" in crash, crash
    assert "observer.py" not in crash and "asyncio" not in crash
