"""Files read as untrusted input (harness/engine/untrusted_files.py) and the journal's trust
checks (faults/journal_trust.py), without a cluster: each refusal is one line naming the file."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from pathways_chaos.faults.journal import JournalRefused, RollbackJournal, read_journal
from pathways_chaos.faults.journal_trust import (
    holder_of,
    holder_state,
    journal_key,
    signed_journal,
    state_dir,
)
from pathways_chaos.harness.engine.untrusted_files import (
    JSON_MAX_DEPTH,
    UntrustedFileError,
    check_folder_target,
    check_output_file,
    load_json,
    load_yaml_all,
    read_bytes,
    read_text,
    resolve_inside,
    shown,
)

BILLION_LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + chr(ord(c) - 1)] * 9)}]\n" for c in "bcdefghi"
)


def finishes(call: object, seconds: float = 10.0) -> BaseException | None:
    """Runs ``call`` in a thread; fails the test if it blocks (a FIFO read would)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()  # type: ignore[operator]
            outcome.append(None)
        except BaseException as error:  # handed back to the test
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"blocked for {seconds} s"
    return outcome[0]


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "m.yaml"
    os.mkfifo(fifo)
    error = finishes(lambda: read_text(fifo, what="manifest"))
    assert isinstance(error, UntrustedFileError) and "is a FIFO (named pipe)" in str(error)


def test_devices_folders_and_size_are_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(UntrustedFileError, match="/dev/zero is a device"):
        read_bytes("/dev/zero")
    with pytest.raises(UntrustedFileError, match="is a folder: name a file"):
        read_bytes(tmp_path)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 101)
    with pytest.raises(UntrustedFileError, match="larger than 100 bytes"):
        read_bytes(big, max_bytes=100)
    assert read_bytes(big, max_bytes=101) == b"x" * 101


def test_non_utf8_names_the_byte_and_its_line(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_bytes(b"import os\nx = 1\n\x89PNG\n")
    with pytest.raises(UntrustedFileError, match=r"byte 0x89 on line 3\): is it a binary file"):
        read_text(path, what="source")


def test_a_symlink_out_of_its_folder_is_refused(tmp_path: Path) -> None:
    inside = tmp_path / "in"
    inside.mkdir()
    (tmp_path / "secret").write_text("x")
    (inside / "link.yaml").symlink_to(tmp_path / "secret")
    (inside / "ok.yaml").write_text("a: 1\n")
    assert resolve_inside(inside, "ok.yaml") == (inside / "ok.yaml").resolve()
    with pytest.raises(UntrustedFileError, match="outside"):
        resolve_inside(inside, "link.yaml")
    with pytest.raises(UntrustedFileError, match="outside"):
        read_text("../secret", inside=inside)


def test_yaml_alias_expansion_is_bounded() -> None:
    with pytest.raises(UntrustedFileError, match="billion laughs"):
        load_yaml_all(BILLION_LAUGHS, "laughs.yaml")
    small = "a: &a [1, 2]\nb: [*a, *a]\n"
    assert load_yaml_all(small, "ok.yaml") == [{"a": [1, 2], "b": [[1, 2], [1, 2]]}]
    with pytest.raises(UntrustedFileError, match="not valid YAML"):
        load_yaml_all("a: [", "bad.yaml")


@pytest.mark.parametrize("depth", [100_000, 900, JSON_MAX_DEPTH + 1])
@pytest.mark.parametrize("kind", [str, bytes])
def test_json_nested_too_deeply_is_one_line_naming_the_file_and_line(
    depth: int, kind: type
) -> None:
    """Past the recursion limit ``json`` raised RecursionError (a traceback); just under it the
    value loaded and sent whatever walked it later there: both refused here, in one line."""
    text = "[" * depth + "]" * depth
    data = text if kind is str else text.encode()
    with pytest.raises(UntrustedFileError) as refused:
        load_json(data, Path("/logs/deep.jsonl"), line=3, what="event log", fix="give another")
    said = str(refused.value)
    assert "\n" not in said and said.startswith("event log /logs/deep.jsonl:3 nests JSON deeper")
    assert said.endswith(": give another")


def test_json_within_the_depth_limit_loads_and_bad_json_raises_as_json_does() -> None:
    text = "[" * JSON_MAX_DEPTH + "]" * JSON_MAX_DEPTH
    assert load_json(text, "ok.json") is not None
    assert load_json(b'{"kind": "run_end", "a": [[1], {"b": [2]}], "s": "[[[[["}', "x") == {
        "kind": "run_end",
        "a": [[1], {"b": [2]}],
        "s": "[[[[[",
    }
    with pytest.raises(json.JSONDecodeError):
        load_json("{", "torn.jsonl")


def test_output_and_folder_targets(tmp_path: Path) -> None:
    with pytest.raises(UntrustedFileError, match="is a folder"):
        check_output_file(tmp_path)
    with pytest.raises(UntrustedFileError, match="is a device"):
        check_output_file("/dev/null")
    assert check_output_file(tmp_path / "r.html") == tmp_path / "r.html"
    with pytest.raises(UntrustedFileError, match="is under /dev/null, which is a device"):
        check_folder_target("/dev/null/journals")
    (tmp_path / "f").write_text("x")
    with pytest.raises(UntrustedFileError, match=r"f is a file, not a folder"):
        check_folder_target(tmp_path / "f")
    with pytest.raises(UntrustedFileError, match=r"is under .*f, which is a file, not a folder"):
        check_folder_target(tmp_path / "f" / "sub")
    assert check_folder_target(tmp_path / "new" / "deeper") == tmp_path / "new" / "deeper"


def test_long_values_are_cut() -> None:
    assert shown("x" * 10) == "x" * 10
    cut = shown("x" * 120_000)
    assert len(cut) < 120 and cut.endswith("(120000 characters)")


# -- the journal's trust checks -----------------------------------------------------------

HEADER = {"journal": 2, "run": "r1", "cluster_uid": "u1", "server": "https://x"}
CORDON = {"seq": 1, "run": "r1", "action": "cordon", "node": "n1", "uid": "a"}
UNDONE = {"undone": 1, "result": "uncordoned node n1"}


def test_the_key_is_made_private_and_refused_when_others_can_read_it() -> None:
    key = journal_key()
    path = state_dir() / "journal.key"
    assert len(key) == 32 and (path.stat().st_mode & 0o777) == 0o600
    assert journal_key() == key  # made once
    path.chmod(0o644)
    try:
        with pytest.raises(JournalRefused, match="can be read by others"):
            journal_key()
    finally:
        path.chmod(0o600)


@pytest.mark.parametrize(
    "tamper",
    ["drop-a-middle-line", "swap-lines", "drop-the-header", "edit-a-value", "unsigned-append"],
)
def test_every_kind_of_tampering_breaks_the_chain(tmp_path: Path, tamper: str) -> None:
    path = tmp_path / "j.jsonl"
    lines = signed_journal(journal_key(), [HEADER, CORDON, UNDONE]).splitlines(keepends=True)
    if tamper == "drop-a-middle-line":
        lines = [lines[0], lines[2]]
    elif tamper == "swap-lines":
        lines = [lines[0], lines[2], lines[1]]
    elif tamper == "drop-the-header":
        lines = lines[1:]
    elif tamper == "edit-a-value":
        lines[1] = lines[1].replace(b'"n1"', b'"n2"')
    else:
        lines.append(json.dumps({"seq": 2, "run": "r1", "action": "cordon"}).encode() + b"\n")
    path.write_bytes(b"".join(lines))
    with pytest.raises(JournalRefused, match=r"j.jsonl line \d is not as your pathways-chaos"):
        read_journal(path)


def test_a_journal_signed_by_its_writer_reads_back_and_appends_chain_on(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(signed_journal(journal_key(), [HEADER, CORDON]))
    journal = RollbackJournal(path)
    journal._append(UNDONE)
    assert read_journal(path).pending() == []


def test_a_journal_file_in_a_folder_others_can_write_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    path = folder / "j.jsonl"
    path.write_bytes(signed_journal(journal_key(), [HEADER, CORDON]))
    folder.chmod(0o777)
    with pytest.raises(JournalRefused, match="can be written by other users"):
        read_journal(path)
    with pytest.raises(JournalRefused, match="can be written by other users"):
        RollbackJournal(folder / "new.jsonl")._append(HEADER)  # nor is one written there


def test_holder_liveness_uses_host_boot_and_start_time() -> None:
    me = holder_of()
    assert holder_state(me)[0] == "self"
    assert holder_state({**me, "pid": 1, "pid_start": "999999999"})[0] == "stale"
    assert holder_state({**me, "pid": 2**22 + 7})[0] == "stale"
    assert holder_state({**me, "host": "elsewhere"})[0] == "unknown"
    assert holder_state({**me, "boot_id": "another-boot"})[0] == "stale"
    assert holder_state(holder_of(1))[0] == "live"  # pid 1 with its own start time


def test_an_unreadable_journal_is_an_error_exit_1_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Root reads through any mode, so the denial is the one ``os.open`` raises for a user."""
    from pathways_chaos.faults import journal as journal_module
    from pathways_chaos.harness.cli.rollback import rollback_main

    path = tmp_path / "j.jsonl"
    path.write_bytes(signed_journal(journal_key(), [HEADER, CORDON]))
    real_open = os.open

    def denied(name: object, *args: object, **kwargs: object) -> int:
        if Path(str(name)) == path:
            raise PermissionError(13, "Permission denied", str(name))
        return real_open(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(journal_module.os, "open", denied)
    assert rollback_main([str(path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"journal {path} cannot be read (permission denied)" in err[0]


def test_a_report_path_naming_a_file_that_is_not_a_report_is_refused_and_left_alone(
    tmp_path: Path,
) -> None:
    """A mistyped --acceptance-report=src/train.py turned the user's source into HTML."""
    from pathways_chaos.harness.engine.untrusted_files import check_output_file

    for text in (
        "import jax\n",
        "import jax  # pathways-chaos: ignore (a mark the static checks read)\n",
        "pathways-chaos==0.4\njax\n",
        '{"made_by": "someone else"}\n',
    ):
        source = tmp_path / "train.py"
        source.write_text(text)
        with pytest.raises(UntrustedFileError, match="exists and is not a report of pathways"):
            check_output_file(source, what="--acceptance-report")
        assert source.read_text() == text


def test_a_report_of_ours_and_an_empty_file_may_be_written_over(tmp_path: Path) -> None:
    from pathways_chaos.harness.acceptance.table import write_report
    from pathways_chaos.harness.engine.untrusted_files import check_output_file

    for name in ("r.html", "r.json"):
        report = write_report([], tmp_path / name)
        assert check_output_file(report) == report
    from pathways_chaos.harness.reports.html_report import write_report as chaos_report

    report = chaos_report(tmp_path / "chaos.html", [])
    assert check_output_file(report) == report
    empty = tmp_path / "empty.html"
    empty.touch()
    assert check_output_file(empty) == empty
    package = tmp_path / "__init__.py"
    package.touch()
    with pytest.raises(UntrustedFileError, match="is not a report"):
        check_output_file(package)
