"""End to end: hypothesis writes fault schedules rule by rule; the oracle judges each one.

A failure prints the shrunk schedule and the `pathways-chaos replay ...` command that
reproduces it as one episode. The trainer is ``--chaos-trainer`` (the reference by default;
the conftest records it before this module is imported); ``--hypothesis-show-statistics``
lists how often episodes include a loss, a repair, an in-loop scale-up, a mesh shrink, a
failure or loss during an in-flight save and a callback error, and the invalid (discarded)
examples, which run no episode.
"""

from __future__ import annotations

from pathways_chaos.harness.properties import episode_machine, session_trainer

TestEpisodes = episode_machine(session_trainer()).TestCase
