"""Errors the toolkit raises: one base, so a caller can catch everything of ours in one clause.

Each keeps its standard-library base too (``ValueError`` for bad input, ``AssertionError`` for a
judged failure...), so existing ``except ValueError`` code keeps working.
"""


class ChaosError(Exception):
    """Base of every error pathways-chaos raises on purpose; the message is one line."""

    #: The process exit code a command-line front end uses for this error (documented in the
    #: README): 2 bad input, 3 refused for safety, 4 the cluster or its kubeconfig.
    exit_code = 2


class ChaosConfigError(ChaosError, ValueError):
    """A configuration that cannot work; the message names the fix."""
