"""Errors the toolkit raises for bad input: one line that says what was wrong and what to do."""


class ChaosError(Exception):
    """Base of every error the toolkit raises on purpose; its message is one line with a fix."""

    #: The process exit code a command-line front end uses for this error (documented in the
    #: README): 2 bad input, 3 refused for safety, 4 the cluster or its kubeconfig.
    exit_code = 2


class ChaosConfigError(ChaosError, ValueError):
    """A configuration that cannot work; the message names the fix."""
