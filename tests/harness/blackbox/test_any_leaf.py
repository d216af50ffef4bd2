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
