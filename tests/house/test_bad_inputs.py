"""Every bad input in the table ends in one line and its documented exit code: no traceback,
no silent success. Each row runs in a new process, as a person would type it."""

from __future__ import annotations

from pathlib import Path

from tests.house.bad_inputs.table import figures, run_all


def test_every_bad_input_is_one_line_with_its_exit_code(tmp_path: Path) -> None:
    outcomes = run_all(tmp_path)
    wrong = [o.explain() for o in outcomes if not o.one_line]
    counts = figures(outcomes)
    assert counts["tracebacks"] == 0, "\n\n".join(o.explain() for o in outcomes if o.traceback)
    assert counts["silent_successes"] == 0, "\n\n".join(
        o.explain() for o in outcomes if o.silent_success
    )
    assert not wrong, f"{len(wrong)} of {len(outcomes)} rows:\n\n" + "\n\n".join(wrong)
