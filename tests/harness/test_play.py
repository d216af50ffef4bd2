"""One door, one outcome: ``play`` runs the trainer or a loop (``loop=``) and refuses an argument
of the other subject in one line; an MTC job's property findings count in its outcome."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pathways_chaos.harness.judging.verdict import OracleViolation, Verdict
from pathways_chaos.harness.play import Outcome


def _verdict(violations: list[str]) -> Verdict:
    return Verdict(violations, True, [], 0, [], None)


def test_an_mtc_property_finding_fails_an_outcome_the_oracle_passed() -> None:
    result = SimpleNamespace(events=[{"kind": "run_end"}], error=None)
    clean = Outcome(result, _verdict([]))  # type: ignore[arg-type]
    assert clean.ok and clean.error is None
    clean.raise_if_failed()
    broken = Outcome(result, _verdict([]), ["restore took a step no tier held"])  # type: ignore[arg-type]
    assert not broken.ok and repr(broken) == "Outcome(1 events, 1 violations)"
    with pytest.raises(AssertionError, match=r"MTC properties violated:\n *restore took"):
        broken.raise_if_failed()
    with pytest.raises(OracleViolation, match="lost a sample"):
        Outcome(result, _verdict(["lost a sample"])).raise_if_failed()  # type: ignore[arg-type]


def test_a_loop_in_its_child_starts_without_the_slices_the_test_took_down(tmp_path) -> None:
    """``play_loop(cluster=fake)`` with slice 3 down before the episode: the loop's child starts
    on the other three, as the in-process loop did (the child makes its own fake)."""
    from pathways_chaos.harness.engine.fake_cluster import FakeCluster
    from pathways_chaos.harness.engine.topology import SliceTopology
    from pathways_chaos.harness.play import play_loop

    with FakeCluster(SliceTopology(4, 2)) as fake:
        fake.lose_slice(3)
        out = play_loop(
            "pathways_chaos.harness.reference.user_loop:main",
            cluster=fake,
            checkpoint_dir=tmp_path / "checkpoints",
            clean_rerun=False,
        )
    meshes = [e for e in out.result.events if e["kind"] == "mesh"]
    assert meshes and meshes[0]["slices"] == [0, 1, 2], meshes[:1]
    assert out.result.completed, out.result.error


def test_play_is_the_one_door_for_a_loop_too(tmp_path: Path) -> None:
    """``play(schedule, loop=...)`` runs and judges a loop as the loop's own function did."""
    from pathways_chaos.harness.play import play

    loop = "pathways_chaos.harness.reference.user_loop:main"
    out = play("data_loss@batch=6:slice=1", loop=loop, checkpoint_dir=tmp_path / "c")
    assert out.result.subject == loop
    assert "exactly-once" in out.verdict.judged and out.verdict.violations == []
    assert out.verdict.central == ("faults-fired", "exactly-once", "final-state")


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"loop": "m:f", "config": object()}, "config= is not for a loop"),
        ({"loop": "m:f", "replay": False}, "replay= is not for a loop"),
        ({"baseline": []}, "baseline= is not for the reference trainer: pass loop="),
        ({"options": {}, "deadline": object()}, "options=, deadline= are not for the reference"),
    ],
)
def test_an_argument_of_the_other_subject_is_refused_in_one_line(
    kwargs: dict[str, Any], said: str
) -> None:
    from pathways_chaos.harness.errors import ChaosConfigError
    from pathways_chaos.harness.play import play

    with pytest.raises(ChaosConfigError) as error:
        play("", **kwargs)
    assert said in str(error.value) and "\n" not in str(error.value)
