"""One jitted step per (step computation, output sharding) for the whole process.

On Pathways a job pays a compile the first time it runs on a mesh; it does not pay it again for
a mesh it has seen (its jit cache holds the executable). In a test process every episode builds
a new trainer, so without this each episode re-traced and re-compiled the same step on the same
devices: a mesh seen before in the process now reuses its executables. The trainer still marks
a mesh new to its run as a recompile (what a real run pays), and ``CompileCount`` counts what the
run would have compiled on its own (one per mesh and argument shapes it called the step with),
so the acceptance suite still sees a step that recompiles in steady state.
"""

from __future__ import annotations

import functools
from typing import Any

_JITTED: dict[Any, Any] = {}


def step_key(step: Any) -> Any:
    """A hashable identity of a step computation, or None when it has none (a closure made per
    call hashes by identity and so never matches: no sharing, which is safe)."""
    if isinstance(step, functools.partial):
        try:
            key = (step.func, step.args, tuple(sorted(step.keywords.items())))
            hash(key)
        except TypeError:
            return None
        return key
    try:
        hash(step)
    except TypeError:
        return None
    return step


def jitted_step(step: Any, out_sharding: Any) -> Any:
    """``jax.jit(step, out_shardings=(out_sharding, None))``, shared with every earlier trainer
    of this process that jitted the same computation for the same sharding (same mesh)."""
    import jax

    key = step_key(step)
    if key is None:
        return jax.jit(step, out_shardings=(out_sharding, None))
    full = (key, out_sharding)
    fn = _JITTED.get(full)
    if fn is None:
        fn = _JITTED[full] = jax.jit(step, out_shardings=(out_sharding, None))
    return fn


class CompileCount:
    """Distinct (mesh, argument shapes and dtypes) a run called its step with: its compiles."""

    def __init__(self) -> None:
        self._seen: set[Any] = set()

    @property
    def count(self) -> int:
        return len(self._seen)

    def counting(self, mesh_key: Any, fn: Any) -> Any:
        """``fn``, noting each call's signature (a few microseconds a step)."""
        import jax

        seen = self._seen

        @functools.wraps(fn)
        def step(*args: Any) -> Any:
            leaves = jax.tree.leaves(args)
            seen.add(
                (
                    mesh_key,
                    tuple(
                        (getattr(a, "shape", None), str(getattr(a, "dtype", type(a))))
                        for a in leaves
                    ),
                )
            )
            return fn(*args)

        # As jax's own: what this run compiled on this mesh (a subclass may sum these).
        step._cache_size = lambda: sum(1 for key, _ in seen if key == mesh_key)  # type: ignore[attr-defined]
        return step


def clear() -> None:
    """Drops every shared executable (a test that counts compiles from scratch)."""
    _JITTED.clear()
