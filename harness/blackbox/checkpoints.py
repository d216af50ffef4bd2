"""Every way a loop writes or reads the checkpoint that survives a restart, seen the same way.

Real jobs write it with orbax's ``CheckpointManager`` (MaxText does), ``StandardCheckpointer`` or
``PyTreeCheckpointer``, or the v1 entry points (``save``, ``load``, ``save_pytree``,
``load_pytree``, their ``_async`` forms, ``save_checkpointables``, the training
``Checkpointer``). Each call becomes one ``checkpoint_save`` or one ``restore_begin`` /
``restore_end`` pair, with the tree as the loop handed it (arguments such as
``Composite(state=StandardSave(...), data=JsonSave(...))`` unwrapped to a plain mapping), so the
judges see the data position and the model of a checkpoint whatever wrote it. A call made
inside another watched call (``CheckpointManager`` through its ``Checkpointer``) counts once.

On the fake, a ``slow_save`` holds the save (``SaveHolder``, the observer's, through the save
gate): an asynchronous call returns at once, as orbax's does after its device-to-host copy, and is
committed later (its ``wait_until_finished``/``wait``/``close``/``result()`` costs what is left
on the episode clock); a synchronous call blocks while the clock passes its seconds.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import numpy as np

#: How a held save answers the loop: ``sync`` blocks (``True`` or ``None`` returned), ``async``
#: returns at once, ``response`` returns an ``AsyncResponse``; ``manager`` is a
#: ``CheckpointManager``'s, async when its checkpointer is.
SYNC, SYNC_TRUE, ASYNC, RESPONSE, RESPONSE_TRUE, MANAGER = (
    "sync",
    "sync-true",
    "async",
    "response",
    "response-true",
    "manager",
)

#: (where, method, what it does, step from the first argument, how a held save answers).
_V0 = (
    ("CheckpointManager", "save", "save", True, MANAGER),
    ("CheckpointManager", "restore", "restore", True, ""),
    ("Checkpointer", "save", "save", False, SYNC),
    ("AsyncCheckpointer", "save", "save", False, ASYNC),
    ("Checkpointer", "restore", "restore", False, ""),
)
#: Where the loop waits for its saves (each waits for the held saves of its object).
_V0_WAITS = (
    ("CheckpointManager", "wait_until_finished"),
    ("CheckpointManager", "close"),
    ("AsyncCheckpointer", "wait_until_finished"),
    ("AsyncCheckpointer", "close"),
)
_V1_FUNCTIONS = (
    ("save", "save", SYNC),
    ("save_async", "save", RESPONSE),
    ("save_pytree", "save", SYNC),
    ("save_pytree_async", "save", RESPONSE),
    ("save_checkpointables", "save", SYNC),
    ("save_checkpointables_async", "save", RESPONSE),
    ("load", "restore", ""),
    ("load_async", "restore", ""),
    ("load_pytree", "restore", ""),
    ("load_pytree_async", "restore", ""),
    ("load_checkpointables", "restore", ""),
)
_V1_TRAINING = (
    ("save", "save", SYNC_TRUE),
    ("save_async", "save", RESPONSE_TRUE),
    ("save_pytree", "save", SYNC_TRUE),
    ("save_pytree_async", "save", RESPONSE_TRUE),
    ("save_checkpointables", "save", SYNC_TRUE),
    ("save_checkpointables_async", "save", RESPONSE_TRUE),
    ("load", "restore", ""),
    ("load_pytree", "restore", ""),
    ("load_checkpointables", "restore", ""),
)
_V1_TRAINING_WAITS = ("wait", "close")
#: Where a save call takes the tree, by keyword.
_TREE_KEYWORDS = ("args", "items", "pytree", "state", "checkpointables", "item")


class HeldLike(Protocol):
    """What the watch needs of a held save (``save_gate.HeldSave``)."""

    done: bool
    lost: BaseException | None


class SaveHolder(Protocol):
    """Holds a save ``slow_save`` armed (the observer's, on the fake's save gate)."""

    def hold(
        self,
        step: int | None,
        path: str,
        make: Callable[[], tuple[Any, Callable[[], Any]]],
        owner: int,
    ) -> HeldLike | None:
        """``None`` if no save is armed; else ``make()`` gives the tree held and its commit."""
        ...

    def block(self, held: HeldLike) -> None: ...

    def wait(self, owner: int | None) -> None: ...

    def lost(self, held: HeldLike) -> None:
        """Raises the slice-down error a loss left ``held``, if any (its ``result()``)."""
        ...

    def release_due(self) -> None: ...


class HeldResponse:
    """What an ``*_async`` save held in flight hands the loop: ``result()`` waits for it (on the
    episode clock) and raises the slice-down error if a loss dropped it, as orbax's response
    raises the error its save met."""

    def __init__(self, holder: SaveHolder, value: Any) -> None:
        self._holder, self._value = holder, value
        self.held: HeldLike | None = None

    def result(self, timeout: float | None = None) -> Any:
        del timeout
        self._holder.wait(id(self))
        if self.held is not None:
            self._holder.lost(self.held)
        return self._value

    def on_complete(self, callback: Callable[[Any], None]) -> None:
        callback(self.result())


def plain_tree(value: Any) -> Any:
    """orbax's argument objects as the tree they carry: ``Composite`` as a dict of its items,
    ``StandardSave(x)``/``PyTreeSave(x)``/``JsonSave(x)`` (anything with ``.item``) as ``x``."""
    if isinstance(value, Mapping) and type(value).__module__.startswith("orbax"):
        return {str(k): plain_tree(v) for k, v in value.items()}
    item = getattr(value, "item", None)
    if item is not None and type(value).__module__.startswith("orbax"):
        return plain_tree(item)
    return value


def swap_tree(value: Any, change: Callable[[Any], Any]) -> Any:
    """``value`` with the tree it carries replaced by ``change(tree)``, orbax's argument objects
    (``Composite``, ``StandardSave``...) rebuilt around it, as ``plain_tree`` unwraps them."""
    if isinstance(value, Mapping) and type(value).__module__.startswith("orbax"):
        return type(value)(**{str(k): swap_tree(v, change) for k, v in value.items()})
    orbax_arg = type(value).__module__.startswith("orbax") and dataclasses.is_dataclass(value)
    if orbax_arg and hasattr(value, "item") and not isinstance(value, type):
        return dataclasses.replace(value, item=swap_tree(value.item, change))
    return change(value)


def copy_arrays(tree: Any) -> Any:
    """A device copy of each JAX array in ``tree`` (same devices and sharding): what a held
    asynchronous save writes later, as orbax's copy made before the call returned; donating
    the loop's own buffers then cannot delete it."""
    import jax

    return jax.tree.map(lambda x: x.copy() if isinstance(x, jax.Array) else x, tree)


def _tree_at(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | int | None:
    """Where a save call (its first argument a place or a step) carries its tree."""
    for key in _TREE_KEYWORDS:
        if key in kwargs and kwargs[key] is not None:
            return key
    return 1 if len(args) > 1 else None


def _saved_tree(kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The tree a save call hands orbax, whichever way it was passed."""
    del kind  # every watched save takes a place or a step first
    at = _tree_at(args, kwargs)
    if at is None:
        return None
    return plain_tree(kwargs[at] if isinstance(at, str) else args[at])


def _with_copies(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's arguments with its tree's arrays copied (see ``copy_arrays``)."""
    at = _tree_at(args, kwargs)
    if isinstance(at, str):
        return args, {**kwargs, at: swap_tree(kwargs[at], copy_arrays)}
    if at is None:
        return args, kwargs
    return (*args[:at], swap_tree(args[at], copy_arrays), *args[at + 1 :]), kwargs


def _as_step(value: Any) -> int | None:
    with contextlib.suppress(TypeError, ValueError):
        if value is not None and not isinstance(value, str | bytes) and np.ndim(value) == 0:
            return int(np.asarray(value))
    return None


def _step_in(tree: Any) -> int | None:
    return _as_step(tree.get("step")) if isinstance(tree, Mapping) else None


def _chosen_step(owner: Any, named: Any) -> int | None:
    """The step a checkpoint manager's restore loads when the loop names it by its metadata
    (v1's ``CheckpointMetadata``) or not at all (``None``: the latest, ``latest_step()`` or
    ``latest``, as orbax documents)."""
    if named is not None:
        return _as_step(getattr(named, "step", None))
    with contextlib.suppress(Exception):  # the loop's manager, read: never our failure
        latest_step = getattr(owner, "latest_step", None)
        if callable(latest_step):
            return _as_step(latest_step())
        return _as_step(getattr(getattr(owner, "latest", None), "step", None))
    return None


def _manager_of(owner: Any, answer: str, out: Any = None) -> dict[str, Any]:
    """A checkpoint manager's call (``CheckpointManager``, v1's training ``Checkpointer``): its
    directory (``manager``: which checkpoints a restore chose among), and ``skipped`` when its
    save returned False (``save_interval_steps``, a save decision policy: nothing was
    written). Empty for any other call."""
    managed = hasattr(owner, "latest_step") or hasattr(owner, "should_save")
    if answer not in (MANAGER, SYNC_TRUE, "restore") or not managed:
        return {}
    directory = getattr(owner, "directory", None)
    fields: dict[str, Any] = {"manager": None if directory is None else str(directory)}
    if answer != "restore" and out is False:
        fields["skipped"] = True
    return fields


class CheckpointWatch:
    """Wraps the orbax entry points; ``saved(step, path, tree, held)`` and ``restoring()`` /
    ``restored(step, tree)`` are the observer's; ``holder`` (on the fake) holds armed saves."""

    def __init__(
        self,
        wrap: Callable[[Any, str, Callable[..., Any]], None],
        saved: Callable[..., None],
        restoring: Callable[[], None],
        restored: Callable[..., None],
        holder: SaveHolder | None = None,
    ) -> None:
        self._wrap = wrap
        self._saved, self._restoring, self._restored = saved, restoring, restored
        self._holder = holder
        self._depth = 0

    def install(self) -> None:
        import orbax.checkpoint as ocp
        from orbax.checkpoint import v1 as ocp_v1

        for owner_name, method, does, step_first, answer in _V0:
            owner = getattr(ocp, owner_name, None)
            if owner is not None and method in owner.__dict__:
                self._wrap(owner, method, self._method(does, step_first, answer))
        for owner_name, method in _V0_WAITS:
            owner = getattr(ocp, owner_name, None)
            if self._holder is not None and owner is not None and method in owner.__dict__:
                self._wrap(owner, method, self._waits)
        for name, does, answer in _V1_FUNCTIONS:
            if hasattr(ocp_v1, name):
                self._wrap(ocp_v1, name, self._function(does, answer))
        training = getattr(getattr(ocp_v1, "training", None), "Checkpointer", None)
        if training is not None:
            for name, does, answer in _V1_TRAINING:
                if name in training.__dict__:
                    self._wrap(training, name, self._method(does, True, answer))
            for name in _V1_TRAINING_WAITS:
                if self._holder is not None and name in training.__dict__:
                    self._wrap(training, name, self._waits)

    @contextlib.contextmanager
    def _outermost(self) -> Iterator[bool]:
        self._depth += 1
        try:
            yield self._depth == 1
        finally:
            self._depth -= 1

    def _waits(self, original: Callable[..., Any], owner: Any, *args: Any, **kwargs: Any) -> Any:
        """The loop waits for its saves: its held ones complete first, on the episode clock."""
        if self._holder is not None and self._depth == 0:
            self._holder.wait(id(owner))
        return original(owner, *args, **kwargs)

    def _save(
        self,
        call: Callable[..., Any],
        owner: Any,
        answer: str,
        step: int | None,
        path: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> tuple[Any, bool]:
        """Makes the save call, or holds it when ``slow_save`` armed one: (what the loop gets,
        whether it was held)."""
        holder = self._holder
        if holder is None:
            return call(*args, **kwargs), False
        if answer == MANAGER:
            import orbax.checkpoint as ocp

            asynchronous = isinstance(getattr(owner, "_checkpointer", None), ocp.AsyncCheckpointer)
            answer = ASYNC if asynchronous else SYNC_TRUE
        response = HeldResponse(holder, answer == RESPONSE_TRUE or None)
        if answer in (ASYNC, RESPONSE, RESPONSE_TRUE) and owner is not None:
            holder.wait(id(owner))  # orbax finishes the save in flight before the next

        def make() -> tuple[Any, Callable[[], Any]]:
            # An async save is written later: from copies, as orbax's own copy before it
            # returns; a sync one blocks the loop, so nothing can change its arrays meanwhile.
            late_args, late_kwargs = (
                (args, kwargs) if answer in (SYNC, SYNC_TRUE) else _with_copies(args, kwargs)
            )

            def commit() -> Any:
                with self._outermost():  # orbax's calls inside it are not the loop's saves
                    return self._finished(call(*late_args, **late_kwargs), owner)

            return _saved_tree("first-is-place", late_args, late_kwargs), commit

        where = response if answer in (RESPONSE, RESPONSE_TRUE) else owner
        held = holder.hold(step, path, make, id(where))
        if held is None:
            # On the fake, a save not held is finished before the loop goes on (as the
            # Snapshotter's): how long one stays in flight is slow_save's to say, not the OS's.
            return self._finished(call(*args, **kwargs), owner), False
        if answer in (SYNC, SYNC_TRUE):
            holder.block(held)
            return (True if answer == SYNC_TRUE else None), True
        if answer == ASYNC:
            return (True if path.startswith("CheckpointManager") else None), True
        response.held = held
        return response, True

    def _finished(self, out: Any, owner: Any) -> Any:
        """Waits for the save call that returned ``out`` (its response, or its owner's wait)."""
        with self._outermost():  # the loop's own waits are not counted twice
            finish = getattr(out, "result", None)
            if callable(finish):
                finish()  # an orbax AsyncResponse: the save is done when it is
            for waiting in ("wait_until_finished", "wait"):
                if owner is not None and callable(getattr(owner, waiting, None)):
                    getattr(owner, waiting)()
                    break
        return out

    def _method(self, does: str, step_first: bool, answer: str) -> Callable[..., Any]:
        def watched(original: Callable[..., Any], owner: Any, *args: Any, **kwargs: Any) -> Any:
            with self._outermost() as outermost:
                if not outermost:
                    return original(owner, *args, **kwargs)
                first = args[0] if args else kwargs.get("step", kwargs.get("directory"))
                step = _as_step(first) if step_first else None
                if does == "save":
                    tree = _saved_tree("first-is-place", args, kwargs)
                    step = step if step is not None else _step_in(tree)
                    path = f"{type(owner).__name__}.{original.__name__}"

                    def call(*a: Any, **k: Any) -> Any:
                        return original(owner, *a, **k)

                    out, held = self._save(call, owner, answer, step, path, args, kwargs)
                    place = None if step_first else str(first)
                    self._saved(step, place, tree, held, **_manager_of(owner, answer, out))
                    return out
                if self._holder is not None:
                    self._holder.release_due()
                if step_first and step is None:
                    step = _chosen_step(owner, first)  # before the load: what it will load
                self._restoring()
                restored = original(owner, *args, **kwargs)
                tree = plain_tree(restored)
                step = step if step is not None else _step_in(tree)
                where = {} if step_first or first is None else {"path": str(first)}
                manager = _manager_of(owner, "restore" if step_first else "")
                self._restored(step, tree, **manager, **where)
                return restored

        return watched

    def _function(self, does: str, answer: str) -> Callable[..., Any]:
        def watched(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            with self._outermost() as outermost:
                if not outermost:
                    return original(*args, **kwargs)
                place = args[0] if args else kwargs.get("path")
                if does == "save":
                    tree = _saved_tree("first-is-place", args, kwargs)
                    step = _step_in(tree)
                    path = f"ocp.v1.{original.__name__}"
                    out, held = self._save(original, None, answer, step, path, args, kwargs)
                    self._saved(step, None if place is None else str(place), tree, held)
                    return out
                if self._holder is not None:
                    self._holder.release_due()
                self._restoring()
                restored = original(*args, **kwargs)
                tree = plain_tree(restored)
                self._restored(
                    _step_in(tree), tree, **({} if place is None else {"path": str(place)})
                )
                return restored

        return watched
