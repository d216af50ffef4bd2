# ruff: noqa
# shared pieces for the broken loops (plain helpers, no toolkit imports)
import numpy as np
import jax
import jax.numpy as jnp
import optax

DIM = 6
TX = optax.adam(5e-3)


class Rows:
    def __init__(self, n=4000):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        i = int(i)
        r = np.random.default_rng(7 * i + 3)
        x = r.standard_normal(DIM).astype(np.float32)
        return {"id": np.int64(i), "x": x, "y": np.float32(np.tanh(x[:3].sum()))}

    def __repr__(self):
        return f"Rows({self.n})"


def init_params():
    return {"w1": jnp.full((DIM, 8), 0.1, jnp.float32), "w2": jnp.full((8,), 0.1, jnp.float32)}


def loss(p, x, y):
    return jnp.mean((jnp.tanh(x @ p["w1"]) @ p["w2"] - y) ** 2)


@jax.jit
def step(p, o, x, y):
    g = jax.grad(loss)(p, x, y)
    u, o = TX.update(g, o, p)
    return optax.apply_updates(p, u), o


@jax.jit
def noisy_step(p, o, x, y, key):
    x = x + 0.05 * jax.random.normal(key, x.shape)
    g = jax.grad(loss)(p, x, y)
    u, o = TX.update(g, o, p)
    return optax.apply_updates(p, u), o
