"""A CLI command run in-process leaves the libraries' log levels as it found them."""

from __future__ import annotations

import logging

import pytest

from pathways_chaos.harness.cli.main import main
from pathways_chaos.harness.cli.quiet import (
    NOISY_LOGGERS,
    quiet_libraries,
    restores_library_logging,
)
from pathways_chaos.harness.cli.replay import replay_loop_main, replay_main


def test_a_quieted_command_restores_the_levels_even_when_it_raises() -> None:
    before = {name: logging.getLogger(name).level for name in NOISY_LOGGERS}

    @restores_library_logging
    def command() -> int:
        quiet_libraries()
        assert logging.getLogger("absl").level == logging.CRITICAL
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        command()
    assert {name: logging.getLogger(name).level for name in NOISY_LOGGERS} == before


@pytest.mark.parametrize("entry", [main, replay_main, replay_loop_main])
def test_every_entry_that_quiets_restores(entry: object) -> None:
    # The entries call quiet_libraries(); unwrapped, a test that replays in-process silenced
    # Orbax's error log for every later test on the same worker.
    assert getattr(entry, "__wrapped__", None) is not None
