"""The state digest: sha256 of each leaf's bytes by path, so equal digests mean bitwise-equal
state. One function for the reference trainer (its own state) and the black-box observer (a
user's tree, read mid-recovery)."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np


def digest(tree: Any, *, partial: bool = False) -> dict[str, str]:
    """Each leaf's digest by path, from one batched ``device_get`` (one wait, not one per leaf).

    ``partial`` (the observer): array leaves only, and a leaf on a lost slice is skipped; else
    every leaf counts and a leaf that cannot be fetched raises.
    """
    import jax

    flat = [
        (jax.tree_util.keystr(path), key_free(leaf))
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
        if not partial or (hasattr(leaf, "shape") and not isinstance(leaf, jax.ShapeDtypeStruct))
    ]
    leaves = [leaf for _, leaf in flat]
    try:
        hosts: list[Any] = jax.device_get(leaves)
    except RuntimeError:
        if not partial:
            raise
        hosts = [_fetched_or_none(leaf) for leaf in leaves]  # fetch what can be fetched
    out = {}
    for (path, _), host in zip(flat, hosts, strict=True):
        if host is None:
            continue
        array = np.asarray(host)
        out[path] = hashlib.sha256(
            array.dtype.str.encode() + str(array.shape).encode() + array.tobytes()
        ).hexdigest()[:16]
    return out


def key_free(leaf: Any) -> Any:
    """A typed PRNG key (``jax.random.key``) as its raw ``uint32`` data, which numpy can hold;
    any other leaf as it is."""
    import jax

    dtype = getattr(leaf, "dtype", None)
    if dtype is not None and isinstance(leaf, jax.Array):
        try:
            if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
                return jax.random.key_data(leaf)
        except TypeError:
            return leaf
    return leaf


def host_array(leaf: Any) -> np.ndarray:
    """Any leaf JAX allows in a state (typed keys, bfloat16, int4, scalars, empty arrays) as a
    host array numpy can save and compare: a dtype numpy lacks becomes float32 (exact for
    bfloat16 and the small ints), a key its data."""
    array = np.asarray(key_free(leaf))
    if type(array.dtype).__module__ != "numpy" and array.dtype.type.__module__ != "numpy":
        array = array.astype(np.float32)
    return array


def _fetched_or_none(leaf: Any) -> Any:
    import jax

    try:
        return jax.device_get(leaf)
    except RuntimeError:  # on a lost slice
        return None
