"""The chaos scenarios that apply to any elastic loop, run against yours unchanged.

``pytest -m chaos --chaos-loop=pkg.module:main`` runs them on ``main`` (without the option,
on the sample loop). Every lost slice comes back after a few health polls, so a loop in
pause-and-resume mode (which waits for every slice) and one in replica-resize mode (which
goes on without it, and may take it back) both have a way to recover. Triggers count what
the observer sees: ``batch=N`` the Nth batch drawn from the loop's grain iterator,
``save=N`` its Nth save (any orbax path), ``restore=N`` its Nth restore.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

if TYPE_CHECKING:
    from pathways_chaos import Chaos, Outcome

pytestmark = pytest.mark.chaos
F = TypeVar("F", bound=Callable[..., Any])

BACK = "repair_after_polls=3"
SLICE_DOWN = ("data_loss", "deadline_exceeded", "not_found", "internal")

#: Every scenario below, by name: the tests read their schedule here, and the first of them
#: starts them all side by side in child processes (``chaos.prefetch_loop``), one per core.
SCENARIOS = {
    **{kind: f"{kind}@batch=10:slice=1:{BACK}" for kind in SLICE_DOWN},
    "rejoin": "data_loss@batch=6:slice=2,repair@time=15:slice=2",
    "during-save": f"data_loss@save=3:slice=2:{BACK}",
    # The second save held in flight 30 s, then a retried slice-down error (no slice lost, so
    # the save stays good): a restore must wait for it (join before load), not take the first.
    "save-in-flight": "slow_save@save=1:seconds=30,raise_error@save=3:code=DATA_LOSS",
    "during-restore": f"data_loss@batch=10:slice=2:{BACK},data_loss@restore=1:slice=1:{BACK}",
    "flapping": "flapping@batch=3:slice=1:times=3:up_accesses=4",
    "all-but-one": ",".join(f"data_loss@batch=10:slice={s}:{BACK}" for s in (1, 2, 3)),
    "preemption": "preemption@batch=10",
}


def uses(*names: str) -> Callable[[F], F]:
    """Names the scenarios a test plays (its ``kind`` parameter picks one of several)."""

    def mark(test: F) -> F:
        test.scenarios = names  # type: ignore[attr-defined]
        return test

    return mark


@pytest.fixture(autouse=True)
def _scenarios_side_by_side(request: pytest.FixtureRequest, chaos: Chaos, chaos_loop: str) -> None:
    """The scenarios of the tests this session selected here, started side by side."""
    chosen: list[str] = []
    for item in request.session.items:
        if getattr(item, "module", None) is not request.module:
            continue
        names = getattr(getattr(item, "function", None), "scenarios", ())
        kind: str | None = getattr(getattr(item, "callspec", None), "params", {}).get("kind")
        if kind is None:
            chosen += names
        elif kind in names:
            chosen.append(kind)
    if len(chosen) > 1:  # one alone gains nothing from running ahead
        chaos.prefetch_loop(chaos_loop, [SCENARIOS[name] for name in chosen])


def _survived(out: Outcome) -> None:
    # What the loop did comes first (a crash, an exit, a deadline), then what it never met.
    out.verdict.raise_if_failed()
    assert out.of_kind("fault"), "no fault fired: the loop drew fewer batches than the schedule"
    assert _slice_down_met(out), "the loop never met the fault"


def _slice_down_met(out: Outcome) -> list[dict[str, Any]]:
    """The slice-down errors the loop met: those elastic_retry saw, or those the loop's own
    code caught (a retry of its own), not those a library handled inside itself."""
    caught = {e["number"] for e in out.of_kind("slice_error_caught")}
    own = [e for e in out.of_kind("slice_error") if e.get("number") in caught]
    return [e for e in out.of_kind("error") if e["slice_down"]] + own


@uses(*SLICE_DOWN)
@pytest.mark.parametrize("kind", SLICE_DOWN)
def test_every_slice_down_code(chaos: Chaos, chaos_loop: str, kind: str) -> None:
    out = chaos.run(SCENARIOS[kind], loop=chaos_loop)

    _survived(out)
    (error, *_) = _slice_down_met(out)
    assert error["message"].startswith(kind.upper())


@uses("rejoin")
def test_repaired_slice_rejoins(chaos: Chaos, chaos_loop: str) -> None:
    # Lost at batch 6, repaired at 15 s on the episode clock (one batch a second), while the
    # loop trains on without it (resize) or waits for it (pause and resume).
    out = chaos.run(SCENARIOS["rejoin"], loop=chaos_loop)

    _survived(out)
    # A loop that takes the slice back must train on it (the verdict's scale-up judge); one
    # that trains on without it (resize, no scale-up) loses capacity, not data, and is told so.
    said = out.verdict.not_judged.get("scale-up", "")
    last_mesh = out.of_kind("mesh")[-1]
    assert 2 in last_mesh["slices"] or "never took the repaired slice 2 back" in said, said


@uses("during-save")
def test_slice_lost_during_a_save(chaos: Chaos, chaos_loop: str) -> None:
    out = chaos.run(SCENARIOS["during-save"], loop=chaos_loop)

    _survived(out)


@uses("save-in-flight")
def test_error_while_a_save_is_in_flight(chaos: Chaos, chaos_loop: str) -> None:
    if not hasattr(chaos.cluster, "save_gate"):
        pytest.skip("a save held in flight (slow_save) needs the in-process fake cluster")
    out = chaos.run(SCENARIOS["save-in-flight"], loop=chaos_loop)

    _survived(out)


@uses("during-restore")
def test_slice_lost_during_a_restore(chaos: Chaos, chaos_loop: str) -> None:
    out = chaos.run(SCENARIOS["during-restore"], loop=chaos_loop)

    _survived(out)
    # The restore the second loss broke, and one more (elastic_retry's next attempt, or the
    # loop's own retry: neither is assumed).
    assert len(out.of_kind("restore_begin")) >= 2


@uses("flapping")
def test_flapping_slice(chaos: Chaos, chaos_loop: str) -> None:
    out = chaos.run(SCENARIOS["flapping"], loop=chaos_loop)

    _survived(out)


@uses("all-but-one")
def test_all_replicas_but_one(chaos: Chaos, chaos_loop: str) -> None:
    out = chaos.run(SCENARIOS["all-but-one"], loop=chaos_loop)

    _survived(out)


@uses("preemption")
def test_preemption_suspends_and_resumes(chaos: Chaos, chaos_loop: str) -> None:
    out = chaos.run(SCENARIOS["preemption"], loop=chaos_loop)

    out.verdict.raise_if_failed()
    faults = out.of_kind("fault")
    assert faults, "no fault fired: the loop drew fewer than 10 batches"
    if "raised" in faults[0]:
        pytest.skip(f"not applicable to this loop: preemption {faults[0]['raised']}")
    assert [e["status"] for e in out.of_kind("run_end")] == ["suspended", "completed"]
