"""A small deterministic model: a two-layer MLP trained by SGD with momentum.

Pure functions of (state, batch), so the oracle's one-device replay runs the very same math.
"""

from __future__ import annotations

from typing import Any

from pathways_chaos.harness.reference.data import FEATURES

HIDDEN = 16

State = dict[str, Any]


def init_state(seed: int = 0) -> State:
    import jax
    import jax.numpy as jnp

    k1, k2 = jax.random.split(jax.random.key(seed))
    params = {
        "w1": jax.random.normal(k1, (FEATURES, HIDDEN), jnp.float32) * 0.3,
        "b1": jnp.zeros((HIDDEN,), jnp.float32),
        "w2": jax.random.normal(k2, (HIDDEN, 1), jnp.float32) * 0.3,
    }
    momentum = jax.tree.map(jnp.zeros_like, params)
    return {"params": params, "momentum": momentum}


def loss_fn(params: Any, x: Any, y: Any) -> Any:
    import jax.numpy as jnp

    h = jnp.tanh(x @ params["w1"] + params["b1"])
    prediction = (h @ params["w2"])[:, 0]
    return jnp.mean((prediction - y) ** 2)


def train_step(state: State, x: Any, y: Any, lr: float = 0.05, beta: float = 0.9) -> tuple:
    import jax

    loss, grads = jax.value_and_grad(loss_fn)(state["params"], x, y)
    momentum = jax.tree.map(lambda m, g: beta * m + g, state["momentum"], grads)
    params = jax.tree.map(lambda p, m: p - lr * m, state["params"], momentum)
    return {"params": params, "momentum": momentum}, loss
