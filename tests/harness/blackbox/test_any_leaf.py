"""Any leaf JAX allows in a train state is digested, stored beside the log and compared, never
a toolkit exception: typed PRNG keys, bfloat16, int4, empty arrays, scalars."""

from __future__ import annotations

import numpy as np
import pytest

from pathways_chaos.harness.blackbox.values import describe_state
from pathways_chaos.harness.engine.digest import digest
from pathways_chaos.harness.judging.final_values import leaf_array, worst_outside_tolerance


def _state(shift: float = 0.0):
    import jax
    import jax.numpy as jnp

    return {
        "key": jax.random.key(3),
        "keys": jax.random.split(jax.random.key(4), 3),
        "raw_key": jax.random.PRNGKey(5),
        "bf16": jnp.arange(6, dtype=jnp.bfloat16) + shift,
        "int4": jnp.arange(4, dtype=jnp.int4),
        "empty": jnp.zeros((0, 3)),
        "scalar": jnp.float32(2.5),
        "step": 7,
        "host": np.ones(2, dtype=np.float16),
    }


def test_every_leaf_is_digested_and_stored(tmp_path):
    state = _state()
    digests = digest(state, partial=True)
    described = describe_state(state, tmp_path / "values")

    assert set(digests) == set(described) and len(described) == 8  # every array leaf
    for path, leaf in described.items():
        array = leaf_array(leaf)
        assert list(array.shape) == leaf["shape"], path
    assert described["['key']"]["dtype"].startswith("key<")
    assert described["['bf16']"]["dtype"] == "bfloat16"


def test_a_changed_leaf_of_a_dtype_numpy_lacks_is_found(tmp_path):
    same = describe_state(_state(), tmp_path / "a")
    other = describe_state(_state(shift=1.0), tmp_path / "b")

    a, b = leaf_array(same["['bf16']"]), leaf_array(other["['bf16']"])
    assert worst_outside_tolerance(a, b) == pytest.approx(1.0)
    assert worst_outside_tolerance(a, leaf_array(same["['bf16']"])) is None
    keys = leaf_array(same["['key']"]), leaf_array(other["['key']"])
    assert worst_outside_tolerance(*keys) is None


PRNG_LOOP = "tests/loops/real_jobs/prng_bf16_ok.py:main"


@pytest.mark.parametrize("snapshot_key_data", [False, True])
def test_a_typed_key_kept_as_key_data_and_wrapped_back_is_followed(tmp_path, snapshot_key_data):
    """The key goes to the checkpoint as ``key_data`` and comes back through
    ``wrap_key_data``: the restore is used, not re-made (a correct loop once failed here)."""
    from pathways_chaos.harness.play import play_loop

    options = {"snapshot_key_data": snapshot_key_data}
    base = play_loop(PRNG_LOOP, options=options, checkpoint_dir=tmp_path / "base")
    out = play_loop(
        PRNG_LOOP,
        "preemption@batch=10",
        baseline=base.events,
        options=options,
        checkpoint_dir=tmp_path / "pr",
    )
    assert out.verdict.ok, out.verdict.summary()
    assert {"restore-used", "final-state"} <= set(out.verdict.judged)


def test_a_fresh_key_after_the_restore_is_named_re_initialised(tmp_path):
    from pathways_chaos.harness.play import play_loop

    base = play_loop(PRNG_LOOP, checkpoint_dir=tmp_path / "base")
    out = play_loop(
        PRNG_LOOP,
        "preemption@batch=10",
        baseline=base.events,
        options={"rekey_on_restore": True},
        checkpoint_dir=tmp_path / "pr",
    )
    assert not out.verdict.ok
    assert "leaf ['state']['key'] was re-initialised" in out.verdict.violations[0]
