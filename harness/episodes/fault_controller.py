"""The one fault controller: a schedule applied through a cluster backend as the subject's
events arrive, for the reference trainer and a user's loop alike.

A fault fires when its trigger matches an event (or the clock passes its time); after that, any
event that touches data while the current mesh still holds a lost slice raises the slice-down
error, which is how Pathways reports one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, ClassVar

from pathways_chaos.faults.model import Schedule, ScheduledFault, check_schedule_fits
from pathways_chaos.harness.engine.backend import (
    ClusterBackend,
    KubeBacked,
    MtcHosts,
    RepairListeners,
    SaveGated,
)
from pathways_chaos.harness.engine.clock import FakeClock
from pathways_chaos.harness.engine.recorder import Event, Recorder

#: Trainer events that touch data on the mesh (and so meet a lost slice).
ACCESS_EVENTS = frozenset(
    {"step", "snapshot_save", "restore_begin", "restore_end", "attempt_ready", "scale_up"}
)
#: Trigger kind -> (event kind it counts, whether the value is a count or a step number).
_EVENT_TRIGGERS = {
    "restore": "restore_begin",
    "save": "snapshot_save",
    "attempt": "attempt_ready",
    "batch": "step",  # one batch drawn per step event
    "callback": "elastic_event",
}


def refuse_misfits(schedule: Schedule, cluster: ClusterBackend) -> None:
    """A slice or host outside the cluster, or a Kubernetes fault on the fake: one line before a
    step. Once per episode: by the runner before its log begins, else by the controller."""
    check_schedule_fits(
        schedule,
        cluster.topology.num_slices,
        kubernetes=isinstance(cluster, KubeBacked),
        mtc_hosts=cluster.mtc_hosts if isinstance(cluster, MtcHosts) else None,
    )


class FaultController:
    """Applies a schedule to a fake cluster as the trainer's events arrive.

    One controller for every episode: what differs between the trainer's and a user loop's
    (``LoopFaultController``) is configuration: which event each trigger counts, which event
    advances the fake clock, where ``time=`` counts from, and what the mesh's slices are told
    after an event.
    """

    #: Trigger kind -> the event kind it counts (``step=`` and ``time=`` are handled apart
    #: unless named here).
    triggers: ClassVar[dict[str, str]] = _EVENT_TRIGGERS
    #: The event after which the fake clock advances by ``step_seconds``.
    clock_event: ClassVar[str] = "step"

    def __init__(
        self,
        schedule: Schedule,
        cluster: ClusterBackend,
        recorder: Recorder,
        step_seconds: float = 1.0,
        *,
        checked: bool = False,
    ) -> None:
        if not checked:  # the runner did not refuse a misfit schedule before its log began
            refuse_misfits(schedule, cluster)
        self.cluster = cluster
        self.recorder = recorder
        self.step_seconds = step_seconds
        self.pending: list[ScheduledFault] = list(schedule)
        self.fired: list[ScheduledFault] = []
        #: Fired faults to fire again at the start of each coming attempt (``raise_error``'s
        #: ``attempts``): entry -> how many attempts more.
        self.repeats: dict[ScheduledFault, int] = {}
        self._counts: dict[str, int] = {}
        self._mesh_slices: list[int] | None = None
        self._main = threading.get_ident()
        self._firing = False
        #: Told of each error a fault raised into the subject (the loop observer watches
        #: whether the loop's own ``except`` swallows a slice-down one).
        self.on_raised: Callable[[BaseException], None] | None = None
        self.last_step = -1
        #: Where ``time=`` triggers count from (the clock's zero).
        self.time_origin = 0.0

    def handoff(self, entries: list[ScheduledFault]) -> dict[str, Any]:
        """What a preemption's next run (a new process) goes on from: the faults still to come
        and those fired (by their place in ``entries``, the schedule), the trigger counts."""
        return {
            "pending": [entries.index(e) for e in self.pending],
            "fired": [entries.index(e) for e in self.fired],
            "counts": dict(self._counts),
            "last_step": self.last_step,
            "time_origin": self.time_origin,
            "repeats": [[entries.index(e), n] for e, n in self.repeats.items()],
        }

    def go_on_from(self, entries: list[ScheduledFault], state: dict[str, Any]) -> None:
        self.pending = [entries[i] for i in state["pending"]]
        self.fired = [entries[i] for i in state["fired"]]
        self._counts = {str(k): int(v) for k, v in state["counts"].items()}
        self.last_step = int(state["last_step"])
        self.time_origin = float(state["time_origin"])
        self.repeats = {entries[int(i)]: int(n) for i, n in state.get("repeats", [])}

    def unfired(self) -> list[str]:
        """One line per scheduled fault that never fired, saying why it could not."""
        lines = []
        for entry in self.pending:
            at = entry.at
            if at.kind == "step":
                why = f"step={at.value} > last step {self.last_step}"
            elif at.kind == "time":
                why = f"time={at.value} > episode clock {self.cluster.clock.time():.1f} s"
            else:
                seen = self._counts.get(_EVENT_TRIGGERS[at.kind], 0)
                why = f"{at.kind}={at.value} but the episode had {seen}"
            lines.append(f"fault never fired: {entry.to_text()} ({why})")
        return lines

    def __enter__(self) -> FaultController:
        self.recorder.add_listener(self.on_event)
        if isinstance(self.cluster.clock, FakeClock):
            self.cluster.clock.add_listener(self.on_time)
        if isinstance(self.cluster, RepairListeners):
            self.cluster.add_repair_listener(self.on_repaired)
        return self

    def __exit__(self, *exc: object) -> None:
        if isinstance(self.cluster, RepairListeners):
            self.cluster.remove_repair_listener(self.on_repaired)
        self.recorder.remove_listener(self.on_event)
        if isinstance(self.cluster.clock, FakeClock):
            self.cluster.clock.remove_listener(self.on_time)

    def on_event(self, event: Event) -> None:
        if self._firing:
            return  # the controller's own fault events
        kind = event["kind"]
        if kind == "attempt_start":
            self._mesh_slices = None
        elif kind == "mesh":
            self._mesh_slices = list(event["slices"])
        self._counts[kind] = self._counts.get(kind, 0) + 1
        if kind == "step":
            self.last_step = max(self.last_step, int(event["step"]))
        if kind == self.triggers["attempt"]:
            for entry in list(self.repeats):  # before the pending: not again in its own attempt
                self._fire_again(entry)
        for entry in list(self.pending):
            if self._due(entry, event):
                self._fire(entry)
        if self._mesh_slices is not None:
            self._touch_mesh(kind, self._mesh_slices)
        clock = self.cluster.clock
        if kind == self.clock_event and self.step_seconds and isinstance(clock, FakeClock):
            clock.advance(self.step_seconds)

    def on_repaired(self, slice_index: int) -> None:
        """A lost slice's health polls ran out: it is back (healthy, free to rejoin) from here."""
        self.recorder.emit("slice_repaired", slice=slice_index)

    def _touch_mesh(self, kind: str, slices: list[int]) -> None:
        """After an event the trainer's mesh is used by: a lost slice in it fails the access."""
        if kind in ACCESS_EVENTS:
            self.cluster.check_access(slices)

    def on_time(self, now: float) -> None:
        if threading.get_ident() != self._main:
            return  # faults fire only in the trainer's thread
        for entry in list(self.pending):
            if entry.at.kind == "time" and now - self.time_origin >= entry.at.value:
                self._fire(entry)

    def _due(self, entry: ScheduledFault, event: Event) -> bool:
        at = entry.at
        if at.kind == "step" and "step" not in self.triggers:
            return bool(event["kind"] == "step" and event["step"] == at.value)
        if at.kind == "time":
            return self.cluster.clock.time() - self.time_origin >= at.value
        counted = self.triggers[at.kind]
        return event["kind"] == counted and self._counts[counted] == at.value

    def _inject(self, entry: ScheduledFault) -> list[str]:
        """Acts the fault out; what it touched (it may raise into the subject)."""
        return entry.fault.inject(self.cluster)

    def _fire(self, entry: ScheduledFault) -> None:
        self.pending.remove(entry)
        self.fired.append(entry)
        again = int(getattr(entry.fault, "attempts", 1)) - 1
        if again > 0:
            self.repeats[entry] = again
        self._act(entry, {})

    def _fire_again(self, entry: ScheduledFault) -> None:
        """A fault that persists across attempts, in the next one (``repeat``: which time)."""
        left = self.repeats.pop(entry) - 1
        if left > 0:
            self.repeats[entry] = left
        attempts = int(getattr(entry.fault, "attempts", 1))
        self._act(entry, {"repeat": attempts - left})

    def _act(self, entry: ScheduledFault, extra: dict[str, Any]) -> None:
        fields = {
            "fault": entry.fault.to_json(),
            "text": entry.to_text(),
            "description": entry.fault.describe(),
            **extra,
        }
        if isinstance(self.cluster, SaveGated):  # a save still copying completes first
            self.cluster.save_gate.join_unjoined()
        self._firing = True
        try:
            try:
                touched = self._inject(entry)
            except Exception as error:
                self.recorder.emit("fault", **fields, raised=str(error))
                if self.on_raised is not None:
                    self.on_raised(error)
                raise
            self.recorder.emit("fault", **fields, touched=touched)
        finally:
            self._firing = False
