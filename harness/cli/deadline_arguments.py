"""``--deadline`` and ``--wall-deadline``, and the range of an episode's steps, shared by
every ``pathways-chaos`` command that plays an episode (``demo``, ``replay``)."""

from __future__ import annotations

import argparse

from pathways_chaos.harness.engine.option_values import Range

#: Training steps of one episode: ten million is days of the fake cluster's time.
STEPS = Range(1, 10_000_000, whole=True, unit="steps")


def add_deadline_arguments(parser: argparse.ArgumentParser) -> None:
    """``--deadline FAKE_S`` and ``--wall-deadline S``: the episode's limits (see
    harness.engine.deadline), so a run that waits for what never comes still ends."""
    parser.add_argument(
        "--deadline",
        default=None,
        metavar="FAKE_S",
        help="episode-clock seconds before the run ends with what it waited for (default "
        "3600; 'off' or 0 for none)",
    )
    parser.add_argument(
        "--wall-deadline",
        default=None,
        metavar="S",
        help="wall-clock seconds before the run ends (default 600; 'off' or 0 for none)",
    )


def apply_deadline_arguments(args: argparse.Namespace) -> None:
    """Makes ``--deadline``/``--wall-deadline`` every episode's default; bad values: one line."""
    from pathways_chaos.harness.engine import deadline

    fake, wall = getattr(args, "deadline", None), getattr(args, "wall_deadline", None)
    if fake is None and wall is None:
        return
    deadline.set_default_deadline(
        deadline.Deadline(
            deadline.DEFAULT_FAKE_S if fake is None else deadline.parse_seconds(fake, "--deadline"),
            deadline.DEFAULT_WALL_S
            if wall is None
            else deadline.parse_seconds(wall, "--wall-deadline"),
        )
    )
