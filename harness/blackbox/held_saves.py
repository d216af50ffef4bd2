"""The save gate as the checkpoint watch's ``SaveHolder``: a user's save held in flight by
``slow_save`` on whichever orbax path the loop saves through, its events in the observer's
run and attempt, its copy and commit the toolkit's own work, not the loop's."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from pathways_chaos.harness.blackbox.checkpoints import HeldLike
from pathways_chaos.harness.engine.save_gate import HeldSave, SaveGate


class GateHolder:
    """The save gate as the checkpoint watch's ``SaveHolder``: each held save's events carry
    the run and attempt, and its copy and commit are the toolkit's work, not the loop's."""

    def __init__(self, observer: Any, gate: SaveGate) -> None:
        self._observer, self._gate = observer, gate

    def hold(
        self,
        step: int | None,
        path: str,
        make: Callable[[], tuple[Any, Callable[[], Any]]],
        owner: int,
    ) -> HeldSave | None:
        if not self._gate.armed():
            return None
        observer = self._observer
        with observer._toolkit_reads():
            state, commit = make()

        def committed() -> Any:
            with observer._toolkit_reads():
                return commit()

        source = "snapshot" if path.startswith("Snapshotter") else "checkpoint"
        fields = {**observer._ids(), "step": step, "source": source, "path": path}
        return self._gate.hold(observer.recorder, fields, state, committed, owner)

    def block(self, held: HeldLike) -> None:
        assert isinstance(held, HeldSave)
        try:
            self._gate.block(held)
        except BaseException as error:
            if error is held.lost:  # the loop sees it as any slice-down error it meets
                self._observer.slice_error(error)
            raise

    def lost(self, held: HeldLike) -> None:
        if held.lost is not None:
            self._observer.slice_error(held.lost)
            raise held.lost

    def wait(self, owner: int | None) -> None:
        with self._observer._toolkit_reads():
            self._gate.wait(owner)

    def release_due(self) -> None:
        with self._observer._toolkit_reads():
            self._gate.release_due()

    def joined_latest(self, original: Any) -> property:
        """Snapshotter's ``latest``, read after every save the gate left in flight is done
        (``SaveGate.defer_join``): what a loop reads there does not depend on its thread."""
        fget = original.fget
        gate = self._gate

        def latest(snap: Any) -> Any:
            gate.join_unjoined()
            return fget(snap)

        return property(functools.wraps(fget)(latest))
