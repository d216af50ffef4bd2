"""Each MTC property catches a broken service (or trainer), and passes the honest one."""

from __future__ import annotations

import pytest

from pathways_chaos.harness.mtc import judging
from pathways_chaos.harness.mtc.mutants import MUTANTS


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_the_property_catches_the_mutant(chaos_mtc, name):
    mutant = MUTANTS[name]
    check = judging.PROPERTIES[mutant.caught_by]

    broken = chaos_mtc.run(mutant.schedule, service=mutant.service, trainer=mutant.trainer)
    honest = chaos_mtc.run(mutant.schedule)

    assert check(honest.events) == [], "the property fails the honest service too"
    honest.raise_if_failed()
    problems = check(broken.events)
    assert problems, f"{mutant.caught_by} did not catch {name}"


def test_every_property_has_a_mutant():
    assert {m.caught_by for m in MUTANTS.values()} == set(judging.PROPERTIES)
