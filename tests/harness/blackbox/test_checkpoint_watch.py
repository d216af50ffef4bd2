"""Every orbax path a real job checkpoints through is seen once, with its tree unwrapped (the
data position found in it), and the patches are undone."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pathways_chaos.harness.blackbox.checkpoints import CheckpointWatch, plain_tree
from pathways_chaos.harness.blackbox.values import find_position


class Seen:
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.undo: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, name: str, wrapper: Any) -> None:
        import functools

        original = owner.__dict__[name]

        @functools.wraps(original)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            return wrapper(original, *args, **kwargs)

        self.undo.append((owner, name, original))
        setattr(owner, name, wrapped)

    def __enter__(self) -> Seen:
        CheckpointWatch(
            self.wrap,
            lambda step, path, tree, held, **_: self.events.append(
                ("save", step, find_position(tree))
            ),
            lambda: self.events.append(("restoring",)),
            lambda step, tree, **_: self.events.append(("restored", step, find_position(tree))),
        ).install()
        return self

    def __exit__(self, *exc: object) -> None:
        while self.undo:
            owner, name, original = self.undo.pop()
            setattr(owner, name, original)


def _state() -> dict[str, Any]:
    return {"w": np.arange(4, dtype=np.float32), "step": np.asarray(7)}


def test_a_checkpoint_manager_composite_save_and_restore_count_once_with_the_position(tmp_path):
    import orbax.checkpoint as ocp

    with Seen() as seen:
        manager = ocp.CheckpointManager(tmp_path / "ckpt")
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(_state()), data=ocp.args.JsonSave({"global_next_index": 48})
        )
        manager.save(7, args=args)
        manager.wait_until_finished()
        restored = manager.restore(
            7,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(_state()), data=ocp.args.JsonRestore()
            ),
        )
        manager.close()

    assert seen.events == [("save", 7, 48), ("restoring",), ("restored", 7, 48)]
    assert int(restored["data"]["global_next_index"]) == 48
    assert "wrapped" not in repr(ocp.CheckpointManager.save)  # undone
    assert ocp.CheckpointManager.save.__qualname__ == "CheckpointManager.save"


@pytest.mark.parametrize("kind", ["standard", "pytree"])
def test_the_v0_checkpointers_are_seen(tmp_path, kind):
    import orbax.checkpoint as ocp

    tree = {**_state(), "data": {"global_next_index": np.asarray(16)}}
    with Seen() as seen:
        if kind == "standard":
            checkpointer = ocp.StandardCheckpointer()
            checkpointer.save(tmp_path / "c", tree)
            checkpointer.wait_until_finished()
            checkpointer.restore(tmp_path / "c", tree)
        else:
            checkpointer = ocp.PyTreeCheckpointer()
            checkpointer.save(tmp_path / "c", tree)
            checkpointer.restore(tmp_path / "c")

    assert seen.events == [("save", 7, 16), ("restoring",), ("restored", 7, 16)]


@pytest.mark.parametrize(("save", "load"), [("save", "load"), ("save_pytree", "load_pytree")])
def test_the_v1_entry_points_are_seen(tmp_path, save, load):
    from orbax.checkpoint import v1 as ocp

    tree = {**_state(), "data": {"global_next_index": np.asarray(32)}}
    with Seen() as seen:
        getattr(ocp, save)(tmp_path / "c", tree)
        getattr(ocp, load)(tmp_path / "c")

    assert seen.events == [("save", 7, 32), ("restoring",), ("restored", 7, 32)]


def test_plain_tree_unwraps_orbax_arguments_only():
    import orbax.checkpoint as ocp

    class Item:  # a user's object with an .item is not unwrapped
        item = 3

    mine = Item()
    tree = plain_tree(ocp.args.Composite(a=ocp.args.PyTreeSave({"x": mine})))
    assert tree == {"a": {"x": mine}}
