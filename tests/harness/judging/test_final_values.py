"""A final state's value files as the judge reads them (harness/judging/final_values.py): a log
anyone may edit names the files, so one that names a FIFO, a device, a folder, a file out of the
values folder beside the log, or a file not of the shape it says is "not judged", in one
reason, never a hang and never "the judge failed"."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pathways_chaos.harness.engine.recorder import values_folders
from pathways_chaos.harness.judging.final_values import (
    ValueFileRefused,
    compare_final_states,
    leaf_array,
    seal,
    vet_value_files,
)

LEAF = "['params']['w']"
VALUES = np.linspace(-1.0, 1.0, 6, dtype=np.float32).reshape(2, 3)


def within(call: Callable[[], Any], seconds: float = 10.0) -> Any:
    """``call()``'s result; fails the test when it blocks (opening a FIFO to read would)."""
    outcome: list[Any] = []
    thread = threading.Thread(target=lambda: outcome.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"blocked for {seconds} s"
    return outcome[0]


def _end(file: Path | str) -> dict[str, Any]:
    leaf = {"dtype": "float32", "shape": [2, 3], "file": str(file), "stored_dtype": "float32"}
    return {"kind": "run_end", "final_state": {LEAF: leaf}}


def _written(log: Path, array: np.ndarray = VALUES, **save: Any) -> Path:
    """A value file where the writer puts it for ``log``: ``<stem>.child/values/run-1``."""
    folder = values_folders(log)[0] / "run-1"
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / "leaf-0.npy"
    np.save(file, array, **save)
    return file


def _judged(tmp_path: Path, named: Callable[[Path], Path | str]) -> list[str] | str:
    """The final-state comparison of a good log with a baseline log whose leaf names
    ``named(baseline's path)``, each vetted against the folder beside its own log."""
    log, base = tmp_path / "episode.jsonl", tmp_path / "fault-free-1.jsonl"
    end, base_end = _end(_written(log)), _end(named(base))
    vet_value_files([end], log)
    vet_value_files([base_end], base)
    return within(lambda: compare_final_states(end, base_end, True))


def test_value_files_in_the_folders_beside_their_logs_are_compared(tmp_path: Path) -> None:
    assert _judged(tmp_path, _written) == []
    here = tmp_path / "here.jsonl"  # a loop run in this process: <stem>.values/run-N
    file = values_folders(here)[1] / "run-1" / "leaf-0.npy"
    file.parent.mkdir(parents=True)
    np.save(file, VALUES + 1)
    end, mine = _end(file), _end(_written(tmp_path / "episode.jsonl"))
    vet_value_files([end], here)
    vet_value_files([mine], tmp_path / "episode.jsonl")
    (found,) = compare_final_states(mine, end, True)
    assert "final state differs from the fault-free run" in found


def _fifo_outside(base: Path) -> Path:
    os.mkfifo(base.parent / "pipe")
    return base.parent / "pipe"


def _fifo_inside(base: Path) -> Path:
    folder = values_folders(base)[0] / "run-1"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "leaf-0.npy")
    return folder / "leaf-0.npy"


def _symlink_inside(base: Path) -> Path:
    """A link in the folder to a good value file elsewhere: the file read is not in it."""
    target = _written(base.with_name("other.jsonl"))
    link = values_folders(base)[0] / "run-1" / "leaf-0.npy"
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    return link


def _relative_escape(base: Path) -> str:
    _written(base.with_name("other.jsonl"))
    return f"{values_folders(base)[0]}/run-1/../../../other.child/values/run-1/leaf-0.npy"


NOT_IN_FOLDER: list[tuple[str, Callable[[Path], Path | str]]] = [
    ("a FIFO", _fifo_outside),
    ("a FIFO in the values folder", _fifo_inside),
    ("/dev/zero", lambda base: "/dev/zero"),
    ("/etc/passwd", lambda base: "/etc/passwd"),
    ("a folder", lambda base: base.parent),
    ("the values folder itself", lambda base: values_folders(base)[0]),
    ("another log's value file (a log moved or edited)", lambda b: _written(b.parent / "x.jsonl")),
    ("a symlink in the folder to a file out of it", _symlink_inside),
    ("a path that climbs out of the folder", _relative_escape),
    ("a file missing from the folder", lambda base: values_folders(base)[0] / "run-1/leaf-0.npy"),
    ("an empty name", lambda base: ""),
]


@pytest.mark.parametrize(("case", "named"), NOT_IN_FOLDER, ids=[c for c, _ in NOT_IN_FOLDER])
def test_a_value_file_not_in_the_logs_values_folder_is_not_judged(
    tmp_path: Path, case: str, named: Callable[[Path], Path | str]
) -> None:
    found = _judged(tmp_path, named)
    assert isinstance(found, str), (case, found)
    assert found.startswith("the log of the fault-free run names value file "), found
    assert "which is not a regular file in the log's values folder (the log was edited or " in found
    assert "\n" not in found


NOT_NPY: list[tuple[str, Callable[[Path], Path], str]] = [
    ("pickled", lambda b: _written(b, np.array([{"a": 1}], dtype=object), allow_pickle=True), ""),
    ("of another shape", lambda b: _written(b, np.zeros((3, 2), np.float32)), "holds shape"),
    ("not a .npy file", lambda b: _text(b, "root:x:0:0:root:/root:/bin/bash\n"), "not a .npy"),
    ("cut short", lambda b: _cut(_written(b)), "bytes, not the"),
    ("longer than its header says", lambda b: _grown(_written(b)), "bytes, not the"),
]


def _text(base: Path, text: str) -> Path:
    file = _written(base)
    file.write_text(text)
    return file


def _cut(file: Path) -> Path:
    os.truncate(file, file.stat().st_size - 4)
    return file


def _grown(file: Path) -> Path:
    with file.open("ab") as f:
        f.write(b"\0" * (1 << 20))
    return file


@pytest.mark.parametrize(("case", "named", "says"), NOT_NPY, ids=[c for c, _, _ in NOT_NPY])
def test_a_value_file_in_the_folder_that_is_not_its_leafs_npy_is_not_judged(
    tmp_path: Path, case: str, named: Callable[[Path], Path], says: str
) -> None:
    found = _judged(tmp_path, named)
    assert isinstance(found, str) and "\n" not in found, (case, found)
    assert found.startswith("the log of the fault-free run names value file "), found
    assert says in found
    if case == "pickled":
        assert "pickled" in found and "never unpickled" in found


def test_the_episodes_own_log_naming_a_fifo_is_not_judged_either(tmp_path: Path) -> None:
    log = tmp_path / "episode.jsonl"
    end, base_end = _end(_fifo_outside(log)), _end(_written(tmp_path / "b.jsonl"))
    vet_value_files([end], log)
    vet_value_files([base_end], tmp_path / "b.jsonl")
    found = within(lambda: compare_final_states(end, base_end, True))
    assert isinstance(found, str) and found.startswith("the log names value file "), found


def test_a_log_cannot_name_its_own_values_folder(tmp_path: Path) -> None:
    """The folder is the reader's to set: one a forged leaf carries is replaced."""
    log = tmp_path / "episode.jsonl"
    end = _end("/etc/passwd")
    end["final_state"][LEAF]["_values_folders"] = ["/"]
    vet_value_files([end], log)
    with pytest.raises(ValueFileRefused, match="not a regular file in the log's values folder"):
        leaf_array(end["final_state"][LEAF])


def test_an_unvetted_leaf_naming_a_fifo_neither_blocks_nor_seals(tmp_path: Path) -> None:
    """A run judged as it ends (no log path to vet against): the loop could have left a FIFO
    where its value file goes; the seal and the read refuse it without blocking."""
    end = _end(_fifo_outside(tmp_path / "e.jsonl"))
    within(lambda: seal(end))
    assert "sha256" not in end["final_state"][LEAF]
    error = within(lambda: _raised(lambda: leaf_array(end["final_state"][LEAF])))
    assert isinstance(error, ValueFileRefused)


def _raised(call: Callable[[], Any]) -> BaseException | None:
    try:
        call()
    except Exception as error:  # handed back to the test
        return error
    return None


def test_a_sealed_value_file_changed_after_its_run_is_said(tmp_path: Path) -> None:
    log = tmp_path / "episode.jsonl"
    end = _end(_written(log))
    seal(end)
    leaf = end["final_state"][LEAF]
    np.testing.assert_array_equal(leaf_array(leaf), VALUES)
    np.save(leaf["file"], VALUES * 2)
    (said,) = compare_final_states(end, end, True)
    assert "was changed after the run that wrote it ended" in said


@pytest.mark.parametrize("how", ["removed", "a folder", "a symlink"])
def test_a_sealed_value_file_removed_after_its_run_is_the_loops_doing(
    tmp_path: Path, how: str
) -> None:
    """Sealed as its run left it, then gone: a later run of the loop did it (a failure that
    says so), not a log edited or moved by hand (which is not judged)."""
    log = tmp_path / "episode.jsonl"
    end = _end(_written(log))
    seal(end)
    leaf = end["final_state"][LEAF]
    file = Path(leaf["file"])
    file.unlink()
    if how == "a folder":
        file.mkdir()
    elif how == "a symlink":
        file.symlink_to("/etc/hostname")
    (said,) = compare_final_states(end, end, True)
    assert "was removed or replaced after the run that wrote it ended" in said


def test_a_sha256_a_log_carries_is_not_a_seal(tmp_path: Path) -> None:
    """A run_end's sha256 read from a log (anyone may write one) is dropped by the seal: a
    value file that was never there stays "not judged", not the loop's failure."""
    log = tmp_path / "episode.jsonl"
    end = _end(_written(log))
    leaf = end["final_state"][LEAF]
    Path(leaf["file"]).unlink()
    leaf["sha256"] = "0" * 64
    seal(end)
    said = compare_final_states(end, end, True)
    assert isinstance(said, str) and "not a regular file" in said, said


def test_a_log_read_from_disk_carrying_a_sha256_is_not_judged_as_the_loops_change(
    tmp_path: Path,
) -> None:
    """``check`` reads a log and vets it without a seal: a sha256 in it is dropped, so a value
    file that is not there stays "not judged", never a failure the loop is blamed for."""
    log = tmp_path / "episode.jsonl"
    end = _end(_written(log))
    leaf = end["final_state"][LEAF]
    Path(leaf["file"]).unlink()
    leaf["sha256"] = "0" * 64
    vet_value_files([end], log)
    said = compare_final_states(end, end, True)
    assert isinstance(said, str) and "not a regular file" in said, said
