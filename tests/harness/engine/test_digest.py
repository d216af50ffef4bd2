"""The state digest (``harness/engine/digest.py``): computed where a large leaf lives, only its
8 bytes brought to the host, and the same on the device and the host, sharded or not; any one
value that differs changes it; a typed PRNG key digests as its ``key_data``."""

from __future__ import annotations

import numpy as np
import pytest

from pathways_chaos.harness.engine import digest as digest_mod
from pathways_chaos.harness.engine.digest import digest, host_lanes, leaf_digest


@pytest.fixture
def on_device(monkeypatch):
    """Every device leaf checked by the jitted program, however small."""
    monkeypatch.setattr(digest_mod, "DEVICE_MIN_BYTES", 0)


def _mesh_sharded(x):
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    devices = np.asarray(jax.devices()[:2])
    mesh = jax.sharding.Mesh(devices, ("model",))
    return jax.device_put(x, NamedSharding(mesh, P(None, "model") if x.ndim > 1 else P("model")))


def _replicated_over_two(x):
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:4]).reshape(2, 2), ("replica", "model"))
    return jax.device_put(x, NamedSharding(mesh, P(None, "model") if x.ndim > 1 else P("model")))


DTYPES = [
    "complex64",
    "float32",
    "bfloat16",
    "float16",
    "int8",
    "uint8",
    "int32",
    "bool",
    "int4",
    "float8_e4m3fn",
]


@pytest.mark.parametrize("dtype", DTYPES)
def test_device_and_host_agree_for_every_dtype(on_device, dtype):
    import jax
    import jax.numpy as jnp

    values = np.random.default_rng(0).normal(size=(6, 8)) * 3
    x = jnp.asarray(values).astype(getattr(jnp, dtype))
    on_host = np.asarray(x)
    lanes = digest_mod._start_on_device(x)
    assert lanes and all(isinstance(part, jax.Array) for part in lanes)  # the device path ran
    assert leaf_digest(x) == leaf_digest(on_host)
    assert leaf_digest(_mesh_sharded(x)) == leaf_digest(on_host)  # however it is sharded
    replicated = _replicated_over_two(x)  # 2 model shards, each held by 2 devices
    assert len(digest_mod._start_on_device(replicated)) == 2  # each distinct shard read once
    assert leaf_digest(replicated) == leaf_digest(on_host)


def test_one_changed_value_changes_the_digest_on_device_and_host(on_device):
    import jax.numpy as jnp

    base = np.arange(4096, dtype=np.float32).reshape(64, 64)
    want = leaf_digest(jnp.asarray(base))
    seen = {want}
    for where in [(0, 0), (63, 63), (17, 5)]:
        for value in (
            np.float32(-0.0) if base[where] == 0 else np.float32(0.0),
            np.nextafter(base[where], np.float32(1e9)),
        ):
            changed = base.copy()
            changed[where] = value
            got = {
                leaf_digest(jnp.asarray(changed)),
                leaf_digest(_mesh_sharded(jnp.asarray(changed))),
                leaf_digest(changed),
            }
            assert len(got) == 1 and want not in got, (where, value)
            seen |= got
    swapped = base.copy()
    swapped[0, 0], swapped[0, 1] = base[0, 1], base[0, 0]  # same values, other places
    assert leaf_digest(jnp.asarray(swapped)) != want
    assert leaf_digest(jnp.asarray(base.reshape(32, 128))) != want  # same bits, other shape
    assert leaf_digest(jnp.asarray(base.view(np.int32))) != want  # same bits, other dtype


def test_a_broken_checksum_that_ignores_the_index_is_caught(on_device, monkeypatch):
    """The check above, against a variant whose terms do not depend on the place: it must see
    the swap (proof that the check can fail)."""
    import jax.numpy as jnp

    base = np.arange(16, dtype=np.float32)
    swapped = base.copy()
    swapped[0], swapped[1] = base[1], base[0]
    monkeypatch.setattr(
        digest_mod,
        "_lane_terms",
        lambda w, i, xp: (digest_mod._mix(w ^ xp.uint32(digest_mod._SEED), xp),) * 2,
    )
    digest_mod._shard_checksum.cache_clear()
    try:
        assert leaf_digest(jnp.asarray(swapped)) == leaf_digest(jnp.asarray(base))
    finally:
        digest_mod._shard_checksum.cache_clear()


def test_a_typed_key_digests_as_its_key_data(on_device):
    import jax

    key = jax.random.split(jax.random.key(7), 4)
    assert leaf_digest(key) == leaf_digest(jax.random.key_data(key))
    assert leaf_digest(key) == leaf_digest(np.asarray(jax.random.key_data(key)))
    assert leaf_digest(key) != leaf_digest(jax.random.split(jax.random.key(8), 4))


def test_the_tree_digest_skips_a_deleted_leaf_only_when_partial(on_device):
    import jax.numpy as jnp

    tree = {"a": jnp.ones((8, 8)), "b": jnp.zeros(3), "n": np.arange(3), "s": 4}
    tree["b"].delete()
    out = digest(tree, partial=True)
    assert set(out) == {"['a']", "['n']"}
    with pytest.raises(RuntimeError):
        digest(tree)


def test_host_lanes_cover_64_bit_and_text_leaves():
    a = np.arange(10, dtype=np.int64)
    b = a.copy()
    b[3] += 1 << 40  # differs only in the high word
    assert host_lanes(a) != host_lanes(b)
    assert leaf_digest(np.array(["ab", "cd"])) != leaf_digest(np.array(["ab", "ce"]))


def test_the_observers_digest_compiles_are_not_the_loops(on_device):
    """A large leaf's checksum compiles a program: not a compile of the loop's (the acceptance
    check would call it a recompile in steady state). The same digest taken outside the
    observer's own reads is seen (the check can fail)."""
    import jax
    import jax.monitoring
    import jax.numpy as jnp

    from pathways_chaos.harness.blackbox.observer import LoopObserver
    from pathways_chaos.harness.engine.recorder import Recorder

    recorder = Recorder(None)
    observer = LoopObserver(recorder, cluster=None, lineage=False)
    ours, theirs = jnp.ones((3, 77), jnp.float32), jnp.ones((3, 79), jnp.float32)  # new shapes
    jax.block_until_ready((ours, theirs))
    jax.monitoring.register_event_duration_secs_listener(observer._compiled)
    try:
        observer._digest({"w": ours})
        assert not [e for e in recorder.events if e["kind"] == "compile"]
        digest({"w": theirs})
        assert [e for e in recorder.events if e["kind"] == "compile"]
    finally:
        jax.monitoring.unregister_event_duration_listener(observer._compiled)
