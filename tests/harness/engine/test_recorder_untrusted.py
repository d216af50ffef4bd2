"""The event log's readers (harness/engine/recorder.py) given a line nested too deeply to read:
one line naming the file and line, never a RecursionError's traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pathways_chaos.harness.engine.recorder import LogTail, Recorder, read_log
from pathways_chaos.harness.engine.untrusted_files import UntrustedFileError, shown

DEEP = "[" * 100_000 + "\n"


def _log(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "episode.jsonl"
    path.write_text("".join(lines))
    return path


def _event(seq: int, kind: str = "log_start") -> str:
    return json.dumps({"seq": seq, "kind": kind}) + "\n"


def test_read_log_refuses_a_deep_line_naming_the_file_and_line(tmp_path: Path) -> None:
    log = _log(tmp_path, _event(0), DEEP)
    with pytest.raises(UntrustedFileError) as refused:
        read_log(log)
    said = str(refused.value)
    assert f"{shown(log)}:2 nests JSON deeper than" in said and "\n" not in said
    assert said.endswith("give the log an episode wrote (--log, --chaos-log-dir)")


def test_a_tail_leaves_a_deep_line_out_as_not_the_recorders(tmp_path: Path) -> None:
    tail = LogTail(_log(tmp_path, _event(0), DEEP, _event(1, "episode_start")))
    assert [e["kind"] for e in tail.read(final=True)] == ["log_start", "episode_start"]
    assert tail.bad == 1 and tail.first_foreign is not None
    assert "nested deeper than" in tail.first_foreign


def test_a_followed_log_stays_readable_when_its_path_is_replaced(tmp_path: Path) -> None:
    """The tail holds the log it first opened: a loop that unlinks the path and puts a folder
    there cannot hide what its process's recorder writes next (it writes through its own fd)."""
    log = tmp_path / "episode.jsonl"
    recorder = Recorder(log)
    tail = LogTail(log)
    assert [e["kind"] for e in tail.read()] == ["log_start"]
    log.unlink()
    log.mkdir()  # what the hostile loop did
    recorder.emit("run_end", run=1, status="completed")
    assert [e["kind"] for e in tail.read()] == ["run_end"]
    recorder.close()


def test_a_tail_never_waits_on_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "log.jsonl"
    os.mkfifo(fifo)
    assert LogTail(fifo).read(final=True) == []
