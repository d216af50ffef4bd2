"""``CatchWatch`` names the line that caught a watched error: the ``except`` clause, or the
``with`` whose context manager suppressed it (it named the line before the handler, the
``try`` body's, and then the function's first line)."""

from __future__ import annotations

import contextlib
import inspect

from pathways_chaos.harness.blackbox.catch_watch import CatchWatch


class Watched(Exception):
    """A user's error type (the built-in ones take no weak reference; JAX's do)."""


def _line_of(marker: str) -> int:
    lines, first = inspect.getsourcelines(_swallows)
    return first + next(i for i, text in enumerate(lines) if marker in text)


def _swallows(watch: CatchWatch) -> None:
    padding = [1, 2, 3]  # a first line the handler is not on
    for _ in padding[:1]:
        error = Watched("watched")
        watch.watch(error, 1)
        try:
            raise error
        except Watched:  # MARK-EXCEPT
            pass
    error = Watched("again")
    watch.watch(error, 2)
    with contextlib.suppress(Watched):  # MARK-WITH
        raise error


def test_the_line_that_caught_it_is_named() -> None:
    caught: dict[int, str] = {}
    watch = CatchWatch(lambda number, where: caught.setdefault(number, where))
    watch.start()
    try:
        _swallows(watch)
    finally:
        watch.stop()
    assert caught[1].endswith(f"test_catch_watch.py:{_line_of('MARK-EXCEPT')} in _swallows")
    assert caught[2].endswith(f"test_catch_watch.py:{_line_of('MARK-WITH')} in _swallows")
