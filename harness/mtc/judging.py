"""The MTC properties, read from an episode's log only (never from the service's code).

The expected restore is worked out here from the tier inventory the service logged when it
planned the restore (what every ramdisk, peer store and the backup held after the fault), by
rules written from the reference document, independently of ``service.py``:

- a pinned ``restore.version`` wins, restored from the backup;
- otherwise the newest step every host can get completely from some tier, each host from its
  fastest tier holding it (ramdisk, then peer, then backup).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from pathways_chaos.harness.engine.recorder import Event

TIER_ORDER = ("ramdisk", "peer", "backup")


@dataclasses.dataclass(frozen=True)
class TierRestore:
    """One restart: what it restored, from which tier, and what it cost."""

    attempt: int
    fault: str | None
    failed_at_step: int | None  # the last step the failed incarnation ran
    restored_step: int | None  # None: started from scratch
    tier: str | None  # the slowest tier any host restored from
    steps_lost: int  # steps run again
    restore_s: float | None  # the restore's own wall time
    recovery_s: float | None  # failure -> training ready again, wall time


def expected_restore(
    inventory: dict[str, Any], hosts: Sequence[int]
) -> tuple[int | None, dict[int, str]]:
    """(step, tier per host) the reference document's rules give for this inventory."""
    pinned = inventory.get("pinned")
    if pinned is not None:
        return int(pinned), {h: "backup" for h in hosts}
    held = {
        tier: {int(h): set(steps) for h, steps in inventory[tier].items()} for tier in TIER_ORDER
    }
    steps = {s for tier in held.values() for v in tier.values() for s in v}
    for step in sorted(steps, reverse=True):
        tiers = {}
        for h in hosts:
            tier = next((t for t in TIER_ORDER if step in held[t].get(h, set())), None)
            if tier is None:
                break
            tiers[h] = tier
        else:
            return step, tiers
    return None, {}


def tier_restores(events: Sequence[Event]) -> list[TierRestore]:
    """Each restart of an MTC episode: which tier it came from and its cost in steps and seconds."""
    out = []
    last_step: dict[int, int] = {}
    last_fault: str | None = None
    failed_wall: float | None = None
    plan: Event | None = None
    restore: Event | None = None
    for e in events:
        kind = e["kind"]
        if kind == "step":
            last_step[e["attempt"]] = e["step"]
        elif kind == "fault":
            last_fault = e["text"]
        elif kind == "error":
            failed_wall = e["wall"] if failed_wall is None else failed_wall
        elif kind == "mtc_restore_plan":
            plan = e
        elif kind == "restore_end":
            restore = e
        elif kind == "attempt_ready" and e.get("reason") == "attempt" and e["attempt"] > 1:
            previous = max((a for a in last_step if a < e["attempt"]), default=None)
            failed_at = last_step.get(previous) if previous is not None else None
            restored = restore["step"] if restore and restore["attempt"] == e["attempt"] else None
            lost = (
                0 if failed_at is None else failed_at - (restored if restored is not None else -1)
            )
            out.append(
                TierRestore(
                    attempt=e["attempt"],
                    fault=last_fault,
                    failed_at_step=failed_at,
                    restored_step=restored,
                    tier=plan.get("tier") if plan else None,
                    steps_lost=lost,
                    restore_s=restore.get("seconds") if restored is not None and restore else None,
                    recovery_s=None if failed_wall is None else round(e["wall"] - failed_wall, 6),
                )
            )
            last_fault, failed_wall = None, None
    return out


# -- the properties ------------------------------------------------------------------------------
def check_newest_restored(events: Sequence[Event]) -> list[str]:
    """Restore returns the newest step any tier holds completely (or the pinned one)."""
    problems = []
    hosts = _hosts(events)
    for plan, restore in _plans_and_restores(events):
        want, _ = expected_restore(plan["inventory"], hosts)
        got = None if restore is None else restore["step"]
        if got != want:
            problems.append(
                f"attempt {_attempt(restore, plan)} restored step {got}, but the tiers held step "
                f"{want} completely for every host ({_held(plan['inventory'])})"
            )
    return problems


def check_tiers(events: Sequence[Event]) -> list[str]:
    """Each host's copy came from the fastest tier holding the restored step."""
    problems = []
    hosts = _hosts(events)
    for plan, _ in _plans_and_restores(events):
        step, tiers = expected_restore(plan["inventory"], hosts)
        if step is None or plan["step"] != step:
            continue  # reported by check_newest_restored
        got = {int(h): t for h, t in plan["sources"].items()}
        if got != tiers:
            problems.append(f"step {step} was staged from {got}, the fastest tiers are {tiers}")
    return problems


def check_never_partial(events: Sequence[Event]) -> list[str]:
    """Only a step whose save completed is ever staged or restored."""
    problems = []
    saved: set[int] = set()
    for e in events:
        if e["kind"] == "checkpoint_save":
            saved.add(e["step"])
        elif e["kind"] == "mtc_restore_plan" and e["step"] is not None and e["step"] not in saved:
            problems.append(f"the service staged step {e['step']}, which no save completed")
        elif e["kind"] == "restore_end" and e["step"] not in saved:
            problems.append(f"attempt {e['attempt']} restored step {e['step']}, never saved whole")
    return problems


def check_bitwise(events: Sequence[Event]) -> list[str]:
    """Every host's restored model is bitwise the state saved at that step."""
    problems = []
    for e, saved in _restores_of_saves(events):
        for host, got in enumerate(e.get("host_digests", [e["digest"]])):
            if got != saved["digest"]:
                problems.append(
                    f"attempt {e['attempt']}: host {host}'s restore of step {e['step']} is "
                    "not bitwise the saved state"
                )
    return problems


def _restores_of_saves(events: Sequence[Event]) -> list[tuple[Event, Event]]:
    """Each restore of a step a save completed, with the newest such save before it."""
    pairs: list[tuple[Event, Event]] = []
    saves: dict[int, Event] = {}
    for e in events:
        if e["kind"] == "checkpoint_save":
            saves[e["step"]] = e
        elif e["kind"] == "restore_end" and e["step"] in saves:
            pairs.append((e, saves[e["step"]]))
    return pairs


def check_pinned_wins(events: Sequence[Event]) -> list[str]:
    """With ``restore.version`` present, that backup step is what the job restores."""
    problems = []
    for plan, restore in _plans_and_restores(events):
        pinned = plan["inventory"].get("pinned")
        if pinned is None:
            continue
        got = None if restore is None else restore["step"]
        if got != pinned or plan.get("tier") != "backup":
            problems.append(
                f"restore.version pinned step {pinned}, the job restored {got} "
                f"from {plan.get('tier')}"
            )
    return problems


def check_lost_work(events: Sequence[Event]) -> list[str]:
    """Steps run again after each restart equal the gap to the step the tiers could give."""
    problems = []
    hosts = _hosts(events)
    plan_by_attempt = _plan_by_attempt(events)
    for r in tier_restores(events):
        plan = plan_by_attempt.get(r.attempt)
        if plan is None or r.failed_at_step is None:
            continue
        want_step, _ = expected_restore(plan["inventory"], hosts)
        want = r.failed_at_step - (want_step if want_step is not None else -1)
        if r.steps_lost != want:
            problems.append(
                f"attempt {r.attempt} re-ran {r.steps_lost} steps after failing at step "
                f"{r.failed_at_step}; the tiers held step {want_step}, a gap of {want}"
            )
    return problems


def check_data_position(events: Sequence[Event]) -> list[str]:
    """The data position restored on every host is the one saved with the restored model."""
    problems = []
    for e, saved in _restores_of_saves(events):
        want = saved["data_index"]
        got = e.get("host_data_index", [e.get("data_index")])
        if any(g != want for g in got) or e.get("data_index") != want:
            problems.append(
                f"attempt {e['attempt']} restored the model of step {e['step']} with data "
                f"position {e.get('data_index')} (hosts {got}); it was saved with {want}"
            )
    firsts: dict[int, Event] = {}
    for e in events:
        if e["kind"] == "step" and e["attempt"] not in firsts:
            firsts[e["attempt"]] = e
    base = {e["step"]: e["ids"] for e in events if e["kind"] == "step" and e["attempt"] == 1}
    for attempt, first in firsts.items():
        if attempt > 1 and first["step"] in base and first["ids"] != base[first["step"]]:
            problems.append(
                f"attempt {attempt} resumed at step {first['step']} with sample ids "
                f"{first['ids'][:4]}..., not the ids that step read first "
                f"({base[first['step']][:4]}...)"
            )
    return problems


PROPERTIES = {
    "newest_restored": check_newest_restored,
    "fastest_tier": check_tiers,
    "never_partial": check_never_partial,
    "bitwise": check_bitwise,
    "pinned_wins": check_pinned_wins,
    "lost_work": check_lost_work,
    "data_position": check_data_position,
}


def check_all(events: Sequence[Event]) -> list[str]:
    return [p for check in PROPERTIES.values() for p in check(events)]


# -- helpers -------------------------------------------------------------------------------------
def _hosts(events: Sequence[Event]) -> list[int]:
    start = next(e for e in events if e["kind"] == "run_start")
    return sorted(int(s) for s in start["slices"])


def _plan_by_attempt(events: Sequence[Event]) -> dict[int, Event]:
    out: dict[int, Event] = {}
    attempt = 0
    for e in events:
        if e["kind"] == "attempt_start":
            attempt = e["attempt"]
        elif e["kind"] == "mtc_restore_plan":
            out[attempt] = e
    return out


def _plans_and_restores(events: Sequence[Event]) -> list[tuple[Event, Event | None]]:
    out: list[tuple[Event, Event | None]] = []
    attempt = 0
    pending: Event | None = None
    for e in events:
        if e["kind"] == "attempt_start":
            if pending is not None:
                out.append((pending, None))
            attempt, pending = e["attempt"], None
        elif e["kind"] == "mtc_restore_plan":
            pending = e
        elif e["kind"] == "restore_end" and e["attempt"] == attempt and pending is not None:
            out.append((pending, e))
            pending = None
        elif e["kind"] == "attempt_ready" and e["attempt"] == attempt and pending is not None:
            out.append((pending, None))
            pending = None
    return out


def _attempt(restore: Event | None, plan: Event) -> Any:
    return restore["attempt"] if restore is not None else f"after seq {plan['seq']}"


def _held(inventory: dict[str, Any]) -> str:
    return "; ".join(f"{t}: {inventory[t]}" for t in TIER_ORDER)
