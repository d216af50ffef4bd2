"""Errors the toolkit raises: one base, so a caller can catch everything of ours in one clause.

Each keeps its standard-library base too (``ValueError`` for bad input, ``AssertionError`` for a
judged failure...), so existing ``except ValueError`` code keeps working.
"""


class ChaosError(Exception):
    """Base of every error pathways-chaos raises on purpose; the message is one line."""


class ChaosConfigError(ChaosError, ValueError):
    """A configuration that cannot work; the message names the fix."""
