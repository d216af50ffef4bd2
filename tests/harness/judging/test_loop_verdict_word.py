"""What every front door says of a loop's verdict (``Verdict.word``, ``exit_code``): a pass
needs its central judges; a judge that raised is our bug, not the loop's failure."""

from __future__ import annotations

from pathways_chaos.harness.judging.loop_oracle import CENTRAL_JUDGES
from pathways_chaos.harness.judging.verdict import Verdict


def _verdict(**fields: object) -> Verdict:
    base: dict[str, object] = {
        "violations": [],
        "completed": True,
        "lineage": [],
        "wasted_steps": 0,
        "recoveries": [],
        "error": None,
        "judged": list(CENTRAL_JUDGES),
        "central": CENTRAL_JUDGES,
    }
    return Verdict(**{**base, **fields})  # type: ignore[arg-type]


def test_every_central_judge_judged_and_nothing_failed_survives() -> None:
    assert (_verdict().word, _verdict().exit_code) == ("SURVIVED", 0)


def test_a_central_judge_not_judged_is_not_judged_and_never_exit_0() -> None:
    v = _verdict(not_judged={"final-state": "no fault-free run of the same loop to compare with"})
    assert (v.word, v.exit_code) == ("NOT JUDGED", 5)
    assert _verdict(not_judged={"scale-up": "no slice came back"}).word == "SURVIVED"


def test_a_failure_stands_whatever_could_not_be_judged() -> None:
    v = _verdict(violations=["sample ids 0..7 were trained twice"], not_judged={"final-state": "x"})
    assert (v.word, v.exit_code, v.central_not_judged) == ("FAILED", 1, {})


def test_a_judge_that_raised_is_not_judged_and_named_never_the_loops_failure() -> None:
    v = _verdict(judge_errors={"meshes": "KeyError: 'devices'\nTraceback ..."})
    assert (v.word, v.exit_code) == ("NOT JUDGED", 5)
    assert "not judged: meshes, because the judge failed: a bug in pathways-chaos: KeyError" in (
        v.summary()
    )
