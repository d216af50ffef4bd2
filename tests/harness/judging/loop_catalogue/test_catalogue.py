"""The catalogue's own bookkeeping: every loop file is listed, and its metadata is usable.

These tests never run a loop or the judge (the survey script does that); they catch a loop
added without its ``CAUSE``/``SCENARIO`` or a schedule the toolkit cannot parse.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent


def _catalogue() -> Any:
    name = "loop_catalogue_catalogue"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "catalogue.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


CAT = _catalogue()


def test_every_loop_file_is_listed_once() -> None:
    on_disk = sorted(
        p.relative_to(HERE).as_posix()
        for kind in ("correct", "broken", "two_faults")
        for p in (HERE / kind).glob("*.py")
    )
    listed = [loop.spec.split("loop_catalogue/", 1)[1].rsplit(":", 1)[0] for loop in CAT.LOOPS]
    assert sorted(listed) == on_disk
    assert len(set(listed)) == len(listed)


def test_the_brief_minimums_are_met() -> None:
    assert len(CAT.by_kind("correct")) >= 10
    assert len(CAT.by_kind("broken")) >= 15
    assert len(CAT.by_kind("two_faults")) >= 3


@pytest.mark.parametrize("loop", CAT.LOOPS, ids=lambda loop: loop.name)
def test_metadata_matches_the_kind(loop: Any) -> None:
    from pathways_chaos.faults.model import parse_schedule

    assert loop.path.is_file()
    assert loop.bug.strip(".") and loop.batch in ("fixed", "scaled")
    if loop.kind == "correct":
        assert loop.cause is None and loop.scenario is None and not loop.single_faults_pass
        return
    assert loop.cause in CAT.CAUSES, f"{loop.name}: CAUSE {loop.cause!r} is not in the vocabulary"
    assert loop.headline in CAT.CAUSES, f"{loop.name}: HEADLINE {loop.headline!r} is unknown"
    parse_schedule(loop.scenario)
    if loop.kind == "two_faults":
        assert loop.single_faults_pass, f"{loop.name}: list SINGLE_FAULTS_PASS"
        assert "," in loop.scenario, f"{loop.name}: a two-fault SCENARIO names two faults"
        for schedule in loop.single_faults_pass:
            parse_schedule(schedule)
            assert schedule != loop.scenario
    else:
        assert not loop.single_faults_pass


def test_correct_schedules_parse() -> None:
    from pathways_chaos.faults.model import parse_schedule

    assert len(CAT.CORRECT_SCHEDULES) == 8
    for schedule in CAT.CORRECT_SCHEDULES:
        parse_schedule(schedule)
