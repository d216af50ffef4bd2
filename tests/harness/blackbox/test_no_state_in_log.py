"""The event log of a watched episode holds no state: the final state's values go to ``.npy``
files beside it (the log says where), saves and restores carry digests (where a judge reads
them), never values (issue 33: a 10M-parameter state once made 200 MB of JSON per episode)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from pathways_chaos.harness.blackbox.values import describe_state
from pathways_chaos.harness.judging.final_values import leaf_array

LOOP = "pathways_chaos.harness.reference.user_loop:main"


def values_in(text: str, array: np.ndarray, sample: int = 12) -> int:
    """How many of ``array``'s values (spread over it) appear in ``text`` as JSON writes them."""
    flat = np.asarray(array, dtype=np.float64).ravel()
    picks = flat[np.linspace(0, flat.size - 1, min(sample, flat.size)).astype(int)]
    # a value JSON would write from a float32 leaf (``tolist`` gives Python floats)
    return sum(json.dumps(float(np.float32(v))) in text for v in picks if v not in (0.0, 1.0))


def _final(log: Path) -> dict:
    events = [json.loads(line) for line in log.read_text().splitlines()]
    return next(e for e in reversed(events) if e["kind"] == "run_end")["final_state"]


def test_the_log_of_a_watched_episode_holds_no_parameter_values(tmp_path):
    from pathways_chaos.harness.play import play_loop

    log = tmp_path / "episode.jsonl"
    out = play_loop(LOOP, log_path=log, checkpoint_dir=tmp_path / "ckpt", digests=True)
    assert out.result.completed
    text = log.read_text()
    final = _final(log)
    assert set(final) >= {"['params']['w1']", "['momentum']['w1']"}
    for path, leaf in final.items():
        assert "values" not in leaf and Path(leaf["file"]).is_file(), path
        array = leaf_array(leaf)
        if array.size > 4:
            assert values_in(text, array) == 0, path
    saves = [json.loads(line) for line in text.splitlines() if '"snapshot_save"' in line]
    assert saves and all(len(d) == 16 for s in saves for d in s["digest"].values())


def test_a_loop_run_in_this_process_keeps_its_state_beside_the_log_too(tmp_path):
    """``isolate=False`` and ``--cluster`` run the loop here: its values go beside the log as
    well (they once went into it, ``tolist`` and all)."""
    from pathways_chaos.harness.play import play_loop

    log = tmp_path / "here.jsonl"
    out = play_loop(LOOP, log_path=log, checkpoint_dir=tmp_path / "ckpt", isolate=False)
    assert out.result.completed
    text = log.read_text()
    for path, leaf in _final(log).items():
        assert "values" not in leaf, path
        assert Path(leaf["file"]).is_relative_to(tmp_path / "here.values"), path
        array = leaf_array(leaf)
        if array.size > 4:
            assert values_in(text, array) == 0, path


def test_the_check_finds_values_written_into_a_log(tmp_path):
    """The check above can fail: a log whose final state carries its values (the old way)."""
    import jax.numpy as jnp

    w = jnp.linspace(-1.3, 2.7, 64, dtype=jnp.float32).reshape(8, 8)
    inline = describe_state({"w": w})  # no folder: the values go into the event
    log = tmp_path / "old.jsonl"
    log.write_text(json.dumps({"kind": "run_end", "final_state": inline}) + "\n")
    assert values_in(log.read_text(), np.asarray(w)) > 0
    beside = describe_state({"w": w}, tmp_path / "values")
    log.write_text(json.dumps({"kind": "run_end", "final_state": beside}) + "\n")
    assert values_in(log.read_text(), np.asarray(w)) == 0


def test_saves_carry_digests_only_where_a_judge_reads_them(tmp_path):
    """No judge of the panel reads a save's digest, and at a real job's size each is a pass over
    the whole state at every save (0.42 s of a 100M-parameter state on this 2-core machine): a
    plain episode logs none, the acceptance table's episodes (``digests=True``) one per leaf,
    and a restore's digest equals its save's."""
    from pathways_chaos.harness.play import play_loop

    schedule = "data_loss@batch=6:slice=1"
    plain = play_loop(LOOP, schedule, checkpoint_dir=tmp_path / "plain")
    saves = plain.of_kind("snapshot_save") + plain.of_kind("restore_end")
    assert saves and not any("digest" in e for e in saves)
    kept = play_loop(LOOP, schedule, checkpoint_dir=tmp_path / "kept", digests=True)
    saves, restores = kept.of_kind("snapshot_save"), kept.of_kind("restore_end")
    assert saves and restores and all(e["digest"] for e in saves + restores)
    restored = restores[-1]
    saved = [s for s in saves if s["step"] == restored["step"]][-1]
    assert restored["digest"] == saved["digest"]
