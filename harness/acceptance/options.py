"""The acceptance suite's pytest options, registered by the plugin so that they also exist when
the suite runs from an installed wheel (``pytest --pyargs pathways_chaos.suites.acceptance``).

Light on purpose: the plugin imports this module in every pytest session.
"""

from __future__ import annotations

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
    """``"static, dev-shm"`` -> ``["static", "dev-shm"]``; None or empty selects everything."""
    return [w.strip() for w in (text or "").split(",") if w.strip()]
