"""A log path that names a file which is not an event log of ours (a mistyped ``--log``) is
refused in one line and the file is left as it was; an old event log is kept once, as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from pathways_chaos.harness.engine.recorder import Recorder
from pathways_chaos.harness.errors import ChaosConfigError


def test_a_file_that_is_not_an_event_log_is_never_moved_or_overwritten(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("precious data\n")
    for _ in range(2):
        with pytest.raises(ChaosConfigError, match="is not an event log of pathways-chaos") as e:
            Recorder(notes)
        assert "\n" not in str(e.value)
    assert notes.read_text() == "precious data\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_file_where_the_old_log_would_go_is_never_overwritten(tmp_path: Path) -> None:
    log = tmp_path / "episode.jsonl"
    Recorder(log).close()
    kept = tmp_path / "episode.previous.jsonl"
    kept.write_text("not ours\n")
    with pytest.raises(ChaosConfigError, match=r"episode\.previous\.jsonl"):
        Recorder(log)
    assert kept.read_text() == "not ours\n" and log.read_text().startswith('{"seq"')


def test_an_old_event_log_is_kept_once_as_before(tmp_path: Path) -> None:
    log = tmp_path / "episode.jsonl"
    first = Recorder(log)
    first.emit("marker", which="first")
    first.close()
    Recorder(log).close()
    assert '"which": "first"' in (tmp_path / "episode.previous.jsonl").read_text()
    assert '"which"' not in log.read_text()
