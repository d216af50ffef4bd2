"""A child's stack dump, read: which thread is the main one and where the loop was in it.

The child writes faulthandler's dump of every thread on ``STACK_SIGNAL`` (in C: it works while
the loop blocks in a system call), then its main thread's whole stack when it next runs Python
(faulthandler keeps a thread's innermost 100 frames only). The parent names the loop's own line
from them, never an installed library's frame the loop was inside.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from pathways_chaos.harness.blackbox.values import installed_package, is_plumbing
from pathways_chaos.harness.episodes.child import MAIN_THREAD_LINE, WHOLE_STACK_END

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<name>\S+)')


@dataclasses.dataclass(frozen=True)
class MainStack:
    """The main thread's frames in a stack dump, innermost first; ``whole`` when they are its
    whole stack (the child's own dump), not faulthandler's innermost 100."""

    frames: list[tuple[str, str, str]]
    whole: bool

    def own_frame(self) -> tuple[str, str, str] | None:
        """The innermost frame outside installed code and the toolkit's plumbing."""
        return next((c for c in self._candidates() if installed_package(c[0]) is None), None)

    def _candidates(self) -> list[tuple[str, str, str]]:
        return [f for f in self.frames if not is_plumbing(f[0]) and "child.py" not in f[0]]

    def where(self) -> str:
        """``train.py:88 in main``, with the innermost frame of all where that differs. An
        installed library's frame (an audit hook such as filelock's, run inside the loop's
        line) is the loop's only when nothing outside installed code is on the stack."""
        own = self.own_frame() or next(iter(self._candidates()), None)
        inner = self.frames[0]
        if own is None:
            return f"{inner[0]}:{inner[1]} in {inner[2]}"
        text = f"{own[0]}:{own[1]} in {own[2]}"
        if own != inner:
            text += f" (waiting in {Path(inner[0]).name}:{inner[1]} in {inner[2]})"
        return text


def main_stack(stack_file: str) -> MainStack | None:
    """The main thread's last section in a stack file: found by the id the child wrote first
    (else as the section holding the child's own frame), its whole stack when the child could
    add it after faulthandler's dump."""
    try:
        whole = Path(stack_file).read_text(errors="replace")
    except OSError:
        return None
    first, text = whole.partition("\n")[0], whole[-200_000:]
    main_id = first.removeprefix(MAIN_THREAD_LINE) if first.startswith(MAIN_THREAD_LINE) else None
    sections: list[_Section] = []
    for line in text.splitlines():
        if "most recent call first" in line:
            is_main = main_id is not None and f"hread {main_id} " in line
            sections.append(_Section(is_main, " in full " in line))
        elif line == WHOLE_STACK_END and sections:
            sections[-1].ended = True
        elif (match := _FRAME.match(line)) and sections:
            sections[-1].frames.append((match["file"], match["line"], match["name"]))
    # A whole stack still being written (no end line yet) is not read; faulthandler's is.
    usable = [s for s in sections if s.frames and (s.ended or not s.whole)]
    found = next((s for s in reversed(usable) if s.is_main), None) or next(
        (s for s in reversed(usable) if any("child.py" in f for f, _, _ in s.frames)), None
    )
    return None if found is None else MainStack(found.frames, found.whole)


@dataclasses.dataclass
class _Section:
    is_main: bool
    whole: bool
    frames: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)
    ended: bool = False


def loop_frame(stack_file: str) -> str | None:
    """From a stack dump: the main thread's innermost frame in the loop's own code, with the
    innermost frame of all where that differs (``train.py:88 in main, in threading.py:355 in
    wait``)."""
    stack = main_stack(stack_file)
    return None if stack is None else stack.where()
