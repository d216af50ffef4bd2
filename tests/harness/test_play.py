"""One outcome type for the three ways to play an episode: an MTC job's property findings count."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pathways_chaos.harness.judging.oracle import OracleViolation, Verdict
from pathways_chaos.harness.play import Outcome


def _verdict(violations: list[str]) -> Verdict:
    return Verdict(violations, True, [], 0, [], None)


def test_an_mtc_property_finding_fails_an_outcome_the_oracle_passed() -> None:
    result = SimpleNamespace(events=[{"kind": "run_end"}], error=None)
    clean = Outcome(result, _verdict([]))  # type: ignore[arg-type]
    assert clean.ok and clean.error is None
    clean.raise_if_failed()
    broken = Outcome(result, _verdict([]), ["restore took a step no tier held"])  # type: ignore[arg-type]
    assert not broken.ok and repr(broken) == "Outcome(1 events, 1 violations)"
    with pytest.raises(AssertionError, match=r"MTC properties violated:\n *restore took"):
        broken.raise_if_failed()
    with pytest.raises(OracleViolation, match="lost a sample"):
        Outcome(result, _verdict(["lost a sample"])).raise_if_failed()  # type: ignore[arg-type]
