"""The libraries' own logging, silenced for a command whose output a person reads."""

from __future__ import annotations

import logging

NOISY_LOGGERS = ("pathwaysutils", "absl", "jax")


def quiet_libraries() -> None:
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)
