"""End to end: hypothesis writes fault schedules rule by rule; the oracle judges each one.

A failure prints the shrunk schedule and the `pathways-chaos replay ...` command that
reproduces it as one episode. The trainer is ``--chaos-trainer`` (the reference by default,
the session fixture ``chaos_trainer``); ``--hypothesis-show-statistics``
lists how often episodes include a loss, a repair, an in-loop scale-up, a mesh shrink, a
failure or loss during an in-flight save and a callback error, and the invalid (discarded)
examples, which run no episode.
"""

from __future__ import annotations

from hypothesis.stateful import run_state_machine_as_test

from pathways_chaos.harness.properties import episode_machine


def test_episodes(chaos_trainer: str) -> None:
    run_state_machine_as_test(episode_machine(chaos_trainer))
