"""Errors the toolkit raises for bad input: one line that says what was wrong and what to do."""


class ChaosConfigError(ValueError):
    """A configuration that cannot work; the message names the fix."""
