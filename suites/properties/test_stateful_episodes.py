"""End to end: hypothesis writes fault schedules rule by rule; the oracle judges each one.

A failure prints the shrunk schedule and the `pathways-chaos replay ...` command that
reproduces it as one episode.
"""

from __future__ import annotations

from pathways_chaos.harness.properties import episode_machine

TestEpisodes = episode_machine().TestCase
