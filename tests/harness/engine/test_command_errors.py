"""Every command ends an error it can name in one line, the same way (``command_errors``):
which command speaks, the file an ``OSError`` names (escaped: a newline in a name must not make a
second line), the exit code the error means; never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from pathways_chaos.faults.safety import ChaosRefused
from pathways_chaos.harness.engine.command_errors import reported


def _raise(error: BaseException) -> int:
    raise error


def test_an_os_error_is_one_line_naming_the_file_escaped(capsys: pytest.CaptureFixture) -> None:
    error = FileNotFoundError(2, "No such file or directory", "/tmp/a\nb.jsonl")
    assert reported("pathways-chaos replay", lambda: _raise(error)) == 2
    err = capsys.readouterr().err
    assert err == "pathways-chaos replay: error: /tmp/a\\nb.jsonl: No such file or directory\n"


def test_a_chaos_error_keeps_its_exit_code_and_stays_one_line(
    capsys: pytest.CaptureFixture,
) -> None:
    assert reported("pathways-chaos twin", lambda: _raise(ChaosRefused("no\nway"))) == 3
    assert capsys.readouterr().err == "pathways-chaos twin: error: no\\nway\n"


def test_anything_else_is_not_swallowed() -> None:
    """A toolkit bug stays a traceback a person can report, never a quiet exit code."""
    with pytest.raises(KeyError):
        reported("pathways-chaos", lambda: _raise(KeyError("x")))


def test_each_command_speaks_through_it(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The commands whose own wording differed: replay (the file was not named), search merge
    (only its config errors were caught), rollback (no "error:")."""
    from pathways_chaos.harness.cli.replay import replay_loop_main
    from pathways_chaos.harness.cli.rollback import rollback_main
    from pathways_chaos.harness.search.merge import merge_main

    cases = [
        (replay_loop_main, ["--loop", "x.py:main", "--schedule", "data_loss@nowhere"]),
        (merge_main, [str(tmp_path), "--html", str(tmp_path)]),
        (rollback_main, [str(tmp_path / "no-such-journal.json")]),
    ]
    for main, argv in cases:
        code = main(argv)
        err = capsys.readouterr().err
        assert code != 0 and err.count("\n") == 1, (argv, err)
        assert err.startswith("pathways-chaos ") and ": error: " in err, err
