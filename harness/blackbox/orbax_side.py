"""The observer's Orbax side: what a loop's saves and restores show (``Snapshotter.save`` /
``load`` / ``join``, and the checkpoint paths ``checkpoints.py`` watches), and the toolkit's own
reads of the loop's arrays (digests, a held save's copy), which are not the loop's.

A mixin of ``LoopObserver`` (``observer.py``), which owns the state declared here and the
``_ids`` of the run and attempt every event carries.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from pathways_chaos.harness.blackbox.checkpoints import HeldLike, copy_arrays
from pathways_chaos.harness.blackbox.held_saves import GateHolder
from pathways_chaos.harness.blackbox.lineage import LineageSeam
from pathways_chaos.harness.blackbox.values import find_position, shapes
from pathways_chaos.harness.engine.digest import digest
from pathways_chaos.harness.engine.recorder import Recorder
from pathways_chaos.harness.engine.save_gate import SaveGate


class OrbaxSide:
    """Records a loop's saves and restores; ``LoopObserver`` sets every attribute below."""

    recorder: Recorder
    lineage: LineageSeam | None
    #: Whether saves and restores carry a digest of each leaf: only where a judge reads them
    #: (the acceptance table's restore rows); at a real job's size each is a pass over the
    #: whole state at every save (issue 33).
    digests: bool
    _save_gate: SaveGate | None
    _holder: GateHolder | None
    _snapshotters: list[Any]
    _last_saved: Any
    _attempt_batches: int
    #: Inside the toolkit's own reads of the loop's arrays (a digest on a lost slice is not a
    #: slice-down error raised to the loop), lineage on or off.
    _reading: int

    def _ids(self) -> dict[str, int]:
        raise NotImplementedError  # the observer's: the run and attempt

    def _snapshotter_init(self, original: Callable[..., Any], snap: Any, *a: Any, **k: Any) -> Any:
        original(snap, *a, **k)
        self._snapshotters.append(snap)

    def _save(self, original: Callable[..., Any], snap: Any, step: int, state: Any) -> Any:
        self._last_saved = state
        digests = self._digest(state)  # of the state as passed, before the copy
        nodes = self.lineage.nodes_of(state) if self.lineage is not None else None
        # The Snapshotter skips a save while the last is not yet taken by its worker thread;
        # read just before the call, so that thread has no time to take it in between.
        gate = self._save_gate
        if gate is not None:
            gate.join_unjoined()  # the last save is done: the queue is free, as it would be
        skipped = snap._queue.full()
        held: HeldLike | None = None
        if gate is not None and gate.held(id(snap)):
            # A save held in flight keeps the Snapshotter busy: it skips this one.
            skipped, out = True, None
            self.recorder.emit("save_skipped", **self._ids(), step=int(step), source="snapshot")
        else:

            def make() -> tuple[Any, Callable[[], Any]]:
                copies = copy_arrays(state)

                def commit() -> None:
                    original(snap, step, copies)
                    gate.defer_join(snap) if gate is not None else None

                return copies, commit

            if self._holder is not None:
                held = self._holder.hold(int(step), "Snapshotter.save", make, id(snap))
            out = None
            if held is None:
                out = original(snap, step, state)
                if gate is not None:
                    gate.defer_join(snap)
        self.recorder.emit(
            "snapshot_save",
            **self._ids(),
            step=int(step),
            **digests,
            position=find_position(state),
            batches_in_attempt=self._attempt_batches,
            skipped=skipped,
            shapes=shapes(state),
            nodes=nodes,
            **({"held": True} if held is not None else {}),
        )
        return out

    def _saves_done(self) -> None:
        """The saves due and those left in flight (``defer_join``) are done: before ``latest``
        is read for a restore or an attempt's start."""
        if self._save_gate is not None:
            with self._toolkit_reads():
                self._save_gate.join_unjoined()
                self._save_gate.release_due()

    def _join(self, original: Callable[..., Any], snap: Any, *a: Any, **k: Any) -> Any:
        """The loop waits for its snapshot: a held one completes first, on the episode clock."""
        if self._save_gate is not None:
            with self._toolkit_reads():
                self._save_gate.wait(id(snap))
        return original(snap, *a, **k)

    def _load(self, original: Callable[..., Any], snap: Any, abstract: Any, **kwargs: Any) -> Any:
        self._saves_done()
        latest = snap.latest
        step = None if latest is None else int(latest.step)
        self.recorder.emit("restore_begin", **self._ids(), source="snapshot", step=step)
        restored = original(snap, abstract, **kwargs)
        self._restored("snapshot", step, restored)
        return restored

    def _checkpoint_saved(
        self, step: int | None, path: str | None, tree: Any, held: bool = False, **extra: Any
    ) -> None:
        if extra.pop("skipped", False):  # the manager's own interval: it wrote nothing
            self.recorder.emit("save_skipped", **self._ids(), step=step, source="checkpoint")
            return
        self._last_saved = tree
        self.recorder.emit(
            "checkpoint_save",
            **self._ids(),
            step=step,
            path=path,
            **self._digest(tree),
            shapes=shapes(tree),
            nodes=self.lineage.nodes_of(tree) if self.lineage is not None else None,
            position=find_position(tree),
            batches_in_attempt=self._attempt_batches,
            **({"held": True} if held else {}),
            **extra,
        )

    def _checkpoint_restoring(self) -> None:
        self.recorder.emit("restore_begin", **self._ids(), source="checkpoint", step=None)

    def _restored_from(self, step: int | None, tree: Any, **extra: Any) -> None:
        self._restored("checkpoint", step, tree, **extra)

    def _restored(self, source: str, step: int | None, restored: Any, **extra: Any) -> None:
        self.recorder.emit(
            "restore_end",
            **self._ids(),
            source=source,
            step=step,
            **self._digest(restored),
            shapes=shapes(restored),
            nodes=(
                self.lineage.nodes_of(restored, fresh=True) if self.lineage is not None else None
            ),
            position=find_position(restored),
            batches_in_attempt=self._attempt_batches,
            **extra,
        )

    def _digest(self, tree: Any) -> dict[str, dict[str, str]]:
        """An event's ``digest`` field, the digest of each leaf of ``tree``: the toolkit's own
        read, not the loop's, so not lineage or an error; no field when no judge of this
        episode reads digests."""
        if not self.digests:
            return {}
        with self._toolkit_reads():
            return {"digest": digest(tree, partial=True)}

    @contextlib.contextmanager
    def _toolkit_reads(self) -> Iterator[None]:
        """The toolkit's own work on the loop's arrays (digests, a held save's copy and its
        commit): not the loop's, so not in its lineage."""
        self._reading += 1
        if self.lineage is not None:
            self.lineage.paused += 1
        try:
            yield
        finally:
            self._reading -= 1
            if self.lineage is not None:
                self.lineage.paused -= 1
