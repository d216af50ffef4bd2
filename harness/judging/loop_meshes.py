"""The loop's ``meshes`` judge: no attempt uses a slice that was lost and is not back.

Two kinds of evidence: where the loop placed data (a ``mesh`` event, an attempt's live arrays
at its first batch), and a slice-down error for a lost slice that ended an attempt the
manager began without it: a computation there (a ``jax.jit`` with ``out_shardings``, which
places nothing the observer sees) still ran on a mesh or sharding made before the loss.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pathways_chaos.harness.engine.recorder import Event

_LOSS_KINDS = frozenset(
    {"data_loss", "deadline_exceeded", "not_found", "internal", "slice_loss", "flapping"}
)
#: The slice a slice-down error names ("DATA_LOSS: slice 1: ..." on the fake).
_SLICE_NAMED = re.compile(r"\bslice (\d+)\b")
_FIX = (
    "build each attempt's mesh from the manager's active slices, not jax.devices() or a mesh "
    "(or sharding) made before the loss"
)


def judge(events: Sequence[Event]) -> list[str] | str:
    """No attempt places data on a slice that was lost and that the manager had not
    (again) made active, nor meets its slice-down error having begun without it: a slice
    lost in the middle of an attempt is that attempt's fault, not its mesh's."""
    problems: list[str] = []
    down: dict[int, str] = {}
    active: set[int] | None = None
    began: dict[tuple[int, int], set[int]] = {}  # the active slices each attempt began with
    slices: dict[int, list[int]] = {}
    reported: set[tuple[int, int]] = set()
    applied = False
    # Attempts a slice-down error ended: one a library caught inside a call (a Snapshotter
    # restoring from another replica) is no evidence of the loop's mesh.
    ended = {(e.get("run", 0), e.get("attempt", 0)) for e in events if e["kind"] == "error"}
    # A restore reads a snapshot saved while the slice was up: an error there is the restore's
    # (the restore judges' evidence), not the mesh's.
    restoring: set[tuple[int, int]] = set()
    for e in events:
        kind = e["kind"]
        key = (e.get("run", 0), e.get("attempt", 0))
        said: str | None = None
        if kind == "run_start":
            slices = {int(s): ids for s, ids in e["slices"].items()}
            active = None
        elif kind == "fault" and "touched" in e:
            fault = e["fault"]
            if fault["kind"] in _LOSS_KINDS:
                down[fault["slice"]] = e["text"]
            elif fault["kind"] == "repair":
                down.pop(fault["slice"], None)
        elif kind == "slice_lost":
            down[int(e["slice"])] = f"a {e.get('how', 'later')} loss of slice {e['slice']}"
        elif kind in ("attempt_start", "active_slices"):
            active = set(e["active_slices"] if "active_slices" in e else e.get("slices", []))
            if kind == "attempt_start":
                began[key] = set(active)
            for s in active:
                down.pop(s, None)
        elif kind == "mesh":
            applied = True
            dead = sorted(s for s in set(e["slices"]) & set(down) if s not in (active or ()))
            if dead:
                devices = [d for s in dead for d in slices.get(s, [])]
                said = (
                    f"run {key[0]} attempt {key[1]} put data on a mesh holding slice "
                    f"{', '.join(map(str, dead))} (devices {devices}), lost by "
                    f"{down[dead[0]]} and not back: {_FIX}"
                )
        elif kind == "restore_begin":
            restoring.add(key)
        elif kind == "restore_end":
            restoring.discard(key)
        elif kind == "slice_error" and key in ended and key not in restoring:
            lost = _slice_named(e, down, began.get(key), active)
            if lost is not None:
                applied = True
                said = (
                    f"run {key[0]} attempt {key[1]} began without slice {lost} (lost by "
                    f"{down[lost]}), yet met that slice's error at {e.get('where') or '?'}: "
                    f"it still ran on a mesh or sharding made before the loss; {_FIX}"
                )
        elif kind == "attempt_ready":
            gone = [s for s in down if s not in (active or ())]
            dead_devices = {d for s in gone for d in slices.get(s, [])}
            on_dead = sorted(dead_devices & set(e["live"]["device_ids"]))
            if on_dead:
                said = (
                    f"run {key[0]} attempt {key[1]}: live arrays have shards on lost devices "
                    f"{on_dead} when it drew its first batch"
                )
        if said is not None and key not in reported:
            reported.add(key)
            problems.append(said)
    if not applied:
        return "the loop placed no data on a named-sharding mesh"
    if len(problems) > 1:
        return [f"{problems[0]} (and {len(problems) - 1} more attempts)"]
    return problems


def _slice_named(
    error: Event, down: dict[int, str], began: set[int] | None, active: set[int] | None
) -> int | None:
    """The lost slice a slice-down error names, when its attempt began without it and the
    manager has not made it active since; None otherwise (or when the message names none)."""
    match = _SLICE_NAMED.search(str(error.get("message", "")))
    if match is None or began is None:
        return None
    lost = int(match.group(1))
    if lost in down and lost not in began and lost not in (active or ()):
        return lost
    return None
