"""Hooks pathways-chaos adds to pytest (registered with ``pluginmanager.add_hookspecs``)."""

from __future__ import annotations

from typing import Any


def pytest_chaos_episode_finished(node: Any, result: Any, verdict: Any) -> None:
    """Called after an episode ran in test ``node`` and the oracle judged it."""
