"""Where a blocked loop was, read from the child's faulthandler dump: the loop's own line, not
an installed library's frame that ran inside it (filelock's audit hook runs on every audited
event, so a dump can catch the loop's main thread there: CI once said "blocked at _fork.py:356
in _audit_fork_safety" for a loop spinning in its own while loop)."""

from __future__ import annotations

from pathlib import Path

from pathways_chaos.harness.episodes.child_watch import loop_frame

SITE = "/venv/lib/python3.13/site-packages"


def _dump(tmp_path: Path, frames: list[tuple[str, int, str]]) -> str:
    lines = ["Current thread 0x00007f (most recent call first):"]
    lines += [f'  File "{f}", line {n} in {name}' for f, n, name in frames]
    lines.append('  File "/repo/harness/episodes/child.py", line 300 in _one_run')
    path = tmp_path / "stacks.txt"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_an_installed_librarys_hook_inside_the_loops_line_is_not_the_loops_line(tmp_path):
    stacks = _dump(
        tmp_path,
        [
            (f"{SITE}/filelock/_core/_fork.py", 356, "_audit_fork_safety"),
            ("/work/train.py", 51, "never_returns"),
        ],
    )
    assert loop_frame(stacks) == (
        "/work/train.py:51 in never_returns (waiting in _fork.py:356 in _audit_fork_safety)"
    )


def test_a_loop_installed_as_a_package_is_still_found_when_it_is_all_there_is(tmp_path):
    stacks = _dump(tmp_path, [(f"{SITE}/myjob/train.py", 12, "main")])
    assert loop_frame(stacks) == f"{SITE}/myjob/train.py:12 in main"
