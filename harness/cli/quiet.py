"""The libraries' own logging, silenced for a command whose output a person reads."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

NOISY_LOGGERS = ("pathwaysutils", "absl", "jax")


def quiet_libraries() -> None:
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)


def restores_library_logging[**P, R](command: Callable[P, R]) -> Callable[P, R]:
    """A command run in-process (a test, a notebook) leaves the libraries' log levels as it
    found them: a quieted ``absl`` logger silenced every later Orbax error log in that process."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        saved = {name: logging.getLogger(name).level for name in NOISY_LOGGERS}
        try:
            return command(*args, **kwargs)
        finally:
            for name, level in saved.items():
                logging.getLogger(name).setLevel(level)

    return run
