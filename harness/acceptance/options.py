"""The acceptance suite's pytest options, registered by the plugin so that they also exist when
the suite runs from an installed wheel (``pytest --pyargs pathways_chaos.suites.acceptance``).

Light on purpose: the plugin imports this module in every pytest session.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

#: The check groups, in the order a team fixes them.
GROUPS = ("static", "manifest", "runtime")


def add_acceptance_options(group: Any) -> None:
    """Adds the ``--acceptance-*`` options to a pytest option group."""
    group.addoption(
        "--acceptance-adapter",
        dest="acceptance_adapter",
        default=None,
        metavar="MODULE:NAME",
        help="acceptance: the TrainingAdapter the runtime checks run (MODULE:NAME or "
        "FILE.py:NAME), e.g. pathways_chaos.harness.acceptance.adapter:reference_adapter",
    )
    group.addoption(
        "--acceptance-source",
        dest="acceptance_source",
        action="append",
        default=None,
        metavar="PATH",
        help="acceptance: a Python file or folder the static checks read (repeatable)",
    )
    group.addoption(
        "--acceptance-manifest",
        dest="acceptance_manifest",
        action="append",
        default=None,
        metavar="PATH",
        help="acceptance: JobSet YAML (file or folder; the CheckpointConfiguration too) the "
        "manifest checks read (repeatable)",
    )
    group.addoption(
        "--acceptance-params",
        dest="acceptance_params",
        default=None,
        metavar="N",
        help="acceptance: the full model's parameter count for ramdisk sizing, e.g. 8e9 "
        "(default: the adapter's params, else its initial state's size, if an adapter is given)",
    )
    group.addoption(
        "--acceptance-ramdisk-buffer",
        dest="acceptance_ramdisk_buffer",
        default="0.15",
        metavar="FRACTION",
        help="acceptance: safety buffer on the ramdisk estimate (default 0.15, or 15%%)",
    )
    group.addoption(
        "--acceptance-checks",
        dest="acceptance_checks",
        default=None,
        metavar="LIST",
        help="acceptance: run only these checks: groups (static, manifest, runtime) and/or "
        "check names, comma-separated, e.g. static,manifest or dev-shm,data-order",
    )
    group.addoption(
        "--acceptance-report",
        dest="acceptance_report",
        default=None,
        metavar="PATH",
        help="acceptance: write the rows to PATH (.json for JSON, else HTML)",
    )


def parse_checks(text: str | None) -> list[str]:
    """``"static, dev-shm"`` -> ``["static", "dev-shm"]``; None selects everything (an empty
    value is refused before, by ``acceptance_problem``)."""
    return [w.strip() for w in (text or "").split(",") if w.strip()]


BUFFER_FORM = "write for example 0.15 or 15% (a percentage below 100%)"


def buffer_fraction(text: str, flag: str) -> float:
    """``0.15`` or ``15%`` -> 0.15; anything else (``2x``, ``-0.5``, ``15``, ``150%``, nan) is a
    ``ChaosConfigError`` naming ``flag`` and the accepted form."""
    from pathways_chaos.harness.errors import ChaosConfigError

    raw = str(text).strip()
    number = raw[:-1] if raw.endswith("%") else raw
    try:
        value = float(number) / (100 if raw.endswith("%") else 1)
    except ValueError:
        value = math.nan
    if not (number.isascii() and 0 <= value < 1):  # nan fails too; "\u0661" is no number here
        raise ChaosConfigError(
            f"{flag} {raw[:40]!r} is not a fraction from 0 to below 1: {BUFFER_FORM}"
        )
    return value


def acceptance_problem(option: Callable[[str], object]) -> str | None:
    """The first acceptance option whose value cannot be meant, said in one line before any
    test: an empty path (``Path("")`` is the current folder: it would scan whatever is there),
    an empty check list (it would run everything), a buffer not in the accepted form.
    ``option(dest)`` is the option's value (pytest's ``config.getoption``)."""
    for flag, dest, what in (
        ("--acceptance-source", "acceptance_source", "your training code's folder or file"),
        ("--acceptance-manifest", "acceptance_manifest", "your JobSet YAML, file or folder"),
        ("--acceptance-adapter", "acceptance_adapter", "MODULE:NAME or FILE.py:NAME"),
    ):
        given = option(dest)
        values = given if isinstance(given, list) else [] if given is None else [given]
        if any(not str(v).strip() for v in values):
            return f"{flag} is empty: pass {what}, or leave the option out"
    checks = option("acceptance_checks")
    if checks is not None and not parse_checks(str(checks)):
        return (
            f"--acceptance-checks is empty: name groups ({', '.join(GROUPS)}) or check names, "
            "comma-separated, or leave the option out to run every check"
        )
    buffer = option("acceptance_ramdisk_buffer")
    if buffer is not None:
        from pathways_chaos.harness.errors import ChaosConfigError

        try:
            buffer_fraction(str(buffer), "--acceptance-ramdisk-buffer")
        except ChaosConfigError as error:
            return str(error)
    return None
