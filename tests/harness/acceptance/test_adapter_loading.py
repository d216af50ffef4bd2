"""An adapter that never finishes loading ends in one line naming its line, in minutes, not
the ten of an episode's default deadline (a blind tester's adapter, blocked at import as a
``jax.distributed.initialize()`` waiting for a coordinator would be, hung the whole run with
no output)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pathways_chaos.harness.acceptance import adapter_child
from pathways_chaos.harness.engine.deadline import Deadline, default_deadline, set_default_deadline
from pathways_chaos.harness.errors import ChaosConfigError

HANGS = "import time\nwhile True:  # a coordinator that never comes\n    time.sleep(1)\n"


def _hanging_adapter(tmp_path: Path) -> str:
    path = tmp_path / "hangs.py"
    path.write_text(HANGS)
    return f"{path}:adapter"


def test_an_adapter_blocked_at_import_is_one_line_naming_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert default_deadline().wall_s == adapter_child.DEFAULT_WALL_S  # the session set none
    monkeypatch.setattr(adapter_child, "LOADING_WALL_S", 3.0)
    spec = _hanging_adapter(tmp_path)
    started = time.monotonic()
    with pytest.raises(ChaosConfigError) as info:
        adapter_child.describe_adapter(spec, tmp_path / "work")
    message = str(info.value)
    assert time.monotonic() - started < 60
    assert "\n" not in message
    assert "deadline of 3 s" in message
    assert "hangs.py:3 in <module>" in message


def test_a_wall_deadline_the_session_set_is_the_one_loading_gets(tmp_path: Path) -> None:
    previous = set_default_deadline(Deadline(wall_s=2.0))
    try:
        with pytest.raises(ChaosConfigError, match="deadline of 2 s"):
            adapter_child.describe_adapter(_hanging_adapter(tmp_path), tmp_path / "work")
    finally:
        set_default_deadline(previous)
