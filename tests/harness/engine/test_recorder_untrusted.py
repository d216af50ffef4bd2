"""The event log's readers (harness/engine/recorder.py) given a line nested too deeply to read:
one line naming the file and line, never a RecursionError's traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pathways_chaos.harness.engine.recorder import LogTail, read_log
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
