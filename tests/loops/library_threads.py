"""A correct loop that meets an upstream library's leftover thread: orbax's ``save_pytree``
raising mid-save (here on a deleted array; on Pathways, a slice lost under a save) leaves a
non-daemon thread of orbax's waiting for a signal until orbax's own timeout (300 s), and the
process cannot exit before then. Nothing in the loop started it."""

from __future__ import annotations

import contextlib
import tempfile
from typing import Any

from pathways_chaos.harness.reference.user_loop import main as sample


def orbax_save_that_raised(**options: Any) -> Any:
    import jax.numpy as jnp
    from orbax.checkpoint import v1 as ocp

    state = sample(**options)
    gone = jnp.ones(4)
    gone.delete()
    # "Array has been deleted": the loop carries on, as it should.
    with contextlib.suppress(RuntimeError):
        ocp.save_pytree(f"{tempfile.mkdtemp()}/c", {"gone": gone})
    return state
