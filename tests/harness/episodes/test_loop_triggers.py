"""A trigger a user's loop cannot fire on is refused in one line, never a traceback."""

from __future__ import annotations

import pytest

from pathways_chaos.harness.cli.replay import replay_main
from pathways_chaos.harness.episodes.loop_episode import LOOP_TRIGGERS


def test_replay_of_a_callback_trigger_on_a_loop_with_no_callback_is_not_judged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """It was refused ("not available"): a loop's callback is watched now; one that passes
    none is told how to give one, and the episode is not judged for that fault."""
    code = replay_main(
        [
            "--loop",
            "pathways_chaos.harness.reference.user_loop:main",
            "--schedule",
            "callback_error@callback=1",
        ]
    )
    out = capsys.readouterr().out
    assert code == 5, out
    assert "on_elastic_event_callback was called 0 times" in out, out


def test_every_trigger_kind_is_a_loop_trigger() -> None:
    from pathways_chaos.faults.model import TRIGGER_KINDS

    assert set(TRIGGER_KINDS) == {*LOOP_TRIGGERS, "time"}


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("data_loss@batch=3:slice=9", "slice 9 is outside the cluster's 4 slices (use 0..3)"),
        ("kill_pods@batch=3:slice=1", "needs --cluster"),
    ],
)
def test_play_loop_refuses_what_no_run_can_act_out_before_any_run(
    tmp_path, schedule: str, message: str
) -> None:
    """The trainer's front door refused these in one line; a loop's started a child first and
    came back as 'a bug in pathways-chaos' (a slice outside the cluster)."""
    from pathways_chaos.harness.errors import ChaosError
    from pathways_chaos.harness.play import play_loop

    with pytest.raises(ChaosError) as refused:
        play_loop(
            "pathways_chaos.harness.reference.user_loop:main",
            schedule,
            log_path=tmp_path / "e.jsonl",
            checkpoint_dir=tmp_path / "c",
        )
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert not (tmp_path / "e.jsonl").exists()  # refused before any run
