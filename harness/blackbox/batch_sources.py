"""Batch sources besides grain's ``ElasticIterator``: grain's ``DataLoader`` and dataset
iterators, and the loop's own generators and iterators of batches.

Why: the judges (exactly-once, resume, ``batch=N`` triggers) need every batch the loop trains,
counted once, when it reaches the loop. grain's iterators nest (a ``DataLoaderIterator`` wraps a
chain of ``DatasetIterator``s) and prefetch on threads of their own, and a loop's generator
often passes on a batch a grain iterator already gave it; so a batch is counted only

- by the OUTERMOST grain ``__next__`` on the loop's thread (a depth count; the observer's
  ``ElasticIterator`` wrapper counts as one, so what it calls inside is not counted again);
- or, for the loop's own code, at the yield (``sys.monitoring`` ``PY_YIELD``) or the return of
  a ``__next__`` (``PY_RETURN``) that hands a batch carrying sample ids to code that is not
  another of the loop's iterators; a loop iterator that passes on a batch a source below it
  already counted (one drawn while its frame was on the stack) is not counted again.

Nothing here changes what the loop gets: each wrapper returns what grain returned.
"""

from __future__ import annotations

import inspect
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import numpy as np

from pathways_chaos.harness.blackbox.values import (
    batch_size_of,
    elastic_inner_iterator,
    is_plumbing,
    position_of,
    sample_ids_of,
)

#: ``wrap(owner, name, wrapper)``: the observer's, so its exit undoes these patches too.
Wrap = Callable[[Any, str, Callable[..., Any]], None]
#: ``drawn(batch, position, input_s)``: one batch reached the loop.
Drawn = Callable[[Any, int | None, float], None]
#: ``moved(position)``: the loop set a grain iterator's state.
Moved = Callable[[int | None], object]

#: The exit witness takes 5 then 2, the catch watch 4 then 3.
TOOL_IDS = (3, 0, 1)
#: Frames remembered at once (a generator dropped mid-way never says it ended).
MAX_FRAMES = 256
#: Ids remembered per frame: a loop iterator that renumbers its batches never hands them on.
MAX_IDS = 1 << 16
_TOOLKIT = Path(__file__).resolve().parents[1]  # harness/
_GENERATOR, _NEXT, _OTHER = "generator", "next", ""


def grain_iterator_classes() -> list[type]:
    """``DataLoaderIterator`` and every loaded ``DatasetIterator`` subclass, the
    ``ElasticIterator``'s inner one excepted (the observer watches it)."""
    import grain

    elastic = elastic_inner_iterator()
    found: list[type] = [grain.DataLoaderIterator]
    todo = [grain.DatasetIterator]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found and sub is not elastic:
                found.append(sub)
                todo.append(sub)
    return found


def is_library(filename: str) -> bool:
    """Installed packages, the standard library and this toolkit (its sample loops in
    ``reference/`` excepted): not the loop's own code."""
    if is_plumbing(filename) or "site-packages" in filename or "dist-packages" in filename:
        return True
    return filename.startswith(str(_TOOLKIT)) and "/reference/" not in filename


def batch_ids(value: Any) -> list[int] | None:
    """The sample ids of a batch (an id per row: a lone record's scalar id is not a batch)."""
    inner = value[0] if isinstance(value, tuple) and value else value
    if not isinstance(inner, Mapping):
        return None
    field = inner.get("id", inner.get("ids"))
    if field is None or np.ndim(field) < 1:
        return None
    return sample_ids_of(value)


class _Fed:
    """What sources below a loop iterator's frame counted since it last handed a batch on."""

    __slots__ = ("count", "ids")

    def __init__(self) -> None:
        self.count = 0
        self.ids: set[int] = set()


class BatchSources:
    """Installs the grain wrappers (through the observer's ``wrap``) and the ``sys.monitoring``
    watch of the loop's iterators; ``stop`` ends the watch (the wrappers go with the observer's)."""

    def __init__(self, wrap: Wrap, drawn: Drawn, moved: Moved) -> None:
        self._wrap = wrap
        self._drawn = drawn
        self._moved = moved
        self._main = threading.get_ident()
        self._depth = 0  # grain calls in progress on the loop's thread
        self._kinds: dict[CodeType, str] = {}
        self._fed: dict[int, _Fed] = {}
        self._pending: dict[int, list[Any]] = {}  # batches an inner loop iterator handed on
        self._started: dict[int, float] = {}
        self._tool: int | None = None
        # Sample ids an ElasticIterator gave another thread (a prefetch thread): the observer
        # counted that draw there, so the loop's generator handing the batch on is not another.
        self._elsewhere: set[int] = set()
        self._elsewhere_lock = threading.Lock()

    # -- install / remove ----------------------------------------------------------------------
    def install(self) -> None:
        elastic = elastic_inner_iterator()
        if elastic is not None:  # the observer counts these; what they call inside is not
            self._wrap(elastic, "__next__", self._elastic_next)
            self._wrap(elastic, "set_state", self._inside)
        for cls in grain_iterator_classes():
            if "__next__" in cls.__dict__:
                self._wrap(cls, "__next__", self._next)
            if "set_state" in cls.__dict__:
                self._wrap(cls, "set_state", self._set_state)
        self._start_monitoring()

    def stop(self) -> None:
        monitoring = getattr(sys, "monitoring", None)
        if self._tool is None or monitoring is None:
            return
        events = monitoring.events
        for code, kind in self._kinds.items():
            if kind:
                monitoring.set_local_events(self._tool, code, 0)
        monitoring.set_events(self._tool, 0)
        for event in (events.PY_YIELD, events.PY_RETURN, events.PY_START, events.PY_RESUME):
            monitoring.register_callback(self._tool, event, None)
        monitoring.free_tool_id(self._tool)
        self._tool = None
        self._kinds.clear()
        self._fed.clear()
        self._pending.clear()
        self._started.clear()

    def _start_monitoring(self) -> None:
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is None:
            return
        from pathways_chaos.harness.engine.monitoring_tools import claim_tool_id

        tool = claim_tool_id(TOOL_IDS, "pathways-chaos-batches")
        if tool is None:
            return
        self._tool = tool
        events = monitoring.events
        monitoring.register_callback(tool, events.PY_YIELD, self._on_yield)
        monitoring.register_callback(tool, events.PY_RETURN, self._on_return)
        monitoring.register_callback(tool, events.PY_START, self._on_start)
        monitoring.register_callback(tool, events.PY_RESUME, self._on_start)
        # Locations an earlier episode in this process disabled must report again.
        monitoring.restart_events()
        monitoring.set_events(tool, events.PY_YIELD | events.PY_RETURN)

    # -- grain -----------------------------------------------------------------------------------
    def _outermost(self) -> bool:
        return not self._depth and threading.get_ident() == self._main

    def _next(self, original: Callable[..., Any], iterator: Any) -> Any:
        if not self._outermost():
            return original(iterator)
        self._depth += 1
        try:
            before = _position(iterator)
            t0 = time.perf_counter()
            batch = original(iterator)
            input_s = time.perf_counter() - t0
            after = _position(iterator)
        finally:
            self._depth -= 1
        size = batch_size_of(batch)
        # A state that counts records (not batches, nor records a filter dropped) is a
        # position the judges can add sizes to; any other is not given as one.
        exact = before is not None and after is not None and after - before == size
        self._mark_fed(sys._getframe(1), batch_ids(batch))
        self._drawn(batch, before if exact else None, input_s)
        return batch

    def _set_state(self, original: Callable[..., Any], iterator: Any, state: Any) -> Any:
        if not self._outermost():
            return original(iterator, state)
        self._depth += 1
        try:
            out = original(iterator, state)
        finally:
            self._depth -= 1
        self._moved(position_of(state))
        return out

    def _elastic_next(self, original: Callable[..., Any], iterator: Any) -> Any:
        if threading.get_ident() != self._main:
            batch = original(iterator)  # the observer counts this draw, in this thread
            with self._elsewhere_lock:
                if len(self._elsewhere) > MAX_IDS:
                    self._elsewhere.clear()
                self._elsewhere.update(batch_ids(batch) or ())
            return batch
        if not self._outermost():
            return original(iterator)
        batch = self._inside(original, iterator)
        self._mark_fed(sys._getframe(1), batch_ids(batch))
        return batch

    def _inside(self, original: Callable[..., Any], *args: Any) -> Any:
        self._depth += 1
        try:
            return original(*args)
        finally:
            self._depth -= 1

    # -- the loop's own iterators (sys.monitoring) -----------------------------------------------
    def _kind(self, code: CodeType) -> str:
        kind = self._kinds.get(code)
        if kind is None:
            kind = _OTHER
            if not is_library(code.co_filename):
                if code.co_flags & inspect.CO_GENERATOR:
                    kind = _GENERATOR
                elif code.co_name == "__next__":
                    kind = _NEXT
            self._kinds[code] = kind
            if kind and self._tool is not None:
                events = sys.monitoring.events
                sys.monitoring.set_local_events(
                    self._tool, code, events.PY_START | events.PY_RESUME
                )
        return kind

    def _on_yield(self, code: CodeType, offset: int, value: object) -> object:
        if self._kind(code) != _GENERATOR:
            return sys.monitoring.DISABLE
        if threading.get_ident() == self._main:
            self._handed(sys._getframe(1), value)
        return None

    def _on_return(self, code: CodeType, offset: int, value: object) -> object:
        kind = self._kind(code)
        if kind == _GENERATOR and threading.get_ident() == self._main:
            self._forget(id(sys._getframe(1)))  # a generator that ended
            return None
        if kind != _NEXT:
            return sys.monitoring.DISABLE
        if threading.get_ident() == self._main:
            self._handed(sys._getframe(1), value)
        return None

    def _on_start(self, code: CodeType, offset: int) -> object:
        if threading.get_ident() == self._main and self._kind(code):
            self._started[id(sys._getframe(1))] = time.perf_counter()
            _bound(self._started)
        return None

    def _loop_iterator(self, frame: FrameType | None) -> bool:
        return frame is not None and bool(self._kind(frame.f_code))

    def _handed(self, frame: FrameType, value: Any) -> None:
        """A loop iterator's frame hands ``value`` to its caller: count it if it is a batch
        reaching code that is not another loop iterator, and no source below counted it."""
        if self._depth:
            return  # a grain iterator is drawing from the loop's generator: grain counts
        key = id(frame)
        t0 = self._started.pop(key, None)
        back = frame.f_back
        ids = batch_ids(value)
        pending = self._pending.pop(key, [])
        if ids is None:
            self._fed.pop(key, None)  # what it drew, it did not hand on as a batch
            # Batches an inner iterator handed to this one, which gives on something else (a
            # training generator yielding metrics): they reached the loop here.
            if self._loop_iterator(back):
                assert back is not None
                self._pending.setdefault(id(back), []).extend(pending)
            else:
                for batch in pending:
                    self._count(frame, batch, batch_ids(batch), 0.0)
            return
        if self._drawn_elsewhere(ids):
            self._fed.pop(key, None)
            return
        fed = self._fed.get(key)
        if fed is not None and (fed.count or set(ids) <= fed.ids):
            fed.count = 0  # passes on what a source below already counted
            fed.ids.difference_update(ids)
            if not fed.ids:
                del self._fed[key]
            return
        if self._loop_iterator(back):
            assert back is not None
            self._pending.setdefault(id(back), []).append(value)  # the outer one decides
            _bound(self._pending)
            return
        input_s = 0.0 if t0 is None else time.perf_counter() - t0
        self._count(frame, value, ids, input_s)

    def _drawn_elsewhere(self, ids: list[int]) -> bool:
        """The batch was drawn, and counted, in another thread; its ids are taken once."""
        with self._elsewhere_lock:
            if not ids or not set(ids) <= self._elsewhere:
                return False
            self._elsewhere.difference_update(ids)
            return True

    def _count(self, frame: FrameType, batch: Any, ids: list[int] | None, input_s: float) -> None:
        self._mark_fed(frame.f_back, ids)
        self._drawn(batch, None, input_s)

    def _mark_fed(self, frame: FrameType | None, ids: list[int] | None) -> None:
        """Every loop iterator on the stack above a counted source passes its batch on."""
        while frame is not None:
            if self._kind(frame.f_code):
                fed = self._fed.setdefault(id(frame), _Fed())
                fed.count += 1
                if len(fed.ids) > MAX_IDS:  # ids it renumbers are never handed on
                    fed.ids.clear()
                fed.ids.update(ids or ())
                _bound(self._fed)
            frame = frame.f_back

    def _forget(self, key: int) -> None:
        self._fed.pop(key, None)
        self._pending.pop(key, None)
        self._started.pop(key, None)


def _position(iterator: Any) -> int | None:
    try:
        return position_of(iterator.get_state())
    except Exception:  # a user's iterator without a usable state: no position
        return None


def _bound(table: dict[int, Any]) -> None:
    while len(table) > MAX_FRAMES:
        del table[next(iter(table))]


class IteratorOrder:
    """Numbers the iterators one attempt draws from, in the order of their first draw (0 the
    first): a loop that draws from two in turn trains a mixture of data sources. Held weakly:
    an iterator the loop drops is not kept alive (with its workers) by being numbered."""

    def __init__(self) -> None:
        self._seen: list[Callable[[], Any]] = []

    def of(self, iterator: Any) -> int:
        for number, seen in enumerate(self._seen):
            if seen() is iterator:
                return number
        try:
            self._seen.append(weakref.ref(iterator))
        except TypeError:  # not weakly referable: numbered by a reference that outlives it
            self._seen.append(lambda: iterator)
        return len(self._seen) - 1
