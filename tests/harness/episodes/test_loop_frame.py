"""Where a blocked loop was, read from the child's faulthandler dump: the loop's own line, not
an installed library's frame that ran inside it (filelock's audit hook runs on every audited
event, so a dump can catch the loop's main thread there: CI once said "blocked at _fork.py:356
in _audit_fork_safety" for a loop spinning in its own while loop)."""

from __future__ import annotations

from pathlib import Path

from pathways_chaos.harness.episodes.stack_dump import loop_frame

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


def _sections(tmp_path: Path, main_id: str, sections: list[tuple[str, list[str]]]) -> str:
    lines = [f"main thread {main_id}"]
    for header, files in sections:
        lines.append(f"{header} (most recent call first):")
        lines += [f'  File "{f}", line {n} in f{n}' for n, f in enumerate(files, start=1)]
        if "in full" in header and "unended" not in header:
            lines.append("end of the main thread's stack")
    path = tmp_path / "stacks.txt"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_main_thread_deeper_than_faulthandlers_100_frames_is_read_from_its_whole_stack(
    tmp_path,
):
    """A loop stuck in JAX's lowering: faulthandler's section for the main thread holds 100
    of JAX's frames and neither the loop's nor the child's; the whole stack the child adds
    after it names the loop's line."""
    main = "0x00007f0000000001"
    jax = [f"{SITE}/jax/_src/interpreters/mlir.py"] * 100
    stacks = _sections(
        tmp_path,
        main,
        [
            ("Thread 0x00007f0000000002", ["/usr/lib/python3.13/threading.py"]),
            (f"Current thread {main}", jax),
            (f"Thread {main} in full", [*jax, *jax, "/work/train.py", "/repo/child.py"]),
        ],
    )
    assert loop_frame(stacks) == "/work/train.py:201 in f201 (waiting in mlir.py:1 in f1)"


def test_without_the_whole_stack_faulthandlers_main_section_is_found_by_the_threads_id(
    tmp_path,
):
    """The main thread blocked in C never runs the child's handler: faulthandler's section is
    all there is, found by the id although the child's outermost frame is cut from it."""
    main = "0x00007f0000000001"
    stacks = _sections(
        tmp_path,
        main,
        [
            (f"Thread {main}", [f"{SITE}/jax/_src/api.py"] * 99 + ["/work/train.py"]),
            ("Current thread 0x00007f0000000002", ["/work/helper.py", "/repo/child.py"]),
        ],
    )
    assert loop_frame(stacks) == "/work/train.py:100 in f100 (waiting in api.py:1 in f1)"


def test_a_whole_stack_still_being_written_is_not_read(tmp_path):
    """Read while the child writes it, the whole stack has no end line yet: faulthandler's
    section is used, not half of the whole one."""
    main = "0x00007f0000000001"
    stacks = _sections(
        tmp_path,
        main,
        [
            (f"Current thread {main}", [f"{SITE}/jax/_src/api.py", "/work/train.py"]),
            (f"Thread {main} in full unended", [f"{SITE}/jax/_src/api.py"]),
        ],
    )
    assert loop_frame(stacks) == "/work/train.py:2 in f2 (waiting in api.py:1 in f1)"
