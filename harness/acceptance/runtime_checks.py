"""The runtime rows the acceptance suite runs: each on the team's own loop when the runs are
``LoopRuns`` (``--chaos-loop``), else on the adapter's runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pathways_chaos.harness.acceptance.loop_runtime import (
    LOOP_RUNTIME_CHECKS,
    LoopRuns,
    failed_run,
)
from pathways_chaos.harness.acceptance.runtime import ADAPTER_RUNTIME_CHECKS
from pathways_chaos.harness.acceptance.table import CheckResult


def with_loop_rows(
    adapter_checks: dict[str, Callable[[Any], CheckResult]],
) -> dict[str, Callable[[Any], CheckResult]]:
    """Each runtime row runs on the user's loop when the runs are ``LoopRuns``, else on the
    adapter as before."""

    def row(name: str) -> Callable[[Any], CheckResult]:
        adapter_check, loop_check = adapter_checks[name], LOOP_RUNTIME_CHECKS[name]

        def run(runs: Any) -> CheckResult:
            if isinstance(runs, LoopRuns):
                crashed = (
                    [] if name == "data-order" else failed_run("fault-free run", runs.fault_free)
                )
                if crashed:  # one row reports the crash; the rest cannot be judged without it
                    return CheckResult(name, "", "", depends_on="data-order", note=crashed[0])
                return loop_check(runs)
            return adapter_check(runs)

        run.__name__ = getattr(adapter_check, "__name__", name)
        run.__doc__ = adapter_check.__doc__
        return run

    return {name: row(name) for name in adapter_checks}


RUNTIME_CHECKS: dict[str, Callable[[Any], CheckResult]] = with_loop_rows(ADAPTER_RUNTIME_CHECKS)
