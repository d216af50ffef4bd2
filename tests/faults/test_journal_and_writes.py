"""The journal file and the confirmed write, without a cluster: what a line-by-line reader
skips and reports, and how a write whose answer was lost is told from one never made."""

from __future__ import annotations

from pathlib import Path

import pytest

from pathways_chaos.faults.journal import (
    JournalError,
    RollbackJournal,
    default_journal_dir,
    new_journal_path,
    read_journal,
)
from pathways_chaos.faults.journal_trust import journal_key, signed_line
from pathways_chaos.faults.safety import write_confirmed

HEADER = {"journal": 2, "run": "r1", "cluster_uid": "u1", "server": "https://x"}
CORDON = {"seq": 1, "run": "r1", "action": "cordon", "node": "n1", "uid": "a"}
TAINT = {
    "seq": 2,
    "run": "r1",
    "action": "taint",
    "node": "n1",
    "uid": "a",
    "taint": {"key": "k", "value": "true", "effect": "NoSchedule"},
}


def write_lines(path: Path, *lines: object, tail: str = "") -> None:
    """A journal as the user's own pathways-chaos signs it: dicts signed, strings as given."""
    path.write_bytes(signed(*lines) + tail.encode())


def signed(*lines: object) -> bytes:
    key, previous, out = journal_key(), "", b""
    for x in lines:
        if isinstance(x, dict):
            line, previous = signed_line(key, previous, x)
            out += line
        else:
            out += (x if isinstance(x, bytes) else str(x).encode()) + b"\n"
    return out


def test_malformed_lines_are_reported_with_their_numbers_and_the_rest_kept(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    write_lines(path, HEADER, "42", "null", {"seq": 99}, '{"seq": 5, "act', CORDON, TAINT)

    contents = read_journal(path)

    assert [c["seq"] for c in contents.pending()] == [2, 1]
    assert contents.problems == [
        "line 2: not a journal record (int 42)",
        "line 3: not a journal record (NoneType null)",
        "line 4: change #99 has unknown action None",
        "line 5: not JSON (cut off or edited by hand)",
    ]


def test_a_torn_last_line_is_a_note_not_a_problem(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    write_lines(path, HEADER, CORDON, tail='{"seq": 2, "action": "cor')
    contents = read_journal(path)
    assert contents.problems == [] and len(contents.notes) == 1
    assert "line 3: torn last line" in contents.notes[0]


def test_non_utf8_and_duplicate_and_incomplete_entries_are_problems(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(signed(HEADER, b"\xff\xfe", CORDON, CORDON, {**TAINT, "taint": "k"}))
    assert read_journal(path).problems == [
        "line 2: not UTF-8 text",
        "line 4: change #1 appears twice",
        "line 5: change #2 (taint) has no valid 'taint'",
    ]


def test_a_folder_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match="is a folder, not a journal"):
        read_journal(tmp_path)


def test_record_refuses_before_the_journal_names_its_cluster(tmp_path: Path) -> None:
    journal = RollbackJournal(tmp_path / "j.jsonl")
    with pytest.raises(JournalError, match="not bound to a cluster"):
        journal.record("cordon", node="n1")
    assert not (tmp_path / "j.jsonl").exists()


def test_journals_go_to_the_xdg_state_dir_unless_told(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PATHWAYS_CHAOS_JOURNAL_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_journal_dir() == tmp_path / "state" / "pathways-chaos" / "journals"
    monkeypatch.setenv("PATHWAYS_CHAOS_JOURNAL_DIR", str(tmp_path / "mine"))
    path = new_journal_path(run_id="abc")
    assert path.parent == tmp_path / "mine" and path.name.endswith("-abc.jsonl")


class Lost(Exception):
    status = 500


def test_a_lost_answer_is_resolved_by_reading_back_not_reported_as_someone_elses() -> None:
    state = {"cordoned": False}
    calls: list[str] = []

    def write() -> str:
        calls.append("write")
        state["cordoned"] = True  # the server applied it ...
        raise Lost()  # ... and the answer was lost

    def confirm() -> str | None:
        calls.append("read")
        return "cordoned (confirmed)" if state["cordoned"] else None

    assert write_confirmed(write, confirm, sleep=lambda s: None) == "cordoned (confirmed)"
    assert calls == ["write", "read"]  # not written twice


def test_a_write_that_did_not_happen_is_retried_and_bounded() -> None:
    attempts: list[int] = []

    def write() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise Lost()
        return "done"

    assert write_confirmed(write, lambda: None, sleep=lambda s: None) == "done"
    attempts.clear()

    def always() -> str:
        attempts.append(1)
        raise Lost()

    with pytest.raises(Lost):
        write_confirmed(always, lambda: None, attempts=4, sleep=lambda s: None)
    assert len(attempts) == 4


def test_an_error_that_says_the_write_failed_is_not_retried() -> None:
    class Forbidden(Exception):
        status = 403

    def write() -> str:
        raise Forbidden()

    with pytest.raises(Forbidden):
        write_confirmed(write, lambda: pytest.fail("no read needed"), sleep=lambda s: None)


def test_rollback_of_a_journal_with_nothing_pending_needs_no_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pathways_chaos.harness.cli.rollback import rollback_main

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    path = tmp_path / "j.jsonl"
    write_lines(path, HEADER, CORDON, {"undone": 1, "result": "uncordoned node n1"})
    assert rollback_main([str(path)]) == 0
    assert "nothing to undo" in capsys.readouterr().out


def test_two_writers_of_one_journal_never_share_a_number(tmp_path: Path) -> None:
    """The session and an episode's child append to the same journal: each change gets the next
    number under the file's lock, after what the other wrote, and a replay sees them all."""
    path = tmp_path / "j.jsonl"
    write_lines(path, HEADER)
    session, child = RollbackJournal(path), RollbackJournal(path, run_id="r1")

    numbers = [
        writer.record("cordon", node=f"n{i}", uid=f"u{i}")
        for i, writer in enumerate([session, child, child, session, child])
    ]

    assert numbers == [1, 2, 3, 4, 5]
    contents = read_journal(path)
    assert contents.problems == []
    assert [c["seq"] for c in contents.pending()] == [5, 4, 3, 2, 1]
    assert [c["node"] for c in contents.changes] == ["n0", "n1", "n2", "n3", "n4"]
