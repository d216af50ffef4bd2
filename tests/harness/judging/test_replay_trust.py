"""What a log may make this process import for a replay: only the toolkit's own trainers, by
dotted name (a reviewer's finding: ``pathways_chaos./../../x.py:T`` passed a prefix test and
``load_name`` imported the file in the judging process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pathways_chaos.harness.engine.recorder import not_recorded
from pathways_chaos.harness.judging.replay import is_toolkit_trainer, replay_trainer


@pytest.mark.parametrize(
    "spec",
    [
        "pathways_chaos./../../../../../../tmp/evil.py:T",
        "pathways_chaos.py:T",
        "pathways_chaosx.evil:T",
        "os:system",
        "pathways_chaos.harness.reference.trainer",
    ],
)
def test_a_name_that_is_not_a_toolkit_trainer_is_never_imported(spec: str, tmp_path: Path):
    assert not is_toolkit_trainer(spec)
    cls, why = replay_trainer({"trainer": spec})
    assert cls is None and "not one of the toolkit's" in why


def test_the_toolkit_s_own_trainers_are_replayed_in_process():
    spec = "pathways_chaos.harness.reference.variants:WeightDecayTrainer"
    assert is_toolkit_trainer(spec)
    cls, why = replay_trainer({"trainer": spec})
    assert cls is not None and cls.__name__ == "WeightDecayTrainer", why


def test_the_file_trick_imports_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    marker = tmp_path / "imported"
    (tmp_path / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('x')\nclass T: pass\n")
    monkeypatch.chdir(tmp_path)
    depth = "/..".join([""] * (len(tmp_path.parts) + 2))
    replay_trainer({"trainer": f"pathways_chaos.{depth}{tmp_path}/evil.py:T"})
    assert not marker.exists()


@pytest.mark.parametrize("t", ["soon", [1], None, float("nan"), True])
def test_an_event_whose_time_is_not_a_number_is_not_the_recorders(t: object):
    """A loop appending ``"t": "soon"`` crashed the parent's account of the child's end."""
    assert "not a number" in str(not_recorded({"seq": 0, "kind": "x", "t": t}, 0))
