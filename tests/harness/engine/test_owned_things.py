"""What the project made, told apart from what it did not: processes it started (by their
recorded identity) and folders it made (by their marker), and the one numeric option parser."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pathways_chaos.harness.engine.option_values import (
    Range,
    parse_cpu,
    parse_memory,
    parse_number,
    parse_whole,
)
from pathways_chaos.harness.engine.owned_paths import (
    MARKER,
    RefusedPath,
    check_not_an_input,
    make_owned_folder,
    open_append,
    open_fresh,
    remove_owned_folder,
    write_atomic,
)
from pathways_chaos.harness.engine.owned_processes import (
    ProcessIdentity,
    identity_of_started,
    ownership,
    signal_ours,
    stop_ours,
)
from pathways_chaos.harness.errors import ChaosConfigError


def test_a_process_we_started_is_ours_until_it_ends() -> None:
    command = [sys.executable, "-c", "import time; time.sleep(60)"]
    child = subprocess.Popen(command, start_new_session=True)
    try:
        identity = identity_of_started(child.pid, command)
        assert identity is not None and identity.cmdline == tuple(command)
        assert ownership(identity)[0] == "ours"
        again = ProcessIdentity.from_record(identity.as_record(), "test")
        assert again == identity
        assert stop_ours(identity, timeout_s=10)
        child.wait(timeout=10)
        assert ownership(identity)[0] == "gone"
        assert not signal_ours(identity, signal.SIGTERM)  # a pid that may be reused: never
    finally:
        child.kill()
        child.wait()


def test_a_recorded_pid_of_another_start_or_command_is_not_ours() -> None:
    command = ["sleep", "60"]
    child = subprocess.Popen(command, start_new_session=True)
    try:
        identity = identity_of_started(child.pid, command)
        assert identity is not None
        reused = ProcessIdentity(child.pid, str(int(identity.start) + 1), identity.cmdline, "")
        other = ProcessIdentity(child.pid, identity.start, ("python",), identity.boot)
        for record in (reused, other):
            assert ownership(record)[0] == "other"
            assert not signal_ours(record, signal.SIGTERM, group=True)
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("record", [-1, "1", {"pid": 1}, {"pid": 0, "start": "1"}, {"pid": 5}])
def test_a_record_without_identity_or_naming_pid_1_is_refused(record: object) -> None:
    with pytest.raises(ChaosConfigError, match="nothing signalled"):
        ProcessIdentity.from_record(record, "pid file x")


def test_an_owned_folder_is_made_0700_marked_and_removed(tmp_path: Path) -> None:
    state = tmp_path / "a" / "state"
    make_owned_folder(state)
    assert (state / MARKER).is_file() and (state.stat().st_mode & 0o777) == 0o700
    (state / "x").write_text("ours")
    assert make_owned_folder(state) == state  # ours already: used again
    assert remove_owned_folder(state) and not state.exists()
    assert not remove_owned_folder(state)  # nothing there: nothing to do


def test_an_empty_folder_is_adopted_but_one_with_files_is_left_whole(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o700)
    make_owned_folder(empty)
    assert (empty / MARKER).exists()
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("years")
    with pytest.raises(RefusedPath, match="did not make"):
        make_owned_folder(home)
    with pytest.raises(RefusedPath, match="not made by pathways-chaos"):
        remove_owned_folder(home)
    assert (home / "thesis.tex").read_text() == "years" and not (home / MARKER).exists()


def test_files_are_never_written_through_a_symlink_or_over_a_special_file(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    link = tmp_path / "link"
    link.symlink_to(victim)
    write_atomic(link, b"new")
    assert victim.read_text() == "precious" and link.read_bytes() == b"new"
    link.unlink()
    link.symlink_to(victim)
    os.close(open_fresh(link))
    assert victim.read_text() == "precious" and not link.is_symlink()
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    for write in (lambda: write_atomic(pipe, b"x"), lambda: os.close(open_fresh(pipe))):
        with pytest.raises(RefusedPath, match="not a file"):
            write()
    with pytest.raises(RefusedPath, match="one of this command's inputs"):
        check_not_an_input(tmp_path / "." / "victim", [victim])


#: The last two: Arabic-Indic "12" (int() takes it) and a newline (the refusal stays one line).
BAD_NUMBERS = ["nan", "inf", "-inf", "1e308", "-1", "abc", "", "9" * 5000, "Infinity", "1e-400"]


@pytest.mark.parametrize("raw", [*BAD_NUMBERS, "-0", "\u0661\u0662", "a\nb"])
def test_the_numeric_parser_refuses_in_one_line_naming_the_flag(raw: str) -> None:
    with pytest.raises(ChaosConfigError, match=r"^--budget .*: use a number") as caught:
        parse_number(raw, "--budget", Range(0, 604800, unit="seconds", inclusive=False))
    assert "\n" not in str(caught.value)


def test_the_numeric_parser_accepts_what_is_in_range() -> None:
    assert parse_number("1.5", "--t", Range(0, 10, inclusive=False)) == 1.5
    assert parse_whole("3", "--n", Range(1, 5)) == 3
    with pytest.raises(ChaosConfigError, match="whole number"):
        parse_whole("2.5", "--n", Range(1, 5))
    assert parse_cpu("500m") == "500m" and parse_memory("8Gi") == "8Gi"
    for bad, parse in (("-1", parse_cpu), ("0", parse_cpu), ("abc", parse_memory)):
        with pytest.raises(ChaosConfigError):
            parse(bad)


def test_a_log_is_appended_to_but_never_through_a_planted_symlink_or_into_a_fifo(
    tmp_path: Path,
) -> None:
    log = tmp_path / "log.jsonl"
    os.close(open_append(log))
    fd = open_append(log)
    os.write(fd, b"x\n")
    os.close(fd)
    assert log.read_bytes() == b"x\n"
    decoy = tmp_path / "decoy"
    decoy.write_text("keep")
    (tmp_path / "link").symlink_to(decoy)
    with pytest.raises(RefusedPath, match="is a symlink"):
        open_append(tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(RefusedPath, match="is a FIFO"):  # refused, not waited on
        open_append(tmp_path / "fifo")
    assert decoy.read_text() == "keep"
