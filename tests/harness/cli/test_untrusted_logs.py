"""``pathways-chaos check`` and ``rollback`` given logs a hostile tester made: a line nested too
deeply to read is exit 2 and one line naming the file and line (it was a RecursionError's
traceback); a ``--baseline`` whose final state names a FIFO, a device, a folder or a file out
of its values folder is judged "not judged" with that reason (a FIFO hung the check for ever)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from pathways_chaos.harness.cli.main import main
from pathways_chaos.harness.engine.untrusted_files import shown

LOOP = "pathways_chaos.harness.reference.user_loop:main"
DEEP = "[" * 100_000 + "\n"


def _run(*argv: str, seconds: float = 120.0) -> tuple[int, str, str]:
    """``main(argv)``'s exit code, stdout and stderr; fails the test when it blocks."""
    out, err = io.StringIO(), io.StringIO()
    codes: list[int] = []

    def run() -> None:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            codes.append(main(list(argv)))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert codes, f"pathways-chaos {' '.join(argv)} blocked for {seconds} s"
    return codes[0], out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def episode(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A loop's log under a fault and a fault-free run's log, each beside its values folder
    (a fixed batch, so the final state is compared with the fault-free run's)."""
    from pathways_chaos.harness.play import play_loop

    tmp = tmp_path_factory.mktemp("logs")
    options = {"batch": "fixed"}
    base = play_loop(LOOP, options=options, log_path=tmp / "base.jsonl", checkpoint_dir=tmp / "c0")
    out = play_loop(
        LOOP,
        "data_loss@batch=12:slice=0",
        options=options,
        log_path=tmp / "loop.jsonl",
        checkpoint_dir=tmp / "c1",
    )
    assert base.result.completed and out.result.completed
    return tmp / "loop.jsonl", tmp / "base.jsonl"


def _one_line_naming(err: str, path: Path) -> None:
    assert err.strip().count("\n") == 0, err
    assert f"{shown(path)}:1 nests JSON deeper than" in err and "Traceback" not in err, err


def test_check_of_a_deeply_nested_log_is_exit_2_in_one_line(tmp_path: Path) -> None:
    deep = tmp_path / "deep.jsonl"
    deep.write_text(DEEP)
    code, out, err = _run("check", str(deep))
    assert code == 2 and out == ""
    _one_line_naming(err, deep)
    assert "give the log an episode wrote" in err


def test_rollback_of_a_deeply_nested_journal_is_exit_2_in_one_line(tmp_path: Path) -> None:
    deep = tmp_path / "deep.jsonl"
    deep.write_text(DEEP)
    deep.chmod(0o600)
    code, out, err = _run("rollback", str(deep))
    assert code == 2 and out == ""
    _one_line_naming(err, deep)
    assert "give the journal a session wrote" in err


def test_a_deeply_nested_baseline_is_exit_2_in_one_line(
    tmp_path: Path, episode: tuple[Path, Path]
) -> None:
    deep = tmp_path / "deep.jsonl"
    deep.write_text(DEEP)
    code, _, err = _run("check", str(episode[0]), "--baseline", str(deep))
    assert code == 2
    _one_line_naming(err, deep)


def test_the_baseline_beside_its_values_has_the_final_state_judged(
    episode: tuple[Path, Path],
) -> None:
    code, out, _ = _run("check", str(episode[0]), "--baseline", str(episode[1]))
    assert code == 0 and "final-state" in _judged_line(out), out


def _judged_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("judged:"))


def _forged(baseline: Path, where: Path, file: str) -> Path:
    """A copy of ``baseline`` at ``where`` whose final state's first leaf names ``file``."""
    lines = []
    for line in baseline.read_text().splitlines():
        event: dict[str, Any] = json.loads(line)
        if event.get("kind") == "run_end" and event.get("final_state"):
            first = next(iter(event["final_state"]))
            event["final_state"][first]["file"] = file
        lines.append(json.dumps(event))
    where.write_text("\n".join(lines) + "\n")
    return where


@pytest.mark.parametrize("named", ["fifo", "/dev/zero", "/etc/passwd", "folder", "moved"])
def test_a_forged_baseline_naming_no_value_file_of_its_own_is_not_judged(
    tmp_path: Path, episode: tuple[Path, Path], named: str
) -> None:
    log, base = episode
    if named == "fifo":
        os.mkfifo(tmp_path / "pipe")
        file = str(tmp_path / "pipe")
    elif named == "folder":
        file = str(tmp_path)
    elif named == "moved":  # a file its run wrote, named by a log that is not beside it
        file = next(e for e in _events(base) if e["kind"] == "run_end")["final_state"]
        file = next(iter(file.values()))["file"]
    else:
        file = named
    forged = _forged(base, tmp_path / "fault-free-1.jsonl", file)
    code, out, err = _run("check", str(log), "--baseline", str(forged))
    assert "Traceback" not in err and "the judge failed" not in out, (out, err)
    assert "pickled" not in out
    said = next(line for line in out.splitlines() if line.startswith("not judged: final-state"))
    assert (
        f"names value file {shown(file)}, which is not a regular file in the log's values folder"
        in (said)
    )
    assert "(the log was edited or moved" in said and code != 0


def _events(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]
