"""Generated fault schedules of slice losses and rejoins (the dataset and mesh properties)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from pathways_chaos.harness.properties.settings import LOSS_KINDS, REJOIN_MARGIN


@st.composite
def slice_churn(
    draw: st.DrawFn, slices: int, steps: int, max_events: int = 4, rejoins: bool = False
) -> str:
    """Losses and repairs at non-decreasing steps, never losing the last replica.

    A repaired slice holds no snapshot replica until it has rejoined and a snapshot was taken
    on it: it counts towards "another slice is healthy" only ``REJOIN_MARGIN`` steps after its
    repair (found: data_loss of slice 1, repair of 1 and loss of 0 at step 4 lost every
    replica of the step-3 snapshot, which lived on slice 0 alone).
    """
    healthy, lost_at = set(range(slices)), dict[int, int]()
    repaired_at: dict[int, int] = {}
    entries: list[str] = []
    step = 0
    for _ in range(draw(st.integers(0, max_events))):
        step = draw(st.integers(step, max(step, steps - 2)))
        # A repair at the very step of the loss would land before the trainer touches the
        # slice: see REPAIR_SAME_STEP.
        down = {s for s, at in lost_at.items() if at < step}
        holding = {s for s in healthy if repaired_at.get(s, -REJOIN_MARGIN) + REJOIN_MARGIN <= step}
        # A lost slice is repaired more often than another is lost: rejoins are what rebuild
        # a mesh with more slices, and what a signal-mode scale-up restarts an attempt for.
        actions = (["lose"] if len(healthy) > 1 else []) + (["repair"] * 2 if down else [])
        if not actions:
            continue
        if draw(st.sampled_from(actions)) == "lose":
            s = draw(st.sampled_from(sorted(healthy)))
            kind = draw(st.sampled_from(LOSS_KINDS))
            if not holding - {s}:
                continue  # the same draws, but this loss would take the last replica: dropped
            polls = draw(st.integers(0, 3)) if rejoins else 0
            if polls:  # back by itself after that many health polls: a rejoin inside the run
                healthy.discard(s)
                entries.append(f"{kind}@step={step}:slice={s}:repair_after_polls={polls}")
                continue
            healthy.discard(s)
            lost_at[s] = step
            entries.append(f"{kind}@step={step}:slice={s}")
        else:
            s = draw(st.sampled_from(sorted(down)))
            del lost_at[s]
            healthy.add(s)
            repaired_at[s] = step
            entries.append(f"repair@step={step}:slice={s}")
    return ",".join(entries)


def recompiles(events: list[dict[str, Any]]) -> int:
    return sum(1 for e in events if e["kind"] == "mesh" and e["recompile"])
