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
        (jax.tree_util.keystr(path), leaf)
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


def _fetched_or_none(leaf: Any) -> Any:
    import jax

    try:
        return jax.device_get(leaf)
    except RuntimeError:  # on a lost slice
        return None
